// Export and import: every table as rows of plain JSON values, in an order that satisfies
// foreign keys, so an export loads into an empty store unchanged.
#include <set>
#include <string_view>

#include "sqlite_store.hpp"
#include "text_rules.hpp"

namespace kernex::sqlite {
namespace {

constexpr const char* kFormat = "kernex-memory";
constexpr int kVersion = 1;

struct Table {
  const char* name;
  const char* order;
};
constexpr Table kTables[] = {
    {"conversations", "rowid"},  {"messages", "seq"},   {"summaries", "id"},
    {"facts", "sender_id, key"}, {"lessons", "id"},     {"outcomes", "id"},
    {"audit_log", "id"},         {"token_usage", "id"}, {"scheduled_tasks", "rowid"},
    {"task_runs", "rowid"},
};

// Columns added after the format's first version: exported only when set, so an export loads
// into a kernex that predates them (its import rejects unknown columns), and a document without
// them imports here (they stay NULL).
bool omitted_when_null(const char* table, const std::string& column) {
  return std::string_view(table) == "scheduled_tasks" && column == "retry_at";
}

// Messages and summaries belong to their conversation's tenant; every other table has a tenant
// column. An export holds one scope's rows and no tenant; an import puts every row in its scope.
bool has_tenant(const char* table) {
  const std::string_view t(table);
  return t != "messages" && t != "summaries";
}

std::string scope_filter(const char* table) {
  return has_tenant(table)
             ? " WHERE tenant = ?"
             : " WHERE conversation_id IN (SELECT id FROM conversations WHERE tenant = ?)";
}

Result<std::vector<std::string>> columns(Db& db, const char* table) {
  const std::string sql = std::string("SELECT name FROM pragma_table_info('") + table + "')";
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db.prepare(sql.c_str()));
  std::vector<std::string> out;
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
    if (!row) break;
    out.push_back(stmt.text(0));
  }
  return out;
}

}  // namespace

Result<Json> SqliteStore::export_json(const MemoryScope& scope) {
  settle();
  Hold lock(*this, Hold::Mode::Write);
  // One read transaction: a consistent snapshot even while other processes write.
  KERNEX_RETURN_IF_ERROR(db_->exec("BEGIN"));
  Json doc{{"format", kFormat}, {"version", kVersion}};
  for (const auto& t : kTables) {
    auto cols = columns(*db_, t.name);
    if (!cols) {
      (void)db_->exec("ROLLBACK");
      return std::unexpected(cols.error());
    }
    const std::string sql =
        std::string("SELECT * FROM ") + t.name + scope_filter(t.name) + " ORDER BY " + t.order;
    auto stmt = db_->prepare(sql.c_str());
    if (!stmt) {
      (void)db_->exec("ROLLBACK");
      return std::unexpected(stmt.error());
    }
    stmt->bind(1, scope.tenant());
    Json rows = Json::array();
    for (;;) {
      auto row = stmt->step();
      if (!row) {
        (void)db_->exec("ROLLBACK");
        return std::unexpected(row.error());
      }
      if (!*row) break;
      Json obj = Json::object();
      for (int i = 0; i < static_cast<int>(cols->size()); ++i) {
        const std::string& name = (*cols)[static_cast<std::size_t>(i)];
        if (name == "tenant") continue;
        if (stmt->null(i) && omitted_when_null(t.name, name)) continue;
        Json& v = obj[name];
        if (stmt->null(i)) {
          v = nullptr;
        } else if (stmt->is_integer(i)) {
          v = stmt->integer(i);
        } else if (stmt->is_real(i)) {
          v = stmt->real(i);
        } else {
          v = stmt->text(i);
        }
      }
      rows.push_back(std::move(obj));
    }
    doc[t.name] = std::move(rows);
  }
  (void)db_->exec("COMMIT");
  return doc;
}

// A message or summary may only join a conversation of the import's own scope (one imported
// just before, or one the scope had): an id of another tenant's conversation is refused.
Result<void> SqliteStore::owned_conversation(const MemoryScope& scope, const Json& row,
                                             const std::string& where) {
  const auto it = row.find("conversation_id");
  if (it == row.end() || !it->is_string())
    return fail(ErrorCode::Parse, where + ".conversation_id must be a string");
  KERNEX_ASSIGN_OR_RETURN(auto stmt,
                          db_->prepare("SELECT 1 FROM conversations WHERE id = ? AND tenant = ?"));
  stmt.bind_all(it->get_ref<const std::string&>(), scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto found, stmt.step());
  if (!found)
    return fail(ErrorCode::Memory, where + ": no conversation " + it->get<std::string>() +
                                       " in this scope; nothing was imported");
  return {};
}

Result<void> SqliteStore::import_json(const MemoryScope& scope, const Json& doc) {
  // Checked by type first: Json::value() throws on a key of another type, and this is a user's
  // file.
  const auto field = [&](const char* key) {
    return doc.is_object() && doc.contains(key) ? doc.at(key) : Json();
  };
  if (!field("format").is_string() || field("format").get<std::string>() != kFormat) {
    return fail(ErrorCode::Parse,
                "memory-sqlite: import: not a kernex memory export (expected \"format\": \"" +
                    std::string(kFormat) + "\")");
  }
  if (!field("version").is_number_integer() || field("version").get<std::int64_t>() != kVersion) {
    return fail(ErrorCode::Parse,
                "memory-sqlite: import: unsupported export version " + field("version").dump());
  }
  Hold lock(*this, Hold::Mode::Write);
  hot_.clear();  // the import may add messages to conversations hot_ holds
  return db_->write<void>([&]() -> Result<void> {
    for (const auto& t : kTables) {
      if (!doc.contains(t.name)) continue;
      const Json& rows = doc.at(t.name);
      if (!rows.is_array())
        return fail(ErrorCode::Parse,
                    std::string("memory-sqlite: import: '") + t.name + "' must be an array");
      KERNEX_ASSIGN_OR_RETURN(auto cols, columns(*db_, t.name));
      const std::set<std::string> known(cols.begin(), cols.end());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const Json& row = rows[i];
        const std::string where =
            std::string("memory-sqlite: import: ") + t.name + "[" + std::to_string(i) + "]";
        if (!row.is_object()) return fail(ErrorCode::Parse, where + " must be an object");
        std::string names, marks;
        for (const auto& [k, v] : row.items()) {
          if (!known.contains(k) || k == "tenant")
            return fail(ErrorCode::Parse,
                        where + ": unknown column '" + k + "'" +
                            (k == "tenant" ? " (rows go to the import's scope)" : ""));
          if (v.is_structured())
            return fail(ErrorCode::Parse, where + "." + k + " must be a string, number or null");
          names += (names.empty() ? "" : ", ") + k;
          marks += marks.empty() ? "?" : ", ?";
        }
        if (names.empty()) return fail(ErrorCode::Parse, where + " is empty");
        if (has_tenant(t.name)) {
          names += ", tenant";
          marks += ", ?";
        } else {
          KERNEX_RETURN_IF_ERROR(owned_conversation(scope, row, where));
        }
        const std::string sql =
            std::string("INSERT INTO ") + t.name + " (" + names + ") VALUES (" + marks + ")";
        KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql.c_str()));
        int n = 0;
        for (const auto& [k, v] : row.items()) {
          ++n;
          if (v.is_null()) {
            stmt.bind(n, std::nullopt);
          } else if (v.is_string()) {
            const auto& s = v.get_ref<const std::string&>();
            if (invalid_utf8_at(s))
              return fail(ErrorCode::Parse, where + "." + k + " is not valid UTF-8");
            stmt.bind(n, s);
          } else if (v.is_number_float()) {
            stmt.bind(n, v.get<double>());
          } else if (v.is_boolean()) {
            stmt.bind(n, v.get<bool>() ? 1 : 0);
          } else {
            stmt.bind(n, v.get<std::int64_t>());
          }
        }
        if (has_tenant(t.name)) stmt.bind(++n, scope.tenant());
        if (auto r = stmt.run(); !r)
          return fail(ErrorCode::Memory, where + " was not imported; nothing was", r.error());
      }
    }
    return {};
  });
}

}  // namespace kernex::sqlite
