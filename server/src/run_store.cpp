#include "run_store.hpp"

#include "kernex/log.hpp"
#include "sqlite_db.hpp"
#include "stored_json.hpp"

#include <algorithm>
#include <cstdint>

namespace kernex::server {
namespace {

constexpr const char* kSqliteRunColumns =
    "id, tenant, session, status, created_at, request, result, (SELECT COALESCE(MAX(seq), 0) "
    "FROM run_events WHERE run_id = runs.id)";

StoredRun read_run(const Statement& st) {
  StoredRun r;
  r.id = st.text(0);
  r.tenant = st.text(1);
  r.session = st.text(2);
  r.status = st.text(3);
  r.created_at = st.text(4);
  r.request = stored_json(st.text(5));
  r.result = stored_json(st.text(6));
  r.event_count = static_cast<std::uint64_t>(std::max<std::int64_t>(0, st.integer(7)));
  return r;
}

// Runs finished by an older server keep their log in runs.events: moved to run_events (ids
// renumbered past entries that are not events, as they were read before), once.
constexpr const char* kMigrateEvents =
    "INSERT OR IGNORE INTO run_events (run_id, seq, name, data) "
    "SELECT id, ROW_NUMBER() OVER (PARTITION BY id ORDER BY k), name, data FROM ("
    "SELECT r.id AS id, j.key AS k, j.value ->> '$.name' AS name, "
    "COALESCE(j.value -> '$.data', '{}') AS data FROM runs r, json_each(r.events) j "
    "WHERE r.events IS NOT NULL AND json_valid(r.events) AND json_type(r.events) = 'array' "
    "AND json_type(j.value, '$.name') = 'text')";

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
           "CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status)",
           // One row per event, so a follower replays a page at a time (the `events` column
           // held the whole log as one JSON array before).
           "CREATE TABLE IF NOT EXISTS run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
           "name TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
           kMigrateEvents, "UPDATE runs SET events = NULL WHERE events IS NOT NULL"}));
  auto writer = ServeWriter::of(file);
  if (!writer) {
    close_serve_db(db);
    return std::unexpected(writer.error());
  }
  return std::unique_ptr<RunStore>(new RunStore(db, std::move(*writer)));
}

RunStore::~RunStore() { close_serve_db(db_); }

namespace {
constexpr const char* kInsertRun =
    "INSERT INTO runs (id, tenant, session, status, created_at, request) VALUES (?, ?, ?, "
    "'queued', ?, ?)";

// A run's columns as inserted: copies, as a queued item may run again after its caller returned.
struct RunRow {
  std::string id, tenant, session, created_at, request;
  RunRow(const RunState& run, const Json& req)
      : id(run.id),
        tenant(run.tenant),
        session(run.session),
        created_at(run.created_at),
        request(req.dump(-1, ' ', false, Json::error_handler_t::replace)) {}
};

Result<void> insert_run(sqlite3* db, const RunRow& row) {
  Statement st(db, kInsertRun);
  if (!st.ok()) return db_error(db, "insert");
  st.bind(1, row.id).bind(2, row.tenant).bind(3, row.session).bind(4, row.created_at);
  st.bind(5, row.request);
  if (st.step() != SQLITE_DONE) return db_error(db, "insert");
  return {};
}
}  // namespace

Result<void> RunStore::insert(const RunState& run, const Json& request) {
  const RunRow row(run, request);
  return writer_->write([&](sqlite3* db) { return insert_run(db, row); });
}

void RunStore::insert(const RunState& run, const Json& request,
                      std::function<void(const Result<void>&)> done) {
  writer_->submit_then([row = RunRow(run, request)](sqlite3* db) { return insert_run(db, row); },
                       std::move(done));
}

namespace {
Result<void> update_status(sqlite3* db, const std::string& id, RunStatus status) {
  Statement st(db, "UPDATE runs SET status = ? WHERE id = ?");
  if (!st.ok()) return db_error(db, "update");
  st.bind(1, std::string(to_string(status))).bind(2, id);
  if (st.step() != SQLITE_DONE) return db_error(db, "update");
  return {};
}
}  // namespace

Result<void> RunStore::set_status(const std::string& id, RunStatus status) {
  return writer_->write([&](sqlite3* db) { return update_status(db, id, status); });
}

void RunStore::mark_running(const std::string& id) {
  writer_->submit([id](sqlite3* db) { return update_status(db, id, RunStatus::Running); },
                  "run " + id + " running");
}

namespace {

// The events and the end, in the batch's transaction.
Result<void> write_end(sqlite3* db, const std::string& id, RunStatus status,
                       const std::string& result, const std::vector<std::string>& events,
                       const std::vector<RunEvent>& run_events) {
  Statement ev(db,
               "INSERT OR REPLACE INTO run_events (run_id, seq, name, data) VALUES (?, ?, ?, ?)");
  if (!ev.ok()) return db_error(db, "finish");
  for (std::size_t i = 0; i < run_events.size(); ++i) {
    ev.reset();
    ev.bind(1, id).bind(2, static_cast<std::int64_t>(i + 1)).bind(3, run_events[i].name);
    ev.bind(4, events[i]);
    if (ev.step() != SQLITE_DONE) return db_error(db, "finish");
  }
  Statement st(db, "UPDATE runs SET status = ?, result = ?, events = NULL WHERE id = ?");
  if (!st.ok()) return db_error(db, "finish");
  st.bind(1, std::string(to_string(status))).bind(2, result).bind(3, id);
  if (st.step() != SQLITE_DONE) return db_error(db, "finish");
  return {};
}

}  // namespace

Result<void> RunStore::finish(const std::string& id, RunStatus status, const Json& result,
                              const std::vector<RunEvent>& run_events) {
  // Serialised here, off the writer's thread: its batch only binds them.
  const std::string result_text = result.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::vector<std::string> events;
  events.reserve(run_events.size());
  for (const auto& e : run_events)
    events.push_back(e.data.dump(-1, ' ', false, Json::error_handler_t::replace));
  const auto& hook = finish_hook_;
  KERNEX_RETURN_IF_ERROR(writer_->write([&](sqlite3* db) -> Result<void> {
    KERNEX_RETURN_IF_ERROR(write_end(db, id, status, result_text, events, run_events));
    if (hook.in_transaction) return hook.in_transaction(db, id, status, result);
    return {};
  }));
  return {};
}

void RunStore::announce_end() const {
  if (finish_hook_.after_commit) finish_hook_.after_commit();
}

Result<std::vector<RunEvent>> RunStore::events_page(const std::string& id, std::uint64_t after,
                                                    std::size_t max, std::size_t max_bytes) {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               "SELECT seq, name, data FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq "
               "LIMIT ?");
  if (!st.ok()) return db_error(db_, "events");
  st.bind(1, id).bind(2, static_cast<std::int64_t>(std::min<std::uint64_t>(after, INT64_MAX)));
  st.bind(3, static_cast<std::int64_t>(std::min<std::size_t>(max, INT64_MAX)));
  std::vector<RunEvent> out;
  std::size_t bytes = 0;
  while (out.empty() || bytes < max_bytes) {
    const int rc = st.step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return db_error(db_, "events");
    RunEvent e{static_cast<std::uint64_t>(st.integer(0)), st.text(1), stored_json(st.text(2))};
    if (e.data.is_null()) e.data = Json::object();
    bytes += e.name.size() + static_cast<std::size_t>(sqlite3_column_bytes(st.get(), 2));
    // Ids are contiguous; a gap (a damaged file) ends the page rather than renumbering.
    if (e.id != after + out.size() + 1) break;
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::optional<StoredRun>> RunStore::find(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(
      db_, (std::string("SELECT ") + kSqliteRunColumns + " FROM runs WHERE id = ? AND tenant = ?")
               .c_str());
  if (!st.ok()) return db_error(db_, "find");
  st.bind(1, id).bind(2, tenant);
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) return db_error(db_, "find");
  return read_run(st);
}

Result<bool> RunStore::exists(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT 1 FROM runs WHERE id = ? AND tenant = ?");
  if (!st.ok()) return db_error(db_, "find");
  st.bind(1, id).bind(2, tenant);
  const int rc = st.step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_error(db_, "find");
  return rc == SQLITE_ROW;
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
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_run(st));
  if (rc != SQLITE_DONE) return db_error(db_, "list");
  return out;
}

Result<std::vector<StoredRun>> RunStore::unfinished() {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               (std::string("SELECT ") + kSqliteRunColumns +
                " FROM runs WHERE status IN ('queued', 'running', 'awaiting_approval') ORDER BY "
                "rowid ASC")
                   .c_str());
  if (!st.ok()) return db_error(db_, "unfinished");
  std::vector<StoredRun> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_run(st));
  if (rc != SQLITE_DONE) return db_error(db_, "unfinished");
  return out;
}

namespace {

bool has_table(sqlite3* db, const char* name) {
  Statement st(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  return st.ok() && st.bind(1, std::string(name)).step() == SQLITE_ROW;
}

Result<void> delete_session_rows(sqlite3* db, const std::string& tenant,
                                 const std::string& session) {
  constexpr const char* kRuns = "(SELECT id FROM runs WHERE tenant = ?1 AND session = ?2)";
  std::vector<std::string> sql;
  // The journals of its runs (JournalStore's tables, there when approvals are on).
  if (has_table(db, "run_responses"))
    sql.push_back(std::string("DELETE FROM run_responses WHERE run_id IN ") + kRuns);
  if (has_table(db, "run_tools"))
    sql.push_back(std::string("DELETE FROM run_tools WHERE run_id IN ") + kRuns);
  // Webhook events of its runs: one not delivered yet is still sent, as a tombstone with the same
  // id and type whose data is only {run_id, forgotten: true}; a delivered one has nothing left
  // to do and goes.
  if (has_table(db, "webhook_outbox")) {
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
  // Its events (one row each), found through the runs: before them.
  sql.push_back(std::string("DELETE FROM run_events WHERE run_id IN ") + kRuns);
  sql.push_back("DELETE FROM runs WHERE tenant = ?1 AND session = ?2");
  for (const auto& text : sql) {
    Statement st(db, text.c_str());
    if (!st.ok()) return db_error(db, "delete");
    st.bind(1, tenant).bind(2, session);
    if (st.step() != SQLITE_DONE) return db_error(db, "delete");
  }
  return {};
}

}  // namespace

Result<void> RunStore::delete_session(const std::string& tenant, const std::string& session) {
  KERNEX_RETURN_IF_ERROR(
      writer_->write([&](sqlite3* db) { return delete_session_rows(db, tenant, session); }));
  // The rows are gone and zeroed; older copies of their pages may still be in the WAL. A reader
  // that outwaits the busy timeout leaves them there until the next checkpoint: logged, and the
  // deletion stands.
  std::lock_guard lock(mutex_);
  if (auto r = truncate_wal(db_); !r) log(LogLevel::Warn, "serve: " + r.error().describe());
  return {};
}

}  // namespace kernex::server
