// Export and import: the SQLite store's document, table by table and column by column (same
// names, same value types, same time text), so `kernex memory export` from one store imports
// into the other and back unchanged.
#include <algorithm>

#include "pg_store.hpp"
#include "text_rules.hpp"

namespace kernex::postgres {
namespace {

constexpr const char* kFormat = "kernex-memory";
constexpr int kVersion = 1;

struct Column {
  const char* name;
  char type;  // 't' text, 'i' integer, 'r' real
  // Added after the format's first version: exported only when set, so an export loads into a
  // kernex that predates the column (its import rejects unknown columns); a document without it
  // imports (NULL).
  bool omitted_when_null = false;
};
struct Table {
  const char* name;
  const char* order;
  std::vector<Column> columns;     // the SQLite table's columns, in its order
  const char* identity = nullptr;  // a column whose sequence must pass the imported ids
};

// The SQLite store's tables, in export order, each with its columns.
const std::vector<Table> kTables = {
    {"conversations",
     "rid",
     {{"id", 't'},
      {"channel", 't'},
      {"sender_id", 't'},
      {"project", 't'},
      {"status", 't'},
      {"started_at", 't'},
      {"last_activity", 't'},
      {"message_count", 'i'}}},
    {"messages",
     "seq",
     {{"seq", 'i'},
      {"conversation_id", 't'},
      {"role", 't'},
      {"content", 't'},
      {"tool_calls", 't'},
      {"tool_result", 't'},
      {"provider_state", 't'},
      {"created_at", 't'}},
     "seq"},
    {"summaries",
     "id",
     {{"id", 'i'},
      {"conversation_id", 't'},
      {"text", 't'},
      {"covered_messages", 'i'},
      {"updated_at", 't'}},
     "id"},
    {"facts",
     "sender_id COLLATE \"C\", key COLLATE \"C\"",
     {{"sender_id", 't'},
      {"key", 't'},
      {"value", 't'},
      {"created_at", 't'},
      {"updated_at", 't'},
      {"deleted_at", 't'}}},
    {"lessons",
     "id",
     {{"id", 'i'},
      {"sender_id", 't'},
      {"domain", 't'},
      {"rule", 't'},
      {"project", 't'},
      {"occurrences", 'i'},
      {"recency", 'i'},
      {"created_at", 't'},
      {"updated_at", 't'}},
     "id"},
    {"outcomes",
     "id",
     {{"id", 'i'},
      {"created_at", 't'},
      {"sender_id", 't'},
      {"domain", 't'},
      {"score", 'i'},
      {"lesson", 't'},
      {"source", 't'},
      {"project", 't'}},
     "id"},
    {"audit_log",
     "id",
     {{"id", 'i'},
      {"created_at", 't'},
      {"conversation_id", 't'},
      {"sender_id", 't'},
      {"agent", 't'},
      {"tool", 't'},
      {"arguments", 't'},
      {"result", 't'},
      {"status", 't'},
      {"reason", 't'}},
     "id"},
    {"token_usage",
     "id",
     {{"id", 'i'},
      {"conversation_id", 't'},
      {"sender_id", 't'},
      {"model", 't'},
      {"provider", 't'},
      {"input_tokens", 'i'},
      {"output_tokens", 'i'},
      {"cache_read_tokens", 'i'},
      {"cache_write_tokens", 'i'},
      {"cost_usd", 'r'},
      {"created_at", 't'}},
     "id"},
    {"scheduled_tasks",
     "rid",
     {{"id", 't'},
      {"channel", 't'},
      {"sender_id", 't'},
      {"reply_target", 't'},
      {"description", 't'},
      {"due_at", 't'},
      {"repeat", 't'},
      {"task_type", 't'},
      {"project", 't'},
      {"status", 't'},
      {"retry_count", 'i'},
      {"max_retries", 'i'},
      {"last_error", 't'},
      {"claimed_by", 't'},
      {"lease_until", 't'},
      {"created_at", 't'},
      {"delivered_at", 't'},
      {"retry_at", 't', true}}},
    {"task_runs",
     "rid",
     {{"id", 't'},
      {"task_id", 't'},
      {"started_at", 't'},
      {"finished_at", 't'},
      {"status", 't'},
      {"result", 't'},
      {"error", 't'},
      {"tokens", 'i'}}},
};

// Messages and summaries belong to their conversation's tenant; every other table has a tenant
// column. An export holds one scope's rows and no tenant; an import puts every row in its scope.
bool has_tenant(const Table& t) {
  const std::string_view name(t.name);
  return name != "messages" && name != "summaries";
}

Result<Json> export_table(pg::Connection& c, const MemoryScope& scope, const Table& t) {
  std::string names;
  for (const auto& col : t.columns) names += (names.empty() ? "" : ", ") + std::string(col.name);
  const std::string filter =
      has_tenant(t) ? " WHERE tenant = $1"
                    : " WHERE conversation_id IN (SELECT id FROM conversations WHERE tenant = $1)";
  KERNEX_ASSIGN_OR_RETURN(
      auto rows, c.exec("SELECT " + names + " FROM " + t.name + filter + " ORDER BY " + t.order,
                        {scope.tenant()}));
  Json out = Json::array();
  for (int i = 0; i < rows.size(); ++i) {
    Json obj = Json::object();
    for (int k = 0; k < static_cast<int>(t.columns.size()); ++k) {
      const Column& col = t.columns[static_cast<std::size_t>(k)];
      if (rows.null(i, k) && col.omitted_when_null) continue;
      Json& v = obj[col.name];
      if (rows.null(i, k)) {
        v = nullptr;
      } else if (col.type == 'i') {
        v = rows.int64(i, k);
      } else if (col.type == 'r') {
        v = rows.real(i, k);
      } else {
        v = rows.text(i, k);
      }
    }
    out.push_back(std::move(obj));
  }
  return out;
}

// A message or summary may only join a conversation of the import's own scope (one imported
// just before, or one the scope had): an id of another tenant's conversation is refused.
Result<void> owned_conversation(pg::Connection& c, const MemoryScope& scope, const Json& row,
                                const std::string& where) {
  const auto it = row.find("conversation_id");
  if (it == row.end() || !it->is_string())
    return fail(ErrorCode::Parse, where + ".conversation_id must be a string");
  if (it->get_ref<const std::string&>().find('\0') != std::string::npos)
    return fail(ErrorCode::Parse, where + ".conversation_id holds a NUL byte");
  KERNEX_ASSIGN_OR_RETURN(auto found,
                          c.exec("SELECT 1 FROM conversations WHERE id = $1 AND tenant = $2",
                                 {it->get<std::string>(), scope.tenant()}));
  if (found.empty())
    return fail(ErrorCode::Memory, where + ": no conversation " + it->get<std::string>() +
                                       " in this scope; nothing was imported");
  return {};
}

Result<void> import_row(pg::Connection& c, const MemoryScope& scope, const Table& t,
                        const Json& row, const std::string& where) {
  if (!row.is_object()) return fail(ErrorCode::Parse, where + " must be an object");
  if (!has_tenant(t)) KERNEX_RETURN_IF_ERROR(owned_conversation(c, scope, row, where));
  std::string names, marks;
  std::vector<pg::Param> params;
  for (const auto& [k, v] : row.items()) {
    const auto col = std::find_if(t.columns.begin(), t.columns.end(),
                                  [&](const Column& x) { return k == x.name; });
    if (col == t.columns.end())
      return fail(ErrorCode::Parse, where + ": unknown column '" + k + "'");
    if (v.is_structured())
      return fail(ErrorCode::Parse, where + "." + k + " must be a string, number or null");
    names += (names.empty() ? "" : ", ") + k;
    marks += (marks.empty() ? "$" : ", $") + std::to_string(params.size() + 1);
    if (v.is_null()) {
      params.emplace_back(std::nullopt);
    } else if (v.is_string()) {
      const auto& s = v.get_ref<const std::string&>();
      if (sqlite::invalid_utf8_at(s))
        return fail(ErrorCode::Parse, where + "." + k + " is not valid UTF-8");
      if (s.find('\0') != std::string::npos)
        return fail(ErrorCode::Parse, where + "." + k + " holds a NUL byte");
      params.emplace_back(s);
    } else if (v.is_number_float()) {
      params.emplace_back(v.get<double>());
    } else if (v.is_boolean()) {
      params.emplace_back(v.get<bool>() ? 1 : 0);
    } else if (v.is_number_unsigned()) {
      params.emplace_back(v.get<std::uint64_t>());
    } else {
      params.emplace_back(v.get<std::int64_t>());
    }
  }
  if (names.empty()) return fail(ErrorCode::Parse, where + " is empty");
  if (has_tenant(t)) {
    names += ", tenant";
    marks += ", $" + std::to_string(params.size() + 1);
    params.emplace_back(scope.tenant());
  }
  auto r = c.exec(std::string("INSERT INTO ") + t.name + " (" + names + ") VALUES (" + marks + ")",
                  params);
  if (!r) return fail(r.error().code, where + " was not imported; nothing was", r.error());
  return {};
}

}  // namespace

Result<Json> PgStore::export_json(const MemoryScope& scope) {
  // One snapshot for every table, even while other processes write.
  return transaction<Json>([&](pg::Connection& c) -> Result<Json> {
    if (auto r = c.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"); !r) {
      return std::unexpected(r.error());
    }
    Json doc{{"format", kFormat}, {"version", kVersion}};
    for (const auto& t : kTables) {
      KERNEX_ASSIGN_OR_RETURN(auto rows, export_table(c, scope, t));
      doc[t.name] = std::move(rows);
    }
    return doc;
  });
}

Result<void> PgStore::import_json(const MemoryScope& scope, const Json& doc) {
  // Checked by type first: Json::value() throws on a key of another type, and this is a user's
  // file.
  const auto field = [&](const char* key) {
    return doc.is_object() && doc.contains(key) ? doc.at(key) : Json();
  };
  if (!field("format").is_string() || field("format").get<std::string>() != kFormat) {
    return fail(ErrorCode::Parse,
                "postgres memory: import: not a kernex memory export (expected \"format\": \"" +
                    std::string(kFormat) + "\")");
  }
  if (!field("version").is_number_integer() || field("version").get<std::int64_t>() != kVersion) {
    return fail(ErrorCode::Parse,
                "postgres memory: import: unsupported export version " + field("version").dump());
  }
  return transaction<void>([&](pg::Connection& c) -> Result<void> {
    for (const auto& t : kTables) {
      if (!doc.contains(t.name)) continue;
      const Json& rows = doc.at(t.name);
      if (!rows.is_array()) {
        return fail(ErrorCode::Parse,
                    std::string("postgres memory: import: '") + t.name + "' must be an array");
      }
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::string where =
            std::string("postgres memory: import: ") + t.name + "[" + std::to_string(i) + "]";
        if (auto r = import_row(c, scope, t, rows[i], where); !r) return r;
      }
      // Ids were given explicitly: the identity sequence moves past them, or new rows would
      // collide.
      if (t.identity) {
        const std::string sql = std::string("SELECT setval(pg_get_serial_sequence('") + t.name +
                                "', '" + t.identity + "'), coalesce((SELECT max(" + t.identity +
                                ") FROM " + t.name + "), 0) + 1, false)";
        KERNEX_RETURN_IF_ERROR(c.exec(sql));
      }
    }
    return {};
  });
}

}  // namespace kernex::postgres
