// Conversations, history, summaries, facts, audit and usage.
#include "pg_store.hpp"

#include <algorithm>

#include "message_columns.hpp"
#include "migrations.hpp"
#include "text_rules.hpp"

namespace kernex::postgres {
namespace {

// Messages and summaries are the conversation's: a conversation id of another tenant matches
// nothing. ID and TENANT are the placeholders of the conversation id and the tenant.
#define SCOPED_CONVERSATION(ID, TENANT) \
  "(SELECT id FROM conversations WHERE id = " ID " AND tenant = " TENANT ")"

using sqlite::dump_checked;
using sqlite::invalid_utf8_at;

// Columns from `first`: seq, role, content, tool_calls, tool_result, provider_state.
Result<ContextEntry> read_entry(const pg::Rows& rows, int row, int first) {
  return sqlite::decode_columns(
      {rows.int64(row, first), rows.text(row, first + 1), rows.text(row, first + 2),
       rows.optional_text(row, first + 3), rows.optional_text(row, first + 4),
       rows.optional_text(row, first + 5)},
      "postgres memory");
}

// PostgreSQL text cannot hold NUL; SQLite's can. Refused up front so nothing is cut short.
std::optional<std::string> text_problem(std::string_view s) {
  if (auto at = invalid_utf8_at(s))
    return "is not valid UTF-8 (bad byte at offset " + std::to_string(*at) + ")";
  if (auto at = s.find('\0'); at != std::string_view::npos) {
    return "holds a NUL byte at offset " + std::to_string(at) + " (PostgreSQL text cannot)";
  }
  return std::nullopt;
}

Result<void> check_entry(const ContextEntry& e, std::size_t index, std::size_t max_bytes) {
  const std::string which =
      "postgres memory: message " + std::to_string(index + 1) + " of the exchange (" + e.role + ")";
  const std::string unsaved = "; nothing of this exchange was saved";
  if (auto p = text_problem(e.content))
    return fail(ErrorCode::Parse, which + ": content " + *p + unsaved);
  std::size_t size = e.content.size();
  for (const auto& c : e.tool_calls)
    size += c.arguments.dump(-1, ' ', false, Json::error_handler_t::replace).size();
  if (e.tool_result) size += e.tool_result->content.size();
  if (size > max_bytes) {
    return fail(ErrorCode::Limit, which + ": " + std::to_string(size) +
                                      " bytes, over max_message_bytes (" +
                                      std::to_string(max_bytes) + ")" + unsaved);
  }
  if (e.tool_result) {
    if (auto p = text_problem(e.tool_result->content)) {
      return fail(ErrorCode::Parse, which + ": tool result " + *p + unsaved);
    }
  }
  return {};
}

Result<void> no_conversation(const std::string& id) {
  return fail(ErrorCode::Memory, "postgres memory: no conversation " + id);
}

}  // namespace

Result<void> PgStore::check_message(const ContextEntry& entry) const {
  return check_entry(entry, 0, options_.max_message_bytes);
}

Result<std::shared_ptr<PgStore>> PgStore::open(const StoreOptions& options) {
  std::shared_ptr<PgStore> store(new PgStore(options));
  KERNEX_RETURN_IF_ERROR(migrate(*store->pool_));
  return store;
}

Result<pg::Rows> PgStore::query(std::string_view sql, std::initializer_list<pg::Param> params) {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_->acquire());
  return (lease)->exec(sql, params);
}

// ---- Conversations ----

Result<std::string> PgStore::open_conversation(const MemoryScope& scope, const ConversationKey& key,
                                               std::chrono::minutes idle) {
  static constexpr std::string_view kFind =
      "SELECT id FROM conversations WHERE tenant = $5 AND channel = $1 AND sender_id = $2 AND "
      "project = $3 AND status = 'active' "
      "AND last_activity > kx_time(now() AT TIME ZONE 'UTC' - make_interval(mins => $4::int)) "
      "ORDER BY last_activity DESC, rid DESC LIMIT 1";
  // At most a thousand years back: further, the date would leave what the time text can express.
  const auto minutes = std::clamp<std::int64_t>(idle.count(), 0, 1000LL * 366 * 24 * 60);
  auto found = query(kFind, {key.channel, key.sender_id, key.project, minutes, scope.tenant()});
  if (!found) return std::unexpected(found.error());
  if (!found->empty()) return found->text(0, 0);
  // Created as one write of the writer's batches, so a new session's conversation shares a commit
  // with the other runs' writes. Two processes opening the same key at once: a transaction lock on
  // the key serialises them, and the second finds the first one's conversation (the statement
  // after the lock reads it, or inserts and returns its own).
  pg::Write w;
  w.statements.push_back(
      {"SELECT pg_advisory_xact_lock(hashtextextended($4 || chr(31) || $1 || chr(31) || $2 || "
       "chr(31) || $3, 0))",
       {key.channel, key.sender_id, key.project, scope.tenant()}});
  w.statements.push_back(
      {"WITH found AS (" + std::string(kFind) +
           "), ins AS (INSERT INTO conversations (id, channel, sender_id, project, tenant) SELECT "
           "$6, $1, $2, $3, $5 WHERE NOT EXISTS (SELECT 1 FROM found) RETURNING id) "
           "SELECT id FROM found UNION ALL SELECT id FROM ins",
       {key.channel, key.sender_id, key.project, minutes, scope.tenant(),
        sqlite::new_time_ordered_uuid()}});
  // Set by the check on the writer's thread (each time the batch runs), read once it returned.
  auto id = std::make_shared<std::string>();
  w.check = [id](const std::vector<pg::Rows>& rows) -> Result<bool> {
    if (rows.size() < 2) return true;  // a statement failed: its own error says why
    if (rows[1].empty()) {
      return fail(ErrorCode::Memory,
                  "postgres memory: the conversation was neither found nor "
                  "created");
    }
    *id = rows[1].text(0, 0);
    return true;
  };
  KERNEX_RETURN_IF_ERROR(write(w));
  return *id;
}

Result<std::vector<ContextEntry>> PgStore::select_entries(std::string_view sql,
                                                          const MemoryScope& scope,
                                                          const std::string& conversation_id,
                                                          std::size_t n, bool reverse) {
  KERNEX_ASSIGN_OR_RETURN(auto rows, query(sql, {conversation_id, count_param(n), scope.tenant()}));
  std::vector<ContextEntry> out;
  for (int i = 0; i < rows.size(); ++i) {
    KERNEX_ASSIGN_OR_RETURN(auto e, read_entry(rows, i, 0));
    out.push_back(std::move(e));
  }
  if (reverse) std::reverse(out.begin(), out.end());
  return out;
}

Result<std::vector<ContextEntry>> PgStore::recent_messages(const MemoryScope& scope,
                                                           const std::string& conversation_id,
                                                           std::size_t limit) {
  return select_entries(
      "SELECT seq, role, content, tool_calls, tool_result, provider_state FROM messages "
      "WHERE conversation_id = " SCOPED_CONVERSATION("$1",
                                                     "$3") " ORDER BY seq DESC LIMIT $2::bigint",
      scope, conversation_id, limit, true);
}

Result<std::vector<ContextEntry>> PgStore::oldest_messages(const MemoryScope& scope,
                                                           const std::string& conversation_id,
                                                           std::size_t count) {
  return select_entries(
      "SELECT seq, role, content, tool_calls, tool_result, provider_state FROM messages "
      "WHERE conversation_id = " SCOPED_CONVERSATION("$1",
                                                     "$3") " ORDER BY seq ASC LIMIT $2::bigint",
      scope, conversation_id, count, false);
}

Result<std::uint64_t> PgStore::message_count(const MemoryScope& scope,
                                             const std::string& conversation_id) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows, query("SELECT message_count FROM conversations WHERE id = $1 AND tenant = $2",
                       {conversation_id, scope.tenant()}));
  if (rows.empty()) return std::unexpected(no_conversation(conversation_id).error());
  return static_cast<std::uint64_t>(rows.int64(0, 0));
}

namespace {

// Checked and encoded before anything is written, so a bad entry leaves the exchange unsaved as a
// whole.
Result<std::vector<sqlite::EncodedColumns>> encode_exchange(
    const std::vector<ContextEntry>& entries, std::size_t max_message_bytes) {
  std::vector<sqlite::EncodedColumns> encoded;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    KERNEX_RETURN_IF_ERROR(check_entry(entries[i], i, max_message_bytes));
    KERNEX_ASSIGN_OR_RETURN(auto e, sqlite::encode_columns(entries[i]));
    encoded.push_back(std::move(e));
  }
  return encoded;
}

// The conversation's counters, then the entries: statements of one write, the counters' first
// (a check on it says when the conversation is not the scope's).
std::vector<pg::Statement> exchange_statements(const MemoryScope& scope,
                                               const std::string& conversation_id,
                                               const std::vector<ContextEntry>& entries,
                                               const std::vector<sqlite::EncodedColumns>& encoded) {
  std::vector<pg::Statement> out;
  out.push_back(
      {"UPDATE conversations SET last_activity = kx_now(), message_count = "
       "message_count + $1::bigint WHERE id = $2 AND tenant = $3",
       {static_cast<std::int64_t>(entries.size()), conversation_id, scope.tenant()}});
  // One statement per 1000 entries (a VALUES list assigns seq in its own order), not one per
  // entry.
  constexpr std::size_t kPerStatement = 1000;
  for (std::size_t first = 0; first < entries.size(); first += kPerStatement) {
    std::string sql =
        "INSERT INTO messages (conversation_id, role, content, tool_calls, tool_result, "
        "provider_state) VALUES ";
    std::vector<pg::Param> params{conversation_id};
    for (std::size_t i = first; i < std::min(entries.size(), first + kPerStatement); ++i) {
      const auto n = params.size();
      sql += (i == first ? "($1" : ", ($1");
      for (std::size_t k = 1; k <= 5; ++k) sql += ", $" + std::to_string(n + k);
      sql += ")";
      params.insert(params.end(), {entries[i].role, entries[i].content, encoded[i].calls,
                                   encoded[i].result, encoded[i].state});
    }
    out.push_back({std::move(sql), std::move(params)});
  }
  return out;
}

pg::Statement usage_statement(const MemoryScope& scope, const UsageRecord& rec) {
  return {
      "INSERT INTO token_usage (conversation_id, sender_id, model, provider, input_tokens, "
      "output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, tenant) VALUES ($1, "
      "$2, $3, $4, $5::bigint, $6::bigint, $7::bigint, $8::bigint, $9::double precision, $10)",
      {rec.conversation_id, rec.sender_id, rec.model, rec.provider,
       count_param(rec.usage.input_tokens), count_param(rec.usage.output_tokens),
       count_param(rec.usage.cache_read_tokens), count_param(rec.usage.cache_write_tokens),
       rec.usage.cost_usd, scope.tenant()}};
}

// An UPDATE at `at` that touched no row: the conversation is not in this scope.
auto touches_conversation(std::size_t at, std::string id) {
  return [at, id = std::move(id)](const std::vector<pg::Rows>& rows) -> Result<bool> {
    if (rows.size() > at && rows[at].affected() == 0)
      return std::unexpected(no_conversation(id).error());
    return true;
  };
}

// An audit row's arguments as stored, once the row is one the log can keep.
Result<std::string> audit_arguments(const AuditRecord& rec) {
  if (rec.status != "ok" && rec.status != "error" && rec.status != "denied") {
    return fail(
        ErrorCode::Usage,
        "postgres memory: audit status must be ok, error or denied, got '" + rec.status + "'");
  }
  KERNEX_ASSIGN_OR_RETURN(auto args, dump_checked(rec.arguments, "audited tool arguments"));
  for (const std::string* s : {&rec.result, &rec.reason, &rec.tool, &rec.agent}) {
    if (auto p = text_problem(*s))
      return fail(ErrorCode::Parse, "postgres memory: audit record " + *p);
  }
  return args;
}

pg::Statement audit_statement(const MemoryScope& scope, const AuditRecord& rec,
                              const std::string& args) {
  std::optional<std::string> at =
      rec.timestamp.empty() ? std::nullopt : std::optional(rec.timestamp);
  return {
      "INSERT INTO audit_log (created_at, conversation_id, sender_id, agent, tool, "
      "arguments, result, status, reason, tenant) "
      "VALUES (coalesce($1, kx_now()), $2, $3, $4, $5, $6, $7, $8, $9, $10)",
      {at, rec.conversation_id, rec.sender_id, rec.agent, rec.tool, args, rec.result, rec.status,
       rec.reason, scope.tenant()}};
}

}  // namespace

Result<void> PgStore::append_messages(const MemoryScope& scope, const std::string& conversation_id,
                                      const std::vector<ContextEntry>& entries) {
  KERNEX_ASSIGN_OR_RETURN(auto encoded, encode_exchange(entries, options_.max_message_bytes));
  return write({exchange_statements(scope, conversation_id, entries, encoded),
                touches_conversation(0, conversation_id)});
}

// One write (one share of a batched commit) for the exchange, its usage row and its key.
Result<void> PgStore::save_exchange(const MemoryScope& scope, const ExchangeRecord& record) {
  KERNEX_ASSIGN_OR_RETURN(auto encoded,
                          encode_exchange(record.messages, options_.max_message_bytes));
  pg::Write w;
  std::vector<pg::Statement> audits;  // checked before the write: all of the turn or nothing
  for (const auto& rec : record.audits) {
    KERNEX_ASSIGN_OR_RETURN(auto args, audit_arguments(rec));
    audits.push_back(audit_statement(scope, rec, args));
  }
  const bool keyed = !record.idempotency_key.empty();
  if (keyed) {
    // Committed with the exchange: a second save under the key finds it and saves nothing. The
    // SELECT after the claim sees a save another transaction committed meanwhile.
    w.statements.push_back(
        {"INSERT INTO saved_exchanges (tenant, key, conversation_id) SELECT $1, $2, id FROM "
         "conversations WHERE id = $3 AND tenant = $1 ON CONFLICT DO NOTHING",
         {scope.tenant(), record.idempotency_key, record.conversation_id}});
    w.statements.push_back({"SELECT 1 FROM saved_exchanges WHERE tenant = $1 AND key = $2",
                            {scope.tenant(), record.idempotency_key}});
  }
  for (auto& st : exchange_statements(scope, record.conversation_id, record.messages, encoded))
    w.statements.push_back(std::move(st));
  if (record.usage) w.statements.push_back(usage_statement(scope, *record.usage));
  for (auto& st : audits) w.statements.push_back(std::move(st));
  const std::size_t touch = keyed ? 2 : 0;
  w.check = [keyed, touch,
             id = record.conversation_id](const std::vector<pg::Rows>& rows) -> Result<bool> {
    if (keyed && rows.size() > 1 && rows[0].affected() == 0) {
      if (!rows[1].empty()) return false;  // saved before: undone, and that is success
      return std::unexpected(no_conversation(id).error());
    }
    return touches_conversation(touch, id)(rows);
  };
  return write(w);
}

Result<std::optional<StoredSummary>> PgStore::compaction_summary(
    const MemoryScope& scope, const std::string& conversation_id) {
  KERNEX_ASSIGN_OR_RETURN(auto rows, query("SELECT text, covered_messages FROM summaries WHERE "
                                           "conversation_id = " SCOPED_CONVERSATION("$1", "$2"),
                                           {conversation_id, scope.tenant()}));
  if (rows.empty()) return std::optional<StoredSummary>();
  return std::optional<StoredSummary>(
      StoredSummary{rows.text(0, 0), static_cast<std::uint64_t>(rows.int64(0, 1))});
}

Result<void> PgStore::save_compaction_summary(const MemoryScope& scope,
                                              const std::string& conversation_id,
                                              const StoredSummary& summary) {
  if (auto p = text_problem(summary.text))
    return fail(ErrorCode::Parse, "postgres memory: summary " + *p);
  return write(
      {{{"INSERT INTO summaries (conversation_id, text, covered_messages, updated_at) "
         "SELECT id, $2, $3::bigint, kx_now() FROM conversations WHERE id = $1 AND tenant = $4 "
         "ON CONFLICT (conversation_id) DO UPDATE SET "
         "text = excluded.text, covered_messages = excluded.covered_messages, updated_at = "
         "excluded.updated_at",
         {conversation_id, summary.text, count_param(summary.covered_messages), scope.tenant()}}},
       touches_conversation(0, conversation_id)});
}

Result<std::vector<ConversationInfo>> PgStore::list_conversations(
    const MemoryScope& scope, const ConversationFilter& filter) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query("SELECT c.id, c.channel, c.sender_id, c.project, c.status, c.started_at, "
            "c.last_activity, "
            "c.message_count, "
            "s.text FROM conversations c LEFT JOIN summaries s ON s.conversation_id = c.id "
            "WHERE c.tenant = $4 AND ($1::text IS NULL OR c.channel = $1) AND ($2::text IS NULL OR "
            "c.sender_id = $2) ORDER BY c.last_activity DESC, c.rid DESC LIMIT $3::bigint",
            {filter.channel, filter.sender_id, count_param(filter.limit), scope.tenant()}));
  std::vector<ConversationInfo> out;
  for (int i = 0; i < rows.size(); ++i) {
    ConversationInfo c;
    c.id = rows.text(i, 0);
    c.key = {rows.text(i, 1), rows.text(i, 2), rows.text(i, 3)};
    c.status = rows.text(i, 4);
    c.started_at = rows.text(i, 5);
    c.last_activity = rows.text(i, 6);
    c.message_count = static_cast<std::uint64_t>(rows.int64(i, 7));
    c.summary = rows.optional_text(i, 8);
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<StoredMessage>> PgStore::conversation_messages(
    const MemoryScope& scope, const std::string& conversation_id, std::int64_t after_seq,
    std::size_t limit) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query("SELECT seq, role, content, tool_calls, tool_result, provider_state, conversation_id, "
            "created_at "
            "FROM messages WHERE conversation_id = " SCOPED_CONVERSATION(
                "$1", "$4") " AND seq > $2::bigint ORDER BY seq LIMIT $3::bigint",
            {conversation_id, after_seq, count_param(limit), scope.tenant()}));
  std::vector<StoredMessage> out;
  for (int i = 0; i < rows.size(); ++i) {
    KERNEX_ASSIGN_OR_RETURN(auto e, read_entry(rows, i, 0));
    out.push_back(StoredMessage{rows.int64(i, 0), rows.text(i, 6), std::move(e), rows.text(i, 7)});
  }
  return out;
}

Result<void> PgStore::close_conversation(const MemoryScope& scope,
                                         const std::string& conversation_id,
                                         const std::optional<std::string>& summary) {
  if (summary) {
    if (auto p = text_problem(*summary))
      return fail(ErrorCode::Parse, "postgres memory: summary " + *p);
  }
  // One write of the writer's batches: a conversation not in this scope fails it alone.
  pg::Write w;
  w.statements.push_back(
      {"UPDATE conversations SET status = 'closed' WHERE id = $1 AND tenant = $2",
       {conversation_id, scope.tenant()}});
  if (summary) {
    w.statements.push_back(
        {"INSERT INTO summaries (conversation_id, text, covered_messages, updated_at) "
         "SELECT id, $1, message_count, kx_now() FROM conversations WHERE id = $2 AND "
         "tenant = $3 "
         "ON CONFLICT (conversation_id) DO UPDATE SET text = excluded.text, "
         "covered_messages = excluded.covered_messages, updated_at = excluded.updated_at",
         {*summary, conversation_id, scope.tenant()}});
  }
  w.check = touches_conversation(0, conversation_id);
  return write(w);
}

Result<void> PgStore::delete_conversation(const MemoryScope& scope,
                                          const std::string& conversation_id) {
  // Rows naming the conversation first (messages reference it); the recall indexes follow the rows.
  static constexpr std::string_view kDeletes[] = {
      "DELETE FROM messages WHERE conversation_id = $1",
      "DELETE FROM summaries WHERE conversation_id = $1",
      "DELETE FROM saved_exchanges WHERE conversation_id = $1 AND tenant = $2",
      "DELETE FROM token_usage WHERE conversation_id = $1 AND tenant = $2",
      "DELETE FROM audit_log WHERE conversation_id = $1 AND tenant = $2",
  };
  return transaction<void>([&](pg::Connection& c) -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(
        auto exists, c.exec("SELECT 1 FROM conversations WHERE id = $1 AND tenant = $2 FOR UPDATE",
                            {conversation_id, scope.tenant()}));
    if (exists.empty()) return no_conversation(conversation_id);
    // Messages and summaries have no tenant of their own: the conversation was found in this
    // scope above, and ids are unique across the store.
    for (auto sql : kDeletes) {
      if (sql.ends_with("tenant = $2")) {
        KERNEX_RETURN_IF_ERROR(c.exec(sql, {conversation_id, scope.tenant()}));
      } else {
        KERNEX_RETURN_IF_ERROR(c.exec(sql, {conversation_id}));
      }
    }
    if (auto r = c.exec("DELETE FROM conversations WHERE id = $1 AND tenant = $2",
                        {conversation_id, scope.tenant()});
        !r) {
      return std::unexpected(r.error());
    }
    return {};
  });
}

Result<std::vector<SummaryRecord>> PgStore::recent_summaries(const MemoryScope& scope,
                                                             const ConversationKey& key,
                                                             const std::string& exclude,
                                                             std::size_t limit) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query(
          "SELECT s.conversation_id, s.text, s.covered_messages, s.updated_at FROM summaries s "
          "JOIN conversations c ON c.id = s.conversation_id WHERE c.tenant = $5 AND c.channel = $1 "
          "AND c.sender_id = $2 AND s.conversation_id <> $3 ORDER BY s.updated_at DESC, s.id "
          "DESC LIMIT $4::bigint",
          {key.channel, key.sender_id, exclude, count_param(limit), scope.tenant()}));
  std::vector<SummaryRecord> out;
  for (int i = 0; i < rows.size(); ++i) {
    out.push_back({rows.text(i, 0), rows.text(i, 1), static_cast<std::uint64_t>(rows.int64(i, 2)),
                   rows.text(i, 3)});
  }
  return out;
}

// ---- Facts ----

Result<std::vector<std::pair<std::string, std::string>>> PgStore::facts(
    const MemoryScope& scope, const std::string& sender_id) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query("SELECT key, value FROM facts WHERE tenant = $2 AND sender_id = $1 AND deleted_at IS "
            "NULL ORDER BY key COLLATE \"C\"",
            {sender_id, scope.tenant()}));
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < rows.size(); ++i) out.emplace_back(rows.text(i, 0), rows.text(i, 1));
  return out;
}

Result<void> PgStore::store_fact(const MemoryScope& scope, const std::string& sender_id,
                                 const std::string& key, const std::string& value) {
  if (key.empty()) return fail(ErrorCode::Usage, "postgres memory: a fact needs a key");
  if (text_problem(key) || text_problem(value) || text_problem(sender_id)) {
    return fail(ErrorCode::Parse, "postgres memory: fact '" + key + "' is not valid UTF-8 text");
  }
  // Re-storing a soft-deleted fact brings it back with the new value.
  return write({{{"INSERT INTO facts (sender_id, key, value, tenant) VALUES ($1, $2, $3, $4) "
                  "ON CONFLICT (tenant, sender_id, key) DO UPDATE SET "
                  "value = excluded.value, updated_at = kx_now(), deleted_at = NULL",
                  {sender_id, key, value, scope.tenant()}}},
                {}});
}

Result<std::optional<std::string>> PgStore::fact(const MemoryScope& scope,
                                                 const std::string& sender_id,
                                                 const std::string& key) {
  auto rows = query(
      "SELECT value FROM facts WHERE tenant = $3 AND sender_id = $1 AND key = $2 AND "
      "deleted_at IS NULL",
      {sender_id, key, scope.tenant()});
  if (!rows) return std::unexpected(rows.error());
  if (rows->empty()) return std::optional<std::string>();
  return std::optional<std::string>(rows->text(0, 0));
}

Result<std::vector<Fact>> PgStore::fact_records(const MemoryScope& scope,
                                                const std::optional<std::string>& sender_id,
                                                bool include_deleted) {
  KERNEX_ASSIGN_OR_RETURN(auto rows, query("SELECT sender_id, key, value, updated_at, deleted_at "
                                           "FROM facts WHERE tenant = $3 AND ($1::text IS NULL OR "
                                           "sender_id = $1) "
                                           "AND ($2::boolean OR deleted_at IS NULL) ORDER BY "
                                           "sender_id COLLATE \"C\", key COLLATE \"C\"",
                                           {sender_id, include_deleted, scope.tenant()}));
  std::vector<Fact> out;
  for (int i = 0; i < rows.size(); ++i) {
    out.push_back({rows.text(i, 0), rows.text(i, 1), rows.text(i, 2), rows.text(i, 3),
                   rows.optional_text(i, 4)});
  }
  return out;
}

Result<bool> PgStore::soft_delete_fact(const MemoryScope& scope, const std::string& sender_id,
                                       const std::string& key) {
  KERNEX_ASSIGN_OR_RETURN(auto n, soft_delete_facts(scope, sender_id, key));
  return n > 0;
}

Result<std::uint64_t> PgStore::soft_delete_facts(const MemoryScope& scope,
                                                 const std::string& sender_id,
                                                 const std::optional<std::string>& key) {
  auto count = std::make_shared<std::uint64_t>(0);  // set on the writer's thread
  KERNEX_RETURN_IF_ERROR(
      write({{{"UPDATE facts SET deleted_at = kx_now(), updated_at = kx_now() "
               "WHERE tenant = $3 AND sender_id = $1 AND ($2::text IS NULL OR key = $2) AND "
               "deleted_at IS NULL",
               {sender_id, key, scope.tenant()}}},
             [count](const std::vector<pg::Rows>& rows) -> Result<bool> {
               if (!rows.empty()) *count = rows[0].affected();
               return true;
             }}));
  return *count;
}

// ---- Audit and usage ----

Result<void> PgStore::record_tool_call(const MemoryScope& scope, const AuditRecord& rec) {
  KERNEX_ASSIGN_OR_RETURN(auto args, audit_arguments(rec));
  return write({{audit_statement(scope, rec, args)}, {}});
}

Result<std::vector<AuditRecord>> PgStore::audit_log(const MemoryScope& scope, std::size_t limit) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query(
          "SELECT created_at, conversation_id, sender_id, agent, tool, arguments, result, status, "
          "reason "
          "FROM audit_log WHERE tenant = $2 ORDER BY id DESC LIMIT $1::bigint",
          {count_param(limit), scope.tenant()}));
  std::vector<AuditRecord> out;
  for (int i = 0; i < rows.size(); ++i) {
    AuditRecord a;
    a.timestamp = rows.text(i, 0);
    a.conversation_id = rows.text(i, 1);
    a.sender_id = rows.text(i, 2);
    a.agent = rows.text(i, 3);
    a.tool = rows.text(i, 4);
    a.arguments = parse_untrusted(rows.text(i, 5));
    a.result = rows.text(i, 6);
    a.status = rows.text(i, 7);
    a.reason = rows.text(i, 8);
    out.push_back(std::move(a));
  }
  return out;
}

Result<void> PgStore::record_usage(const MemoryScope& scope, const UsageRecord& rec) {
  return write({{usage_statement(scope, rec)}, {}});
}

Result<std::vector<UsageTotals>> PgStore::usage_by_day(const MemoryScope& scope) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query("SELECT left(created_at, 10) AS day, model, provider, count(*), sum(input_tokens), "
            "sum(output_tokens), "
            "sum(cache_read_tokens), sum(cache_write_tokens), sum(cost_usd) FROM token_usage "
            "WHERE tenant = $1 GROUP BY 1, 2, 3 ORDER BY 1, model COLLATE \"C\", provider COLLATE "
            "\"C\"",
            {scope.tenant()}));
  std::vector<UsageTotals> out;
  for (int i = 0; i < rows.size(); ++i) {
    UsageTotals t;
    t.day = rows.text(i, 0);
    t.model = rows.text(i, 1);
    t.provider = rows.text(i, 2);
    t.requests = static_cast<std::uint64_t>(rows.int64(i, 3));
    t.usage.input_tokens = static_cast<std::uint64_t>(rows.int64(i, 4));
    t.usage.output_tokens = static_cast<std::uint64_t>(rows.int64(i, 5));
    t.usage.cache_read_tokens = static_cast<std::uint64_t>(rows.int64(i, 6));
    t.usage.cache_write_tokens = static_cast<std::uint64_t>(rows.int64(i, 7));
    t.usage.cost_usd = rows.real(i, 8);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kernex::postgres
