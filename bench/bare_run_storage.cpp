#include "bare_run_storage.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "kernex/sqlite_wal_writes.hpp"

namespace kernex::bench {
namespace {

[[noreturn]] void die(const std::string& what) { bench::die("serve", "bare storage: " + what); }

constexpr const char* kTenant = "default";

// The memory store's statements for a new session's context (traced with sqlite3_trace_v2 on a
// bench/serve burst), bound as `kernex serve` binds a session's: ?1 the sender (the session),
// ?2 the tenant, ?3 the new conversation's id, ?4 the channel ("serve/" + tenant).
constexpr const char* kContextReads[] = {
    "SELECT id FROM conversations WHERE tenant = ?2 AND channel = ?4 AND sender_id = ?1 AND "
    "project = '' AND status = 'active' AND last_activity > datetime('now', '-120 minutes') "
    "ORDER BY last_activity DESC, rowid DESC LIMIT 1",
    "SELECT EXISTS (SELECT 1 FROM conversations c JOIN messages m ON m.conversation_id = c.id "
    "WHERE c.tenant = ?2 AND c.sender_id = ?1 AND m.role = 'user'), EXISTS (SELECT 1 FROM "
    "conversations c JOIN summaries s ON s.conversation_id = c.id WHERE c.tenant = ?2 AND "
    "c.sender_id = ?1 AND c.id != ?3)",
    "SELECT s.conversation_id, s.text, s.covered_messages, s.updated_at, s.id FROM summaries s "
    "JOIN conversations c ON c.id = s.conversation_id WHERE c.tenant = ?2 AND c.channel = ?4 "
    "AND c.sender_id = ?1 AND s.conversation_id != ?3",
    "SELECT key, value FROM facts WHERE tenant = ?2 AND sender_id = ?1 AND deleted_at IS NULL "
    "ORDER BY key",
    "SELECT sender_id, domain, rule, project, occurrences, updated_at FROM lessons WHERE tenant = "
    "?2 AND sender_id = ?1 AND project = '' ORDER BY recency DESC LIMIT 10",
    "SELECT sender_id, domain, score, lesson, source, project, created_at FROM outcomes WHERE "
    "tenant = ?2 AND sender_id = ?1 ORDER BY id DESC LIMIT 15",
    "SELECT id, channel, sender_id, reply_target, description, due_at, repeat, task_type, "
    "project, max_retries, status, retry_count, last_error, claimed_by, lease_until, created_at "
    "FROM scheduled_tasks WHERE tenant = ?2 AND sender_id = ?1 AND status = 'pending' ORDER BY "
    "due_at, rowid",
};

sqlite3* open_db(const std::filesystem::path& file, int flags) {
  sqlite3* db = nullptr;
  // The stores' VFS (a commit's WAL frames in one write), as kernex's serve.db and memory open
  // theirs: the floor's commits cost no more system calls than kernex's.
  if (sqlite3_open_v2(file.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, sqlite_wal_vfs()) !=
      SQLITE_OK)
    die("cannot open " + file.string() + ": " + sqlite3_errmsg(db));
  sqlite3_busy_timeout(db, 5000);
  return db;
}

void exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string why = error ? error : "?";
    sqlite3_free(error);
    die(std::string(sql) + ": " + why);
  }
}

sqlite3_stmt* prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) != SQLITE_OK)
    die(std::string("cannot prepare ") + sql + ": " + sqlite3_errmsg(db));
  return st;
}

void step_once(sqlite3_stmt* st) {
  const int rc = sqlite3_step(st);
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) die(std::string(sqlite3_sql(st)) + " failed");
}

void bind_text(sqlite3_stmt* st, int i, const std::string& s) {
  sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

}  // namespace

struct BareRunStorage::Impl {
  struct Row {
    std::string id, session;
    std::function<void()> committed;
  };

  // One read connection a thread (no lock between the proxy's threads), opened and prepared
  // before the proxy listens; a thread takes one at its first request.
  struct Reader {
    sqlite3* db = nullptr;
    std::vector<sqlite3_stmt*> reads;
    sqlite3_stmt *begin = nullptr, *commit = nullptr;
  };
  std::uint64_t id = 0;  // this instance's, for the threads' cached choice
  std::mutex readers_mutex;
  std::vector<std::unique_ptr<Reader>> readers;
  std::size_t taken = 0;
  Reader& reader();

  sqlite3* writer = nullptr;
  sqlite3_stmt *insert = nullptr, *write_begin = nullptr, *write_commit = nullptr;
  std::mutex queue_mutex;
  std::condition_variable queued;
  std::deque<Row> queue;
  bool stopping = false;
  std::thread thread;

  void write_loop();
  void commit_batch(std::deque<Row>& batch);
};

BareRunStorage::BareRunStorage(const std::filesystem::path& memory_db,
                               const std::filesystem::path& runs_db, int threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  static std::atomic<std::uint64_t> instances{0};
  s.id = ++instances;
  for (int i = 0; i < std::max(1, threads); ++i) {
    auto r = std::make_unique<Impl::Reader>();
    r->db = open_db(memory_db, SQLITE_OPEN_READWRITE);
    for (const char* sql : kContextReads) r->reads.push_back(prepare(r->db, sql));
    r->begin = prepare(r->db, "BEGIN");
    r->commit = prepare(r->db, "COMMIT");
    s.readers.push_back(std::move(r));
  }
  s.writer = open_db(runs_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  exec(s.writer,
       "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS runs (id "
       "TEXT PRIMARY KEY, tenant TEXT NOT NULL, session TEXT NOT NULL, status TEXT NOT NULL, "
       "created_at TEXT NOT NULL, request TEXT, result TEXT, events TEXT); CREATE INDEX IF NOT "
       "EXISTS runs_by_session ON runs(tenant, session); CREATE INDEX IF NOT EXISTS "
       "runs_by_status ON runs(status);");
  // One row a run, inserted running: kernex inserts it queued and updates it (two index changes
  // of runs_by_status); a floor does the least.
  s.insert = prepare(s.writer,
                     "INSERT INTO runs (id, tenant, session, status, created_at) VALUES (?, "
                     "'default', ?, 'running', ?)");
  s.write_begin = prepare(s.writer, "BEGIN IMMEDIATE");
  s.write_commit = prepare(s.writer, "COMMIT");
  s.thread = std::thread([&s] { s.write_loop(); });
}

BareRunStorage::~BareRunStorage() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.queue_mutex);
    s.stopping = true;
  }
  s.queued.notify_one();
  s.thread.join();
  for (auto& r : s.readers) {
    for (sqlite3_stmt* st : r->reads) sqlite3_finalize(st);
    sqlite3_finalize(r->begin);
    sqlite3_finalize(r->commit);
    sqlite3_close(r->db);
  }
  for (sqlite3_stmt* st : {s.insert, s.write_begin, s.write_commit}) sqlite3_finalize(st);
  sqlite3_close(s.writer);
}

std::size_t BareRunStorage::context_build(const std::string& sender) {
  Impl& s = *impl_;
  const std::string channel = std::string("serve/") + kTenant, conversation = "new-" + sender;
  std::size_t rows = 0;
  Impl::Reader& r = s.reader();
  step_once(r.begin);
  for (sqlite3_stmt* st : r.reads) {
    // By name: each statement has the parameters it uses (?3 and ?4 only some).
    bind_text(st, 1, sender);
    sqlite3_bind_text(st, 2, kTenant, -1, SQLITE_STATIC);
    if (const int i = sqlite3_bind_parameter_index(st, "?3"); i > 0) bind_text(st, i, conversation);
    if (const int i = sqlite3_bind_parameter_index(st, "?4"); i > 0) bind_text(st, i, channel);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) ++rows;
    sqlite3_reset(st);
    // A read that failed would make the floor cheaper than the work it stands for.
    if (rc != SQLITE_DONE) die(std::string("context read failed: ") + sqlite3_errmsg(r.db));
  }
  step_once(r.commit);
  return rows;
}

BareRunStorage::Impl::Reader& BareRunStorage::Impl::reader() {
  thread_local std::pair<std::uint64_t, Reader*> mine{0, nullptr};
  if (mine.first == id) return *mine.second;
  std::lock_guard lock(readers_mutex);
  if (taken == readers.size()) die("more request threads than read connections");
  mine = {id, readers[taken++].get()};
  return *mine.second;
}

void BareRunStorage::record(std::string run_id, std::string session,
                            std::function<void()> committed) {
  Impl& s = *impl_;
  bool first = false;
  {
    std::lock_guard lock(s.queue_mutex);
    first = s.queue.empty();
    s.queue.push_back({std::move(run_id), std::move(session), std::move(committed)});
  }
  if (first) s.queued.notify_one();
}

void BareRunStorage::Impl::write_loop() {
  std::unique_lock lock(queue_mutex);
  for (;;) {
    queued.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;  // stopping, nothing left
    std::deque<Row> batch;
    batch.swap(queue);
    lock.unlock();
    commit_batch(batch);
    for (auto& row : batch) row.committed();
    lock.lock();
  }
}

void BareRunStorage::Impl::commit_batch(std::deque<Row>& batch) {
  char now[32];
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&t, &utc);
  std::strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &utc);
  step_once(write_begin);
  for (const auto& row : batch) {
    bind_text(insert, 1, row.id);
    bind_text(insert, 2, row.session);
    sqlite3_bind_text(insert, 3, now, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(insert) != SQLITE_DONE) die("insert failed");
    sqlite3_reset(insert);
  }
  step_once(write_commit);
}

}  // namespace kernex::bench
