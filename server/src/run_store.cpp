#include "run_store.hpp"

#include "kernex/log.hpp"
#include "sqlite_db.hpp"

namespace kernex::server {
namespace {

// The store is ours, but a corrupt row must not take the server down: unreadable JSON is null.
Json parse_or_null(const std::string& text) {
  if (text.empty()) return nullptr;
  Json j = parse_untrusted(text);
  return j.is_discarded() ? Json(nullptr) : j;
}

std::vector<RunEvent> events_from(const Json& array) {
  std::vector<RunEvent> out;
  if (!array.is_array()) return out;
  for (const auto& e : array) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) continue;
    out.push_back(
        RunEvent{out.size() + 1, e["name"].get<std::string>(), e.value("data", Json::object())});
  }
  return out;
}

constexpr const char* kColumns = "id, tenant, session, status, created_at, request, result, events";

StoredRun read_row(const Statement& st) {
  StoredRun r;
  r.id = st.text(0);
  r.tenant = st.text(1);
  r.session = st.text(2);
  r.status = st.text(3);
  r.created_at = st.text(4);
  r.request = parse_or_null(st.text(5));
  r.result = parse_or_null(st.text(6));
  r.events = events_from(parse_or_null(st.text(7)));
  return r;
}

}  // namespace

Result<std::unique_ptr<RunStore>> RunStore::open(const std::filesystem::path& file) {
  KERNEX_ASSIGN_OR_RETURN(
      sqlite3 * db,
      open_serve_db(
          file,
          {"CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, session "
           "TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL, request TEXT, result "
           "TEXT, events TEXT)",
           "CREATE INDEX IF NOT EXISTS runs_by_session ON runs(tenant, session)",
           "CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status)"}));
  return std::unique_ptr<RunStore>(new RunStore(db));
}

RunStore::~RunStore() { sqlite3_close(db_); }

Result<void> RunStore::insert(const RunState& run, const Json& request) {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               "INSERT INTO runs (id, tenant, session, status, created_at, request) VALUES (?, ?, "
               "?, 'queued', ?, ?)");
  if (!st.ok()) return db_error(db_, "insert");
  st.bind(1, run.id).bind(2, run.tenant).bind(3, run.session).bind(4, run.created_at);
  st.bind(5, request.dump(-1, ' ', false, Json::error_handler_t::replace));
  if (st.step() != SQLITE_DONE) return db_error(db_, "insert");
  return {};
}

Result<void> RunStore::set_status(const std::string& id, RunStatus status) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "UPDATE runs SET status = ? WHERE id = ?");
  if (!st.ok()) return db_error(db_, "update");
  st.bind(1, std::string(to_string(status))).bind(2, id);
  if (st.step() != SQLITE_DONE) return db_error(db_, "update");
  return {};
}

Result<void> RunStore::finish(const std::string& id, RunStatus status, const Json& result,
                              const std::vector<RunEvent>& run_events) {
  std::unique_lock lock(mutex_);
  if (!finish_hook_.in_transaction) return finish_locked(id, status, result, run_events);
  KERNEX_RETURN_IF_ERROR(exec_sql(db_, "BEGIN IMMEDIATE"));
  auto done = finish_locked(id, status, result, run_events);
  if (done) done = finish_hook_.in_transaction(db_, id, status, result);
  if (done) done = exec_sql(db_, "COMMIT");
  if (!done) {
    (void)exec_sql(db_, "ROLLBACK");
    return done;
  }
  lock.unlock();
  if (finish_hook_.after_commit) finish_hook_.after_commit();
  return {};
}

Result<void> RunStore::finish_locked(const std::string& id, RunStatus status, const Json& result,
                                     const std::vector<RunEvent>& run_events) {
  Json events = Json::array();
  for (auto& e : run_events) events.push_back({{"name", e.name}, {"data", e.data}});
  Statement st(db_, "UPDATE runs SET status = ?, result = ?, events = ? WHERE id = ?");
  if (!st.ok()) return db_error(db_, "finish");
  st.bind(1, std::string(to_string(status)));
  st.bind(2, result.dump(-1, ' ', false, Json::error_handler_t::replace));
  st.bind(3, events.dump(-1, ' ', false, Json::error_handler_t::replace));
  st.bind(4, id);
  if (st.step() != SQLITE_DONE) return db_error(db_, "finish");
  return {};
}

Result<std::optional<StoredRun>> RunStore::find(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(
      db_, (std::string("SELECT ") + kColumns + " FROM runs WHERE id = ? AND tenant = ?").c_str());
  if (!st.ok()) return db_error(db_, "find");
  st.bind(1, id).bind(2, tenant);
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) return db_error(db_, "find");
  return read_row(st);
}

Result<std::vector<StoredRun>> RunStore::session_runs(const std::string& tenant,
                                                      const std::string& session,
                                                      std::size_t limit) {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               "SELECT id, tenant, session, status, created_at, request, result, '' FROM runs "
               "WHERE tenant = ? AND session = ? ORDER BY rowid DESC LIMIT ?");
  if (!st.ok()) return db_error(db_, "list");
  st.bind(1, tenant).bind(2, session).bind(3, static_cast<std::int64_t>(limit));
  std::vector<StoredRun> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_row(st));
  if (rc != SQLITE_DONE) return db_error(db_, "list");
  return out;
}

Result<std::vector<StoredRun>> RunStore::unfinished() {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               (std::string("SELECT ") + kColumns +
                " FROM runs WHERE status IN ('queued', 'running', 'awaiting_approval') ORDER BY "
                "rowid ASC")
                   .c_str());
  if (!st.ok()) return db_error(db_, "unfinished");
  std::vector<StoredRun> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_row(st));
  if (rc != SQLITE_DONE) return db_error(db_, "unfinished");
  return out;
}

bool RunStore::has_table(const char* name) {
  Statement st(db_, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  return st.ok() && st.bind(1, std::string(name)).step() == SQLITE_ROW;
}

Result<void> RunStore::delete_session_locked(const std::string& tenant,
                                             const std::string& session) {
  constexpr const char* kRuns = "(SELECT id FROM runs WHERE tenant = ?1 AND session = ?2)";
  std::vector<std::string> sql;
  // The journals of its runs (JournalStore's tables, there when approvals are on).
  if (has_table("run_responses"))
    sql.push_back(std::string("DELETE FROM run_responses WHERE run_id IN ") + kRuns);
  if (has_table("run_tools"))
    sql.push_back(std::string("DELETE FROM run_tools WHERE run_id IN ") + kRuns);
  // Webhook events of its runs: one not delivered yet is still sent, as a tombstone with the same
  // id and type whose data is only {run_id, forgotten: true}; a delivered one has nothing left
  // to do and goes.
  if (has_table("webhook_outbox")) {
    sql.push_back(
        std::string("UPDATE webhook_outbox SET body = json_object('type', type, 'id', event_id, "
                    "'created_at', CASE WHEN json_valid(body) THEN json_extract(body, "
                    "'$.created_at') END, 'data', json_object('run_id', stream, 'forgotten', "
                    "json('true'))) WHERE status != 'delivered' AND stream IN ") +
        kRuns);
    sql.push_back(
        std::string("DELETE FROM webhook_outbox WHERE status = 'delivered' AND stream IN ") +
        kRuns);
  }
  sql.push_back("DELETE FROM runs WHERE tenant = ?1 AND session = ?2");
  for (const auto& text : sql) {
    Statement st(db_, text.c_str());
    if (!st.ok()) return db_error(db_, "delete");
    st.bind(1, tenant).bind(2, session);
    if (st.step() != SQLITE_DONE) return db_error(db_, "delete");
  }
  return {};
}

Result<void> RunStore::delete_session(const std::string& tenant, const std::string& session) {
  std::lock_guard lock(mutex_);
  KERNEX_RETURN_IF_ERROR(exec_sql(db_, "BEGIN IMMEDIATE"));
  auto done = delete_session_locked(tenant, session);
  if (done) done = exec_sql(db_, "COMMIT");
  if (!done) {
    (void)exec_sql(db_, "ROLLBACK");
    return done;
  }
  // The rows are gone and zeroed; older copies of their pages may still be in the WAL. A reader
  // that outwaits the busy timeout leaves them there until the next checkpoint: logged, and the
  // deletion stands.
  if (auto r = truncate_wal(db_); !r) log(LogLevel::Warn, "serve: " + r.error().describe());
  return {};
}

}  // namespace kernex::server
