// Conversations, history, summaries, recall, facts, audit and usage.
#include "sqlite_store.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>

#include "kernex/log.hpp"
#include "kernex/sqlite_batch.hpp"
#include "message_columns.hpp"
#include "migrations.hpp"
#include "recall_rank.hpp"
#include "text_rules.hpp"

namespace kernex::sqlite {
namespace {

// Messages and summaries are the conversation's: a conversation id of another tenant matches
// nothing (binds: the conversation id, then the tenant).
#define SCOPED_CONVERSATION "(SELECT id FROM conversations WHERE id = ? AND tenant = ?)"

// Reads every row of `stmt` with `row`, which returns Result<void>.
template <class F>
Result<void> each_row(Stmt& stmt, F&& row) {
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto more, stmt.step());
    if (!more) return {};
    if (auto r = row(); !r) return r;
  }
}

// Columns: seq, role, content, tool_calls, tool_result, provider_state.
Result<ContextEntry> read_entry(const Stmt& s, int first) {
  return decode_columns({s.integer(first), s.text(first + 1), s.text(first + 2),
                         s.opt_text(first + 3), s.opt_text(first + 4), s.opt_text(first + 5)},
                        "memory-sqlite");
}

// KERNEX_MEMORY_HOT=off: no hot history, no context reads in one transaction (the benches'
// baseline, as KERNEX_GROUP_COMMIT=off is for group commit).
bool hot_from_env() {
  const char* v = std::getenv("KERNEX_MEMORY_HOT");
  return v == nullptr || std::string_view(v) != "off";
}

std::string minutes_ago(std::chrono::minutes m) { return datetime_offset(-m.count(), "minutes"); }

}  // namespace

Result<std::shared_ptr<SqliteStore>> SqliteStore::open(const StoreOptions& options) {
  KERNEX_ASSIGN_OR_RETURN(auto db, Db::open(options.path, options.open, migrate));
  return std::shared_ptr<SqliteStore>(new SqliteStore(std::move(db), options));
}

SqliteStore::SqliteStore(std::unique_ptr<Db> db, StoreOptions options)
    : db_(std::move(db)),
      options_(std::move(options)),
      hot_on_(hot_from_env()),
      hot_(HotHistory::Limits{.conversations = hot_on_ ? 256u : 0u}) {
  writer_ = std::make_unique<GroupCommit>(std::make_unique<SqliteBatch>(
      db_->handle(), false, "memory-sqlite " + options_.path.string(), ErrorCode::Memory, &mutex_));
}

void SqliteStore::settle() {
  if (lazy_.load() == 0) return;
  if (auto r = write([] { return Result<void>{}; }); !r) log(LogLevel::Warn, r.error().describe());
}

void SqliteStore::remember_failed(const std::string& tenant, const std::string& id, Error cause) {
  if (failed_order_.size() >= kMaxFailedConversations) {
    failed_.erase(failed_order_.front());
    failed_order_.pop_front();
  }
  auto key = std::make_pair(tenant, id);
  if (failed_.insert_or_assign(key, std::move(cause)).second) failed_order_.push_back(key);
}

Error SqliteStore::no_conversation(const MemoryScope& scope, const std::string& id) const {
  if (auto it = failed_.find({scope.tenant(), id}); it != failed_.end())
    return Error(ErrorCode::Memory,
                 "memory-sqlite: conversation " + id +
                     " was never created (open_conversation's insert of it failed)",
                 it->second);
  return Error(ErrorCode::Memory, "memory-sqlite: no conversation " + id);
}

void SqliteStore::submit_lazy(GroupCommit::Work work, GroupCommit::Done done) {
  ++lazy_;
  writer_->submit_lazy(std::move(work), [this, done = std::move(done)](const Result<void>& r) {
    if (done) done(r);
    --lazy_;
  });
}

// ---- Conversations ----

// An active conversation is found and reused. A new one gets its id at once and its row in the
// next batch (the turn's exchange, usually): a turn writes once. Until then this process finds
// it in pending_; another process sharing the file may open its own meanwhile (two active
// conversations for the key: the newer is found from then on).
Result<std::string> SqliteStore::open_conversation(const MemoryScope& scope,
                                                   const ConversationKey& key,
                                                   std::chrono::minutes idle) {
  static constexpr const char* kFind =
      "SELECT id FROM conversations WHERE tenant = ? AND channel = ? AND sender_id = ? AND project "
      "= ? AND status = 'active' "
      "AND last_activity > datetime('now', ?) ORDER BY last_activity DESC, rowid DESC LIMIT 1";
  const auto find = [&]() -> Result<std::optional<std::string>> {
    KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(kFind));
    stmt.bind_all(scope.tenant(), key.channel, key.sender_id, key.project, minutes_ago(idle));
    KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(stmt.text(0));
  };
  const auto insert = [this, tenant = scope.tenant(), key](const std::string& id) -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare("INSERT INTO conversations (id, tenant, "
                                                    "channel, sender_id, project) VALUES (?, ?, "
                                                    "?, ?, ?)"));
    stmt.bind_all(id, tenant, key.channel, key.sender_id, key.project);
    KERNEX_RETURN_IF_ERROR(stmt.run());
    return {};
  };
  const auto slot = std::make_tuple(scope.tenant(), key.channel, key.sender_id, key.project);
  Hold lock(*this);
  const auto now = std::chrono::steady_clock::now();
  if (auto it = pending_.find(slot); it != pending_.end() && now - it->second.opened < idle)
    return it->second.id;
  KERNEX_ASSIGN_OR_RETURN(auto found, find());
  if (found) return *found;
  std::string id = new_time_ordered_uuid();
  if (writer_->direct()) {  // the baseline: its own commit, looked for again under the write lock
    lock.unlock();
    bool made = false;
    KERNEX_RETURN_IF_ERROR(write([&]() -> Result<void> {
      KERNEX_ASSIGN_OR_RETURN(auto again, find());
      if (again) id = *again;
      made = !again;
      return again ? Result<void>{} : insert(id);
    }));
    lock.lock();
    if (made) hot_.opened(scope.tenant(), id, false);
    return id;
  }
  pending_[slot] = Pending{id, now};
  hot_.opened(scope.tenant(), id, true);
  // Queued while mutex_ is held: whoever finds it in pending_ queues its writes after this one.
  // A failed insert is remembered for the calls that name the conversation: at once for the items
  // after it in its batch (the turn's exchange, usually), and when the batch's commit failed.
  submit_lazy(
      [this, insert, id, tenant = scope.tenant()] {
        auto inserted = insert(id);
        if (!inserted) remember_failed(tenant, id, inserted.error());  // under mutex_ (a batch)
        return inserted;
      },
      [this, slot, id](const Result<void>& inserted) {
        Hold done(*this);
        if (!inserted) {
          remember_failed(std::get<0>(slot), id, inserted.error());
          hot_.forget(std::get<0>(slot), id);
        } else {
          hot_.committed(std::get<0>(slot), id);
        }
        // A newer one opened meanwhile (the first went idle) stays pending.
        if (auto it = pending_.find(slot); it != pending_.end() && it->second.id == id)
          pending_.erase(it);
      });
  return id;
}

Result<std::vector<ContextEntry>> SqliteStore::select_entries(const char* sql,
                                                              const MemoryScope& scope,
                                                              const std::string& conversation_id,
                                                              std::size_t n, bool reverse) {
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql));
  stmt.bind_all(conversation_id, scope.tenant(),
                static_cast<std::int64_t>(std::min<std::size_t>(n, INT64_MAX)));
  std::vector<ContextEntry> out;
  KERNEX_RETURN_IF_ERROR(each_row(stmt, [&]() -> Result<void> {
    auto e = read_entry(stmt, 0);
    if (!e) return std::unexpected(e.error());
    out.push_back(std::move(*e));
    return {};
  }));
  if (reverse) std::reverse(out.begin(), out.end());
  return out;
}

Result<std::vector<ContextEntry>> SqliteStore::recent_messages(const MemoryScope& scope,
                                                               const std::string& conversation_id,
                                                               std::size_t limit) {
  Hold lock(*this);
  // A conversation opened this turn has no messages (nothing can have written to it yet); a hot
  // session's window comes from what its previous turn had.
  if (hot_.fresh(scope.tenant(), conversation_id)) return std::vector<ContextEntry>{};
  check_hot();
  if (auto hot = hot_.newest(scope.tenant(), conversation_id, limit)) return std::move(*hot);
  auto window = select_entries(
      "SELECT seq, role, content, tool_calls, tool_result, provider_state FROM messages "
      "WHERE conversation_id = " SCOPED_CONVERSATION " ORDER BY seq DESC LIMIT ?",
      scope, conversation_id, limit, true);
  if (window) hot_.read(scope.tenant(), conversation_id, limit, *window);
  return window;
}

Result<std::vector<ContextEntry>> SqliteStore::oldest_messages(const MemoryScope& scope,
                                                               const std::string& conversation_id,
                                                               std::size_t count) {
  Hold lock(*this);
  return select_entries(
      "SELECT seq, role, content, tool_calls, tool_result, provider_state FROM messages "
      "WHERE conversation_id = " SCOPED_CONVERSATION " ORDER BY seq ASC LIMIT ?",
      scope, conversation_id, count, false);
}

Result<std::uint64_t> SqliteStore::message_count(const MemoryScope& scope,
                                                 const std::string& conversation_id) {
  settle();  // a conversation opened in this process may not be committed yet
  Hold lock(*this);
  check_hot();
  if (auto hot = hot_.count(scope.tenant(), conversation_id)) return *hot;
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare("SELECT message_count FROM conversations WHERE id = ? AND tenant = ?"));
  stmt.bind_all(conversation_id, scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
  if (!row) return std::unexpected(no_conversation(scope, conversation_id));
  const auto count = static_cast<std::uint64_t>(stmt.integer(0));
  hot_.read_count(scope.tenant(), conversation_id, count);
  return count;
}

Result<void> SqliteStore::insert_message(const std::string& conversation_id, const ContextEntry& e,
                                         const EncodedColumns& json) {
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt, db_->prepare("INSERT INTO messages (conversation_id, role, content, tool_calls, "
                              "tool_result, provider_state) VALUES (?, ?, ?, ?, ?, ?)"));
  stmt.bind_all(conversation_id, e.role, e.content, json.calls, json.result, json.state);
  KERNEX_RETURN_IF_ERROR(stmt.run());
  return {};
}

Result<void> SqliteStore::check_message(const ContextEntry& entry) const {
  return check_exchange({entry});
}

Result<void> SqliteStore::check_exchange(const std::vector<ContextEntry>& entries) const {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const std::string which =
        "memory-sqlite: message " + std::to_string(i + 1) + " of the exchange (" + e.role + ")";
    if (auto at = invalid_utf8_at(e.content)) {
      return fail(ErrorCode::Parse, which + ": content is not valid UTF-8 (bad byte at offset " +
                                        std::to_string(*at) +
                                        "); nothing of this exchange was saved");
    }
    std::size_t size = e.content.size();
    for (const auto& c : e.tool_calls)
      size += c.arguments.dump(-1, ' ', false, Json::error_handler_t::replace).size();
    if (e.tool_result) size += e.tool_result->content.size();
    if (size > options_.max_message_bytes) {
      return fail(ErrorCode::Limit, which + ": " + std::to_string(size) +
                                        " bytes, over max_message_bytes (" +
                                        std::to_string(options_.max_message_bytes) +
                                        "); nothing of this exchange was saved");
    }
    if (e.tool_result) {
      if (auto at = invalid_utf8_at(e.tool_result->content)) {
        return fail(ErrorCode::Parse,
                    which + ": tool result is not valid UTF-8 (bad byte at offset " +
                        std::to_string(*at) + "); nothing of this exchange was saved");
      }
    }
  }
  return {};
}

// Inside a write transaction: the conversation's counters, then every entry. last_activity is in
// two indexes: it is rewritten only when the second changed, so a conversation opened this turn
// (its row inserted in the same batch, usually) or a hot one pays no index updates for it.
Result<void> SqliteStore::insert_exchange(const MemoryScope& scope,
                                          const std::string& conversation_id,
                                          const std::vector<ContextEntry>& entries,
                                          const std::vector<EncodedColumns>& columns) {
  KERNEX_ASSIGN_OR_RETURN(auto count,
                          db_->prepare("UPDATE conversations SET message_count = message_count + "
                                       "? WHERE id = ? AND tenant = ?"));
  count.bind_all(static_cast<std::int64_t>(entries.size()), conversation_id, scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto changed, count.run());
  if (changed == 0) return std::unexpected(no_conversation(scope, conversation_id));
  KERNEX_ASSIGN_OR_RETURN(
      auto touch, db_->prepare("UPDATE conversations SET last_activity = datetime('now') WHERE id "
                               "= ? AND tenant = ? AND last_activity IS NOT datetime('now')"));
  touch.bind_all(conversation_id, scope.tenant());
  KERNEX_RETURN_IF_ERROR(touch.run());
  std::size_t users = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (auto r = insert_message(conversation_id, entries[i], columns.at(i)); !r) {
      return fail(ErrorCode::Memory,
                  "memory-sqlite: saving the exchange failed; nothing of it was saved", r.error());
    }
    users += entries[i].role == "user" ? 1 : 0;
  }
  // The user messages wait above the recall watermark; every kIndexBatch of them are indexed in
  // the batch that saves the last (a count of this process's, a heuristic: recall() indexes what
  // it could match whatever the count, and an item run again only counts again).
  if (unindexed_.fetch_add(users) + users >= kIndexBatch)
    KERNEX_RETURN_IF_ERROR(index_for_recall());
  return {};
}

// Inside a write transaction: every user message above the watermark into the full-text index,
// and the watermark up to the newest message (migration 010).
Result<void> SqliteStore::index_for_recall() {
  KERNEX_ASSIGN_OR_RETURN(
      auto index, db_->prepare("INSERT INTO messages_fts (rowid, content) SELECT seq, content FROM "
                               "messages WHERE seq > (SELECT seq FROM recall_watermark) AND role "
                               "= 'user'"));
  KERNEX_RETURN_IF_ERROR(index.run());
  KERNEX_ASSIGN_OR_RETURN(auto mark,
                          db_->prepare("UPDATE recall_watermark SET seq = max(seq, (SELECT "
                                       "coalesce(max(seq), 0) FROM messages))"));
  KERNEX_RETURN_IF_ERROR(mark.run());
  unindexed_ = 0;
  return {};
}

Result<void> SqliteStore::append_messages(const MemoryScope& scope,
                                          const std::string& conversation_id,
                                          const std::vector<ContextEntry>& entries) {
  // Checked before anything is written, so a bad entry leaves the exchange unsaved as a whole.
  KERNEX_RETURN_IF_ERROR(check_exchange(entries));
  KERNEX_ASSIGN_OR_RETURN(const auto columns, encode_exchange(entries));
  return save_messages(scope, conversation_id, as_stored(entries, columns),
                       [&]() { return insert_exchange(scope, conversation_id, entries, columns); });
}

// An audit row's arguments as stored, once its status is one the log knows.
static Result<std::string> audit_arguments(const AuditRecord& rec) {
  if (rec.status != "ok" && rec.status != "error" && rec.status != "denied") {
    return fail(ErrorCode::Usage, "memory-sqlite: audit status must be ok, error or denied, got '" +
                                      rec.status + "'");
  }
  return dump_checked(rec.arguments, "audited tool arguments");
}

// One item of the writer for the turn: every commit writes the pages it touched to the WAL and
// takes the write lock again, so the usage row (and a new conversation, queued lazily) ride
// along with the messages, in a batch shared with other runs' turns.
Result<void> SqliteStore::save_exchange(const MemoryScope& scope, const ExchangeRecord& record) {
  KERNEX_RETURN_IF_ERROR(check_exchange(record.messages));
  KERNEX_ASSIGN_OR_RETURN(const auto columns, encode_exchange(record.messages));
  std::vector<std::string> audit_args;  // checked before the write: all of the turn or nothing
  for (const auto& rec : record.audits) {
    KERNEX_ASSIGN_OR_RETURN(auto args, audit_arguments(rec));
    audit_args.push_back(std::move(args));
  }
  // Under an idempotency key the save may save nothing (done before): hot_ forgets the
  // conversation rather than guess.
  auto stored = record.idempotency_key.empty() ? std::optional(as_stored(record.messages, columns))
                                               : std::nullopt;
  return save_messages(scope, record.conversation_id, std::move(stored), [&]() -> Result<void> {
    if (!record.idempotency_key.empty()) {
      // Committed with the exchange: a second save under the key finds it and saves nothing.
      KERNEX_ASSIGN_OR_RETURN(
          auto claim, db_->prepare("INSERT OR IGNORE INTO saved_exchanges (tenant, key, "
                                   "conversation_id) SELECT ?1, ?2, id FROM conversations WHERE "
                                   "id = ?3 AND tenant = ?1"));
      claim.bind_all(scope.tenant(), record.idempotency_key, record.conversation_id);
      KERNEX_ASSIGN_OR_RETURN(const std::uint64_t claimed, claim.run());
      if (claimed == 0) {
        KERNEX_ASSIGN_OR_RETURN(
            auto saved, db_->prepare("SELECT 1 FROM saved_exchanges WHERE tenant = ? AND key = ?"));
        saved.bind_all(scope.tenant(), record.idempotency_key);
        KERNEX_ASSIGN_OR_RETURN(const bool found, saved.step());
        if (found) return {};
      }
    }
    KERNEX_RETURN_IF_ERROR(
        insert_exchange(scope, record.conversation_id, record.messages, columns));
    if (record.usage) KERNEX_RETURN_IF_ERROR(insert_usage(scope, *record.usage));
    for (std::size_t i = 0; i < record.audits.size(); ++i)
      KERNEX_RETURN_IF_ERROR(insert_audit(scope, record.audits[i], audit_args[i]));
    return {};
  });
}

Result<std::optional<StoredSummary>> SqliteStore::compaction_summary(
    const MemoryScope& scope, const std::string& conversation_id) {
  Hold lock(*this);
  auto stmt = db_->prepare(
      "SELECT text, covered_messages FROM summaries WHERE conversation_id = " SCOPED_CONVERSATION);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind_all(conversation_id, scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto row, stmt->step());
  if (!row) return std::optional<StoredSummary>();
  return std::optional<StoredSummary>(
      StoredSummary{stmt->text(0), static_cast<std::uint64_t>(stmt->integer(1))});
}

static constexpr const char* kUpsertSummary =
    "INSERT INTO summaries (conversation_id, text, covered_messages, updated_at) "
    "SELECT id, ?3, ?4, datetime('now') FROM conversations WHERE id = ?1 AND tenant = ?2 "
    "ON CONFLICT (conversation_id) DO UPDATE SET "
    "text = excluded.text, covered_messages = excluded.covered_messages, updated_at = "
    "excluded.updated_at";

Result<void> SqliteStore::save_compaction_summary(const MemoryScope& scope,
                                                  const std::string& conversation_id,
                                                  const StoredSummary& summary) {
  if (auto at = invalid_utf8_at(summary.text)) {
    return fail(ErrorCode::Parse,
                "memory-sqlite: summary is not valid UTF-8 at offset " + std::to_string(*at));
  }
  settle();  // a conversation opened in this process may not be committed yet
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<void>([&]() -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(kUpsertSummary));
    stmt.bind_all(conversation_id, scope.tenant(), summary.text, summary.covered_messages);
    KERNEX_ASSIGN_OR_RETURN(auto changed, stmt.run());
    if (changed == 0) return std::unexpected(no_conversation(scope, conversation_id));
    return {};
  });
}

Result<std::vector<ConversationInfo>> SqliteStore::list_conversations(
    const MemoryScope& scope, const ConversationFilter& filter) {
  settle();  // a conversation opened in this process may not be committed yet
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare("SELECT c.id, c.channel, c.sender_id, c.project, c.status, c.started_at, "
                   "c.last_activity, "
                   "c.message_count, "
                   "s.text FROM conversations c LEFT JOIN summaries s ON s.conversation_id = c.id "
                   "WHERE c.tenant = ?4 AND (?1 IS NULL OR c.channel = ?1) AND (?2 IS NULL OR "
                   "c.sender_id = ?2) ORDER BY c.last_activity DESC, c.rowid DESC LIMIT ?3"));
  stmt.bind_all(filter.channel, filter.sender_id, static_cast<std::int64_t>(filter.limit),
                scope.tenant());
  std::vector<ConversationInfo> out;
  auto r = each_row(stmt, [&]() -> Result<void> {
    ConversationInfo c;
    c.id = stmt.text(0);
    c.key = {stmt.text(1), stmt.text(2), stmt.text(3)};
    c.status = stmt.text(4);
    c.started_at = stmt.text(5);
    c.last_activity = stmt.text(6);
    c.message_count = static_cast<std::uint64_t>(stmt.integer(7));
    c.summary = stmt.opt_text(8);
    out.push_back(std::move(c));
    return {};
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

Result<std::vector<StoredMessage>> SqliteStore::conversation_messages(
    const MemoryScope& scope, const std::string& conversation_id, std::int64_t after_seq,
    std::size_t limit) {
  settle();  // a conversation opened in this process may not be committed yet
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "SELECT seq, role, content, tool_calls, tool_result, provider_state, conversation_id, "
          "created_at "
          "FROM messages WHERE conversation_id = " SCOPED_CONVERSATION
          " AND seq > ? ORDER BY seq LIMIT ?"));
  stmt.bind_all(conversation_id, scope.tenant(), after_seq,
                static_cast<std::int64_t>(std::min<std::size_t>(limit, INT64_MAX)));
  std::vector<StoredMessage> out;
  KERNEX_RETURN_IF_ERROR(each_row(stmt, [&]() -> Result<void> {
    auto e = read_entry(stmt, 0);
    if (!e) return std::unexpected(e.error());
    out.push_back(StoredMessage{stmt.integer(0), stmt.text(6), std::move(*e), stmt.text(7)});
    return {};
  }));
  return out;
}

Result<void> SqliteStore::close_conversation(const MemoryScope& scope,
                                             const std::string& conversation_id,
                                             const std::optional<std::string>& summary) {
  settle();  // a conversation opened in this process may not be committed yet
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<void>([&]() -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(
        auto close,
        db_->prepare("UPDATE conversations SET status = 'closed' WHERE id = ? AND tenant = ?"));
    close.bind_all(conversation_id, scope.tenant());
    KERNEX_ASSIGN_OR_RETURN(auto changed, close.run());
    if (changed == 0) return std::unexpected(no_conversation(scope, conversation_id));
    if (!summary) return {};
    KERNEX_ASSIGN_OR_RETURN(
        auto upsert,
        db_->prepare(
            "INSERT INTO summaries (conversation_id, text, covered_messages, updated_at) "
            "SELECT id, ?, message_count, datetime('now') FROM conversations WHERE id = ? AND "
            "tenant = ? "
            "ON CONFLICT (conversation_id) DO UPDATE SET text = excluded.text, "
            "covered_messages = excluded.covered_messages, updated_at = excluded.updated_at"));
    upsert.bind_all(*summary, conversation_id, scope.tenant());
    KERNEX_RETURN_IF_ERROR(upsert.run());
    return {};
  });
}

Result<void> SqliteStore::delete_conversation(const MemoryScope& scope,
                                              const std::string& conversation_id) {
  // Rows naming the conversation first (messages reference it); the FTS triggers drop the
  // recall index entries of its messages and summary with them.
  static constexpr const char* kDeletes[] = {
      "DELETE FROM messages WHERE conversation_id = ?",
      "DELETE FROM summaries WHERE conversation_id = ?",
      "DELETE FROM saved_exchanges WHERE conversation_id = ? AND tenant = ?",
      "DELETE FROM token_usage WHERE conversation_id = ? AND tenant = ?",
      "DELETE FROM audit_log WHERE conversation_id = ? AND tenant = ?",
      "DELETE FROM conversations WHERE id = ? AND tenant = ?",
  };
  settle();  // the conversation's own row may still be queued
  Hold lock(*this, Hold::Mode::Write);
  hot_.forget(scope.tenant(), conversation_id);
  auto deleted = db_->write<void>([&]() -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(
        auto exists, db_->prepare("SELECT 1 FROM conversations WHERE id = ? AND tenant = ?"));
    exists.bind_all(conversation_id, scope.tenant());
    KERNEX_ASSIGN_OR_RETURN(auto row, exists.step());
    if (!row) return std::unexpected(no_conversation(scope, conversation_id));
    for (const char* sql : kDeletes) {
      KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql));
      stmt.bind(1, conversation_id);
      // Messages and summaries have no tenant of their own: the conversation was found in
      // this scope above, and ids are unique across the store.
      if (std::string_view(sql).ends_with("tenant = ?")) stmt.bind(2, scope.tenant());
      KERNEX_RETURN_IF_ERROR(stmt.run());
    }
    // An FTS5 delete only adds a tombstone: the words stay in the index's older segments until
    // they are merged. 'optimize' merges them all now (SQLite 3.40 has no 'secure-delete').
    KERNEX_RETURN_IF_ERROR(
        db_->exec("INSERT INTO messages_fts (messages_fts) VALUES ('optimize'); "
                  "INSERT INTO summaries_fts (summaries_fts) VALUES ('optimize');"));
    return {};
  });
  if (!deleted) return deleted;
  // Older copies of the zeroed pages may still be in the WAL: copied back and truncated away.
  // A reader in another process past the busy timeout leaves them until the next checkpoint.
  if (sqlite3_wal_checkpoint_v2(db_->handle(), nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr,
                                nullptr) != SQLITE_OK)
    log(LogLevel::Warn, "memory-sqlite: the WAL could not be truncated after a delete");
  return {};
}

Result<std::vector<SummaryRecord>> SqliteStore::recent_summaries(const MemoryScope& scope,
                                                                 const ConversationKey& key,
                                                                 const std::string& exclude,
                                                                 std::size_t limit) {
  // Every turn asks, and most senders have none: the newest are picked here, as the rows come,
  // rather than by an ORDER BY, whose sorter SQLite sets up before it knows there is no row (about
  // half of this query's cost when it finds nothing). Either way every matching row is read once.
  if (limit == 0) return std::vector<SummaryRecord>{};
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "SELECT s.conversation_id, s.text, s.covered_messages, s.updated_at, s.id FROM summaries "
          "s JOIN conversations c ON c.id = s.conversation_id WHERE c.tenant = ? AND c.channel = ? "
          "AND c.sender_id = ? AND s.conversation_id != ?"));
  stmt.bind_all(scope.tenant(), key.channel, key.sender_id, exclude);
  std::vector<std::pair<std::int64_t, SummaryRecord>> newest;  // by updated_at, then id, desc
  const auto newer = [](const auto& a, const auto& b) {
    return std::tie(a.second.updated_at, a.first) > std::tie(b.second.updated_at, b.first);
  };
  KERNEX_RETURN_IF_ERROR(each_row(stmt, [&]() -> Result<void> {
    std::pair<std::int64_t, SummaryRecord> row{stmt.integer(4), {}};
    row.second.updated_at = stmt.text(3);
    // An older row than the newest `limit` so far is skipped before its text is copied.
    if (newest.size() == limit && !newer(row, newest.back())) return {};
    row.second.conversation_id = stmt.text(0);
    row.second.text = stmt.text(1);
    row.second.covered_messages = static_cast<std::uint64_t>(stmt.integer(2));
    newest.insert(std::upper_bound(newest.begin(), newest.end(), row, newer), std::move(row));
    if (newest.size() > limit) newest.pop_back();
    return {};
  }));
  std::vector<SummaryRecord> out;
  out.reserve(newest.size());
  for (auto& [id, record] : newest) out.push_back(std::move(record));
  return out;
}

// ---- Recall ----

namespace {

// What one recall searches: the indexes worth asking, the current conversation's history window
// (messages from `boundary` on are in it already) and the oldest time asked for.
struct RecallPlan {
  bool messages = true, summaries = true;
  std::int64_t boundary = std::numeric_limits<std::int64_t>::max();
  std::optional<std::string> since;
};

// A sender with no messages of their own has nothing to recall from messages (a bot's first turn
// with each new user), so the FTS query, whose cost grows with every user's matches, is skipped.
// (Searching a sender's messages one by one instead was tried: FTS5 re-runs MATCH per rowid
// lookup, which took 1.1 s for a sender with 10k messages.) Likewise summaries: a sender with no
// summarised conversation besides this one skips that search (an FTS5 rank query prepares a
// statement of its own each time). One query answers both.
Result<void> skip_empty_sources(Db& db, const MemoryScope& scope, const RecallQuery& q,
                                RecallPlan& plan) {
  if (q.sender_id.empty()) return {};
  KERNEX_ASSIGN_OR_RETURN(
      auto has,
      db.prepare("SELECT EXISTS (SELECT 1 FROM conversations c JOIN messages m ON "
                 "m.conversation_id = c.id WHERE c.tenant = ?3 AND c.sender_id = ?1 AND "
                 "m.role = 'user'), EXISTS (SELECT 1 FROM conversations c JOIN summaries s "
                 "ON s.conversation_id = c.id WHERE c.tenant = ?3 AND c.sender_id = ?1 AND "
                 "c.id != ?2)"));
  has.bind_all(q.sender_id, q.current_conversation, scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto row, has.step());
  plan.messages = row && has.integer(0) != 0;
  plan.summaries = row && has.integer(1) != 0;
  return {};
}

// The seq of the oldest message of the current conversation in the history window (its newest
// q.skip_newest); none when nothing is skipped or messages are not searched.
Result<void> find_history_boundary(Db& db, const MemoryScope& scope, const RecallQuery& q,
                                   RecallPlan& plan) {
  if (!plan.messages || q.skip_newest == 0 || q.current_conversation.empty()) return {};
  KERNEX_ASSIGN_OR_RETURN(
      auto edge, db.prepare("SELECT seq FROM messages WHERE conversation_id = " SCOPED_CONVERSATION
                            " ORDER BY seq DESC LIMIT 1 OFFSET ?"));
  edge.bind_all(q.current_conversation, scope.tenant(),
                static_cast<std::int64_t>(q.skip_newest - 1));
  auto row = edge.step();
  if (!row) return std::unexpected(row.error());
  plan.boundary = *row ? edge.integer(0) : 0;
  return {};
}

// Messages with every word come newest first: FTS5 walks its index backwards and stops at the
// limit. Ranking them by bm25 instead cost a count of every message holding each word (its
// IDF) plus a score per match: 390 us at 10k messages for a query with one common word, against
// 30-70 us. Messages with only some words are ranked by bm25, where relevance decides.
Result<void> search_messages(Db& db, const MemoryScope& scope, const RecallQuery& q,
                             const RecallPlan& plan, const std::string& match, bool every_word,
                             RankedHits& hits) {
  static const std::string kFrom =
      " FROM messages_fts f JOIN messages m ON m.seq = f.rowid JOIN conversations c ON c.id = "
      "m.conversation_id WHERE messages_fts MATCH ?1 AND c.tenant = ?7 AND (?2 = '' OR "
      "c.sender_id = ?2) AND "
      "(m.conversation_id != ?3 OR m.seq < ?4) AND (?5 IS NULL OR m.created_at >= ?5) ";
  static const std::string kColumns = "SELECT m.conversation_id, m.seq, m.content, m.created_at";
  static const std::string kNewest = kColumns + ", 0.0" + kFrom + "ORDER BY f.rowid DESC LIMIT ?6";
  static const std::string kBest = kColumns + ", f.rank" + kFrom + "ORDER BY f.rank LIMIT ?6";
  KERNEX_ASSIGN_OR_RETURN(auto messages, db.prepare((every_word ? kNewest : kBest).c_str()));
  messages.bind_all(match, q.sender_id, q.current_conversation, plan.boundary, plan.since,
                    static_cast<std::int64_t>(q.limit), scope.tenant());
  double order = 0;  // newest first: the row order is the rank
  auto r = each_row(messages, [&]() -> Result<void> {
    order += 1e-3;
    hits.add(every_word ? order : messages.real(4),
             RecallHit{"message", messages.text(0), messages.integer(1), messages.text(2),
                       messages.text(3)});
    return {};
  });
  if (!r) return fail(ErrorCode::Memory, "memory-sqlite: recall over messages failed", r.error());
  return {};
}

// Summaries of the sender's other conversations, ranked by bm25.
Result<void> search_summaries(Db& db, const MemoryScope& scope, const RecallQuery& q,
                              const RecallPlan& plan, const std::string& match, RankedHits& hits) {
  KERNEX_ASSIGN_OR_RETURN(
      auto summaries,
      db.prepare("SELECT s.conversation_id, s.text, s.updated_at, f.rank FROM summaries_fts f "
                 "JOIN summaries s ON s.id = f.rowid JOIN conversations c ON c.id = "
                 "s.conversation_id WHERE summaries_fts MATCH ?1 AND c.tenant = ?6 AND (?2 = '' "
                 "OR c.sender_id = ?2) AND s.conversation_id != ?3 AND (?4 IS NULL OR "
                 "s.updated_at >= ?4) ORDER BY f.rank LIMIT ?5"));
  summaries.bind_all(match, q.sender_id, q.current_conversation, plan.since,
                     static_cast<std::int64_t>(q.limit), scope.tenant());
  auto r = each_row(summaries, [&]() -> Result<void> {
    hits.add(summaries.real(3),
             RecallHit{"summary", summaries.text(0), 0, summaries.text(1), summaries.text(2)});
    return {};
  });
  if (!r) return fail(ErrorCode::Memory, "memory-sqlite: recall over summaries failed", r.error());
  return {};
}

Result<void> search_both(Db& db, const MemoryScope& scope, const RecallQuery& q,
                         const RecallPlan& plan, const std::string& match, bool every_word,
                         RankedHits& hits) {
  if (plan.messages)
    KERNEX_RETURN_IF_ERROR(search_messages(db, scope, q, plan, match, every_word, hits));
  if (!plan.summaries) return {};
  return search_summaries(db, scope, q, plan, match, hits);
}

}  // namespace

Result<bool> SqliteStore::recall_needs_index(const MemoryScope& scope, const RecallQuery& q,
                                             std::int64_t boundary) {
  // From the messages above the watermark (a rowid range: a few dozen rows), never the index.
  KERNEX_ASSIGN_OR_RETURN(
      auto stale,
      db_->prepare("SELECT EXISTS (SELECT 1 FROM messages m CROSS JOIN conversations c ON c.id = "
                   "m.conversation_id WHERE m.seq > (SELECT seq FROM recall_watermark) AND m.role "
                   "= 'user' AND c.tenant = ?1 AND (?2 = '' OR c.sender_id = ?2) AND NOT "
                   "(m.conversation_id = ?3 AND m.seq >= ?4))"));
  stale.bind_all(scope.tenant(), q.sender_id, q.current_conversation, boundary);
  KERNEX_ASSIGN_OR_RETURN(auto row, stale.step());
  return row && stale.integer(0) != 0;
}

// Checked query -> the sources worth searching -> the history window's edge -> every word over
// messages and summaries -> (too few hits) any word, ranked after those -> the best q.limit.
Result<std::vector<RecallHit>> SqliteStore::recall(const MemoryScope& scope, const RecallQuery& q) {
  // kernex's rule: shorter queries match too much to be useful.
  if (q.text.size() < 3 || q.limit == 0) return std::vector<RecallHit>{};
  if (invalid_utf8_at(q.text))
    return fail(ErrorCode::Parse, "memory-sqlite: the recall query is not valid UTF-8");
  RecallPlan plan;
  if (q.since) {
    KERNEX_ASSIGN_OR_RETURN(auto s, normalize_time(*q.since, "recall since"));
    plan.since = s;
  }
  Hold lock(*this);
  KERNEX_RETURN_IF_ERROR(skip_empty_sources(*db_, scope, q, plan));
  if (!plan.messages && !plan.summaries) return std::vector<RecallHit>{};
  KERNEX_RETURN_IF_ERROR(find_history_boundary(*db_, scope, q, plan));
  KERNEX_ASSIGN_OR_RETURN(const bool stale,
                          plan.messages ? recall_needs_index(scope, q, plan.boundary) : false);
  if (stale) {
    // Indexed through the writer (its batch takes mutex_), then searched: the window's edge is
    // found again, as messages saved meanwhile moved it.
    lock.unlock();
    KERNEX_RETURN_IF_ERROR(write([this] { return index_for_recall(); }));
    lock.lock();
    KERNEX_RETURN_IF_ERROR(find_history_boundary(*db_, scope, q, plan));
  }
  // Every word first (few, precise matches: cheap to rank); any word only to fill up.
  const std::string all_words = fts_query(q.text, " AND ");
  if (all_words.empty()) return std::vector<RecallHit>{};
  const std::string any_word = fts_query(q.text, " OR ");
  RankedHits hits;
  KERNEX_RETURN_IF_ERROR(search_both(*db_, scope, q, plan, all_words, true, hits));
  hits.rank_first();
  if (hits.ranked.size() < q.limit && any_word != all_words)
    KERNEX_RETURN_IF_ERROR(search_both(*db_, scope, q, plan, any_word, false, hits));
  return hits.best(q.limit);
}

// ---- Facts ----

Result<std::vector<std::pair<std::string, std::string>>> SqliteStore::facts(
    const MemoryScope& scope, const std::string& sender_id) {
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "SELECT key, value FROM facts WHERE tenant = ? AND sender_id = ? AND deleted_at IS NULL "
          "ORDER BY key"));
  stmt.bind_all(scope.tenant(), sender_id);
  std::vector<std::pair<std::string, std::string>> out;
  KERNEX_RETURN_IF_ERROR(each_row(stmt, [&]() -> Result<void> {
    out.emplace_back(stmt.text(0), stmt.text(1));
    return {};
  }));
  return out;
}

Result<void> SqliteStore::store_fact(const MemoryScope& scope, const std::string& sender_id,
                                     const std::string& key, const std::string& value) {
  if (key.empty()) return fail(ErrorCode::Usage, "memory-sqlite: a fact needs a key");
  if (invalid_utf8_at(key) || invalid_utf8_at(value)) {
    return fail(ErrorCode::Parse, "memory-sqlite: fact '" + key + "' is not valid UTF-8");
  }
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<void>([&]() -> Result<void> {
    // Re-storing a soft-deleted fact brings it back with the new value.
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare("INSERT INTO facts (tenant, sender_id, key, value) VALUES (?, ?, ?, ?) ON "
                     "CONFLICT (tenant, sender_id, key) "
                     "DO UPDATE SET "
                     "value = excluded.value, updated_at = datetime('now'), deleted_at = NULL"));
    stmt.bind_all(scope.tenant(), sender_id, key, value);
    KERNEX_RETURN_IF_ERROR(stmt.run());
    return {};
  });
}

Result<std::optional<std::string>> SqliteStore::fact(const MemoryScope& scope,
                                                     const std::string& sender_id,
                                                     const std::string& key) {
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare("SELECT value FROM facts WHERE tenant = ? AND "
                                                  "sender_id = ? AND key = ? AND deleted_at IS "
                                                  "NULL"));
  stmt.bind_all(scope.tenant(), sender_id, key);
  KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(stmt.text(0));
}

Result<std::vector<Fact>> SqliteStore::fact_records(const MemoryScope& scope,
                                                    const std::optional<std::string>& sender_id,
                                                    bool include_deleted) {
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "SELECT sender_id, key, value, updated_at, deleted_at FROM facts WHERE tenant = ?3 AND "
          "(?1 IS NULL OR sender_id = ?1) AND (?2 OR deleted_at IS NULL) ORDER BY sender_id, key"));
  stmt.bind_all(sender_id, include_deleted ? 1 : 0, scope.tenant());
  std::vector<Fact> out;
  KERNEX_RETURN_IF_ERROR(each_row(stmt, [&]() -> Result<void> {
    out.push_back({stmt.text(0), stmt.text(1), stmt.text(2), stmt.text(3), stmt.opt_text(4)});
    return {};
  }));
  return out;
}

Result<bool> SqliteStore::soft_delete_fact(const MemoryScope& scope, const std::string& sender_id,
                                           const std::string& key) {
  KERNEX_ASSIGN_OR_RETURN(auto n, soft_delete_facts(scope, sender_id, key));
  return n > 0;
}

Result<std::uint64_t> SqliteStore::soft_delete_facts(const MemoryScope& scope,
                                                     const std::string& sender_id,
                                                     const std::optional<std::string>& key) {
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<std::uint64_t>([&]() -> Result<std::uint64_t> {
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare("UPDATE facts SET deleted_at = datetime('now'), updated_at = datetime('now') "
                     "WHERE tenant = ?3 AND sender_id = ?1 AND (?2 IS NULL OR key = ?2) AND "
                     "deleted_at IS NULL"));
    stmt.bind_all(sender_id, key, scope.tenant());
    return stmt.run();
  });
}

// ---- Audit and usage ----

Result<void> SqliteStore::insert_audit(const MemoryScope& scope, const AuditRecord& rec,
                                       const std::string& args) {
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt, db_->prepare("INSERT INTO audit_log (created_at, conversation_id, sender_id, "
                              "agent, tool, arguments, result, status, reason, tenant) "
                              "VALUES (coalesce(?, datetime('now')), ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  std::optional<std::string> at =
      rec.timestamp.empty() ? std::nullopt : std::optional(rec.timestamp);
  stmt.bind_all(at, rec.conversation_id, rec.sender_id, rec.agent, rec.tool, args, rec.result,
                rec.status, rec.reason, scope.tenant());
  KERNEX_RETURN_IF_ERROR(stmt.run());
  return {};
}

Result<void> SqliteStore::record_tool_call(const MemoryScope& scope, const AuditRecord& rec) {
  KERNEX_ASSIGN_OR_RETURN(auto args, audit_arguments(rec));
  // Acknowledged once committed: a kill -9 after this returns keeps the row. It shares its batch
  // with the other runs' writes and carries the turn's new conversation (queued lazily before it).
  return write([&]() -> Result<void> { return insert_audit(scope, rec, args); });
}

Result<std::vector<AuditRecord>> SqliteStore::audit_log(const MemoryScope& scope,
                                                        std::size_t limit) {
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "SELECT created_at, conversation_id, sender_id, agent, tool, arguments, result, status, "
          "reason "
          "FROM audit_log WHERE tenant = ? ORDER BY id DESC LIMIT ?"));
  stmt.bind_all(scope.tenant(), static_cast<std::int64_t>(limit));
  std::vector<AuditRecord> out;
  auto r = each_row(stmt, [&]() -> Result<void> {
    AuditRecord a;
    a.timestamp = stmt.text(0);
    a.conversation_id = stmt.text(1);
    a.sender_id = stmt.text(2);
    a.agent = stmt.text(3);
    a.tool = stmt.text(4);
    a.arguments = parse_untrusted(stmt.text(5));
    a.result = stmt.text(6);
    a.status = stmt.text(7);
    a.reason = stmt.text(8);
    out.push_back(std::move(a));
    return {};
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

Result<void> SqliteStore::insert_usage(const MemoryScope& scope, const UsageRecord& rec) {
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "INSERT INTO token_usage (conversation_id, sender_id, model, provider, input_tokens, "
          "output_tokens, "
          "cache_read_tokens, cache_write_tokens, cost_usd, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, "
          "?, "
          "?, ?)"));
  stmt.bind_all(rec.conversation_id, rec.sender_id, rec.model, rec.provider, rec.usage.input_tokens,
                rec.usage.output_tokens, rec.usage.cache_read_tokens, rec.usage.cache_write_tokens,
                rec.usage.cost_usd, scope.tenant());
  KERNEX_RETURN_IF_ERROR(stmt.run());
  return {};
}

Result<void> SqliteStore::record_usage(const MemoryScope& scope, const UsageRecord& rec) {
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<void>([&]() { return insert_usage(scope, rec); });
}

Result<std::vector<UsageTotals>> SqliteStore::usage_by_day(const MemoryScope& scope) {
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          "SELECT substr(created_at, 1, 10) AS day, model, provider, count(*), sum(input_tokens), "
          "sum(output_tokens), "
          "sum(cache_read_tokens), sum(cache_write_tokens), sum(cost_usd) FROM token_usage "
          "WHERE tenant = ? GROUP BY day, model, provider ORDER BY day, model, provider"));
  stmt.bind(1, scope.tenant());
  std::vector<UsageTotals> out;
  auto r = each_row(stmt, [&]() -> Result<void> {
    UsageTotals t;
    t.day = stmt.text(0);
    t.model = stmt.text(1);
    t.provider = stmt.text(2);
    t.requests = static_cast<std::uint64_t>(stmt.integer(3));
    t.usage.input_tokens = static_cast<std::uint64_t>(stmt.integer(4));
    t.usage.output_tokens = static_cast<std::uint64_t>(stmt.integer(5));
    t.usage.cache_read_tokens = static_cast<std::uint64_t>(stmt.integer(6));
    t.usage.cache_write_tokens = static_cast<std::uint64_t>(stmt.integer(7));
    t.usage.cost_usd = stmt.real(8);
    out.push_back(std::move(t));
    return {};
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

}  // namespace kernex::sqlite
