#include "webhook_outbox.hpp"

#include <sqlite3.h>

#include <chrono>
#include <ctime>

#include "random_id.hpp"
#include "sqlite_db.hpp"

namespace kernex::server {
namespace {

constexpr int kOutboxBusyTimeoutMs = 5000;

constexpr const char* kSchema[] = {
    "CREATE TABLE IF NOT EXISTS webhook_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "event_id TEXT NOT NULL, endpoint TEXT NOT NULL, stream TEXT NOT NULL, type TEXT NOT NULL, "
    "body TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "created_ms INTEGER NOT NULL, window_ms INTEGER NOT NULL, next_ms INTEGER NOT NULL, "
    "delivered_ms INTEGER NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '')",
    "CREATE INDEX IF NOT EXISTS webhook_outbox_pending ON webhook_outbox(endpoint, status, "
    "next_ms)",
    "CREATE INDEX IF NOT EXISTS webhook_outbox_stream ON webhook_outbox(endpoint, stream, status, "
    "id)",
    // An event made again under its id (an approval announced by a resumed run) is one row.
    "CREATE UNIQUE INDEX IF NOT EXISTS webhook_outbox_event ON webhook_outbox(event_id, endpoint)"};

constexpr const char* kOutboxColumns =
    "id, event_id, endpoint, stream, type, body, status, attempts, created_ms, window_ms, "
    "next_ms, delivered_ms, last_error";

OutboxRow read_outbox_row(const Statement& st) {
  OutboxRow r;
  r.id = st.integer(0);
  r.event_id = st.text(1);
  r.endpoint = st.text(2);
  r.stream = st.text(3);
  r.type = st.text(4);
  r.body = st.text(5);
  r.status = st.text(6);
  r.attempts = st.integer(7);
  r.created_ms = st.integer(8);
  r.window_ms = st.integer(9);
  r.next_ms = st.integer(10);
  r.delivered_ms = st.integer(11);
  r.last_error = st.text(12);
  return r;
}

Result<std::vector<OutboxRow>> read_rows(sqlite3* db, Statement& st, const char* what) {
  std::vector<OutboxRow> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_outbox_row(st));
  if (rc != SQLITE_DONE) return db_error(db, what);
  return out;
}

}  // namespace

std::string iso_utc(std::int64_t unix_ms) {
  if (unix_ms <= 0) return "";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

WebhookEvent make_webhook_event(const std::string& type, const Json& data) {
  WebhookEvent e;
  // An approval's event is one per approval and type, however often it is announced (a run
  // resumed on another node asks again): its id is derived, and the outbox keeps one row of it
  // per endpoint.
  auto approval = data.find("approval_id");
  e.id = type.starts_with("approval.") && approval != data.end() && approval->is_string()
             ? "evt_" + approval->get<std::string>() + "_" + type.substr(9)
             : random_id("evt");
  e.type = type;
  auto run = data.find("run_id");
  e.stream = run != data.end() && run->is_string() && !run->get<std::string>().empty()
                 ? run->get<std::string>()
                 : e.id;
  const Json body{
      {"type", type}, {"id", e.id}, {"created_at", iso_utc(unix_ms_now())}, {"data", data}};
  e.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return e;
}

Result<std::unique_ptr<WebhookOutbox>> WebhookOutbox::open(const std::filesystem::path& serve_db) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(serve_db.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    auto e = db_error(db, "opening " + serve_db.string());
    close_serve_db(db);
    return e;
  }
  sqlite3_busy_timeout(db, kOutboxBusyTimeoutMs);
  std::unique_ptr<WebhookOutbox> outbox(new WebhookOutbox(db));
  // secure_delete is per connection: this one rewrites and prunes bodies (answers, tool output),
  // and their old copies must be zeroed too, or a forgotten session's words stay in free pages.
  if (sqlite3_exec(db, "PRAGMA secure_delete=ON", nullptr, nullptr, nullptr) != SQLITE_OK)
    return db_error(db, "setting secure_delete on the webhook outbox");
  for (const char* sql : kSchema) {
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
      return db_error(db, "creating the webhook outbox");
  }
  // Writes ride serve.db's batches with the runs' (its connection has secure_delete too).
  KERNEX_ASSIGN_OR_RETURN(outbox->writer_, ServeWriter::of(serve_db));
  return outbox;
}

WebhookOutbox::~WebhookOutbox() { close_serve_db(db_); }

Result<void> WebhookOutbox::enqueue(sqlite3* db, const WebhookEvent& event,
                                    const std::vector<std::string>& endpoints,
                                    std::int64_t now_ms) {
  for (const auto& endpoint : endpoints) {
    Statement st(db,
                 "INSERT OR IGNORE INTO webhook_outbox (event_id, endpoint, stream, type, body, "
                 "status, created_ms, window_ms, next_ms) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, "
                 "?)");
    if (!st.ok()) return db_error(db, "webhook enqueue");
    st.bind(1, event.id).bind(2, endpoint).bind(3, event.stream).bind(4, event.type);
    st.bind(5, event.body).bind(6, now_ms).bind(7, now_ms).bind(8, now_ms);
    if (st.step() != SQLITE_DONE) return db_error(db, "webhook enqueue");
  }
  return {};
}

Result<void> WebhookOutbox::enqueue(const WebhookEvent& event,
                                    const std::vector<std::string>& endpoints) {
  const std::int64_t now = unix_ms_now();
  // One item of a batch: every endpoint's row or none (the item's savepoint).
  return writer_->write([&](sqlite3* db) { return enqueue(db, event, endpoints, now); });
}

Result<std::vector<OutboxRow>> WebhookOutbox::due(const std::string& endpoint, std::int64_t now_ms,
                                                  std::size_t limit) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kOutboxColumns +
                     " FROM webhook_outbox o WHERE endpoint = ? AND status = 'pending' AND "
                     "next_ms <= ? AND NOT EXISTS (SELECT 1 FROM webhook_outbox p WHERE "
                     "p.endpoint = o.endpoint AND p.stream = o.stream AND p.status = 'pending' "
                     "AND p.id < o.id) ORDER BY id LIMIT ?")
                        .c_str());
  if (!st.ok()) return db_error(db_, "webhook due");
  st.bind(1, endpoint).bind(2, now_ms).bind(3, static_cast<std::int64_t>(limit));
  return read_rows(db_, st, "webhook due");
}

Result<std::optional<std::int64_t>> WebhookOutbox::next_due(const std::string& endpoint) {
  std::lock_guard lock(mutex_);
  // Only heads of their streams: a row waiting behind an earlier one of its run is not due.
  Statement st(db_,
               "SELECT MIN(next_ms) FROM webhook_outbox o WHERE endpoint = ? AND status = "
               "'pending' AND NOT EXISTS (SELECT 1 FROM webhook_outbox p WHERE p.endpoint = "
               "o.endpoint AND p.stream = o.stream AND p.status = 'pending' AND p.id < o.id)");
  if (!st.ok()) return db_error(db_, "webhook next");
  st.bind(1, endpoint);
  if (st.step() != SQLITE_ROW) return db_error(db_, "webhook next");
  if (st.text(0).empty()) return std::nullopt;
  return st.integer(0);
}

Result<void> WebhookOutbox::update(const char* sql, std::int64_t id, std::int64_t a,
                                   const std::string& text) {
  return writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db, sql);
    if (!st.ok()) return db_error(db, "webhook update");
    st.bind(1, a).bind(2, text).bind(3, id);
    if (st.step() != SQLITE_DONE) return db_error(db, "webhook update");
    return {};
  });
}

Result<void> WebhookOutbox::delivered(std::int64_t id, std::int64_t now_ms) {
  return update(
      "UPDATE webhook_outbox SET status = 'delivered', attempts = attempts + 1, "
      "delivered_ms = ?, last_error = ? WHERE id = ?",
      id, now_ms, "");
}

Result<void> WebhookOutbox::retry_later(std::int64_t id, std::int64_t attempts,
                                        std::int64_t next_ms, const std::string& error) {
  return writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(
        db, "UPDATE webhook_outbox SET attempts = ?, next_ms = ?, last_error = ? WHERE id = ?");
    if (!st.ok()) return db_error(db, "webhook update");
    st.bind(1, attempts).bind(2, next_ms).bind(3, error).bind(4, id);
    if (st.step() != SQLITE_DONE) return db_error(db, "webhook update");
    return {};
  });
}

Result<void> WebhookOutbox::give_up(std::int64_t id, std::int64_t attempts,
                                    const std::string& error) {
  return update(
      "UPDATE webhook_outbox SET status = 'failed', attempts = ?, last_error = ? WHERE id = ?", id,
      attempts, error);
}

Result<void> WebhookOutbox::hurry(const std::string& endpoint, std::int64_t now_ms) {
  return writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db,
                 "UPDATE webhook_outbox SET next_ms = ? WHERE endpoint = ? AND status = 'pending' "
                 "AND next_ms > ?");
    if (!st.ok()) return db_error(db, "webhook update");
    st.bind(1, now_ms).bind(2, endpoint).bind(3, now_ms);
    if (st.step() != SQLITE_DONE) return db_error(db, "webhook update");
    return {};
  });
}

Result<std::size_t> WebhookOutbox::prune_delivered(std::int64_t before_ms) {
  std::size_t pruned = 0;  // set by the item, which may run again: it only overwrites
  KERNEX_RETURN_IF_ERROR(writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db, "DELETE FROM webhook_outbox WHERE status = 'delivered' AND delivered_ms < ?");
    if (!st.ok()) return db_error(db, "webhook prune");
    st.bind(1, before_ms);
    if (st.step() != SQLITE_DONE) return db_error(db, "webhook prune");
    pruned = static_cast<std::size_t>(sqlite3_changes(db));
    return {};
  }));
  return pruned;
}

Result<std::vector<OutboxRow>> WebhookOutbox::list(bool failed_only, std::size_t limit) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kOutboxColumns + " FROM webhook_outbox" +
                     (failed_only ? " WHERE status = 'failed'" : "") + " ORDER BY id DESC LIMIT ?")
                        .c_str());
  if (!st.ok()) return db_error(db_, "webhook list");
  st.bind(1, static_cast<std::int64_t>(limit));
  return read_rows(db_, st, "webhook list");
}

Result<std::size_t> WebhookOutbox::retry(const std::vector<std::int64_t>& ids,
                                         std::int64_t now_ms) {
  const char* sql = ids.empty()
                        ? "UPDATE webhook_outbox SET status = 'pending', next_ms = ?1, window_ms = "
                          "?1, attempts = 0 WHERE status = 'failed'"
                        : "UPDATE webhook_outbox SET status = 'pending', next_ms = ?1, window_ms = "
                          "?1, attempts = 0 WHERE status = 'failed' AND id = ?2";
  std::size_t changed = 0;
  KERNEX_RETURN_IF_ERROR(writer_->write([&](sqlite3* db) -> Result<void> {
    changed = 0;  // the item may run again
    for (std::size_t i = 0; i < std::max<std::size_t>(1, ids.size()); ++i) {
      Statement st(db, sql);
      if (!st.ok()) return db_error(db, "webhook retry");
      st.bind(1, now_ms);
      if (!ids.empty()) st.bind(2, ids[i]);
      if (st.step() != SQLITE_DONE) return db_error(db, "webhook retry");
      changed += static_cast<std::size_t>(sqlite3_changes(db));
    }
    return {};
  }));
  return changed;
}

Result<void> WebhookOutbox::put(const WebhookEvent& event,
                                const std::vector<std::string>& endpoints, const std::string&) {
  return enqueue(event, endpoints);  // serve.db is one node's: its rows need no tenant column
}

Result<std::vector<OutboxRow>> WebhookOutbox::take_due(const std::string& endpoint,
                                                       std::size_t limit) {
  return due(endpoint, unix_ms_now(), limit);
}

Result<std::optional<std::int64_t>> WebhookOutbox::wait_ms(const std::string& endpoint) {
  KERNEX_ASSIGN_OR_RETURN(auto next, next_due(endpoint));
  if (!next) return std::nullopt;
  return *next - unix_ms_now();
}

Result<void> WebhookOutbox::mark_delivered(const OutboxRow& row) {
  return delivered(row.id, unix_ms_now());
}

Result<bool> WebhookOutbox::mark_failed(const OutboxRow& row, std::int64_t backoff_ms,
                                        std::int64_t max_age_ms, const std::string& error) {
  const std::int64_t attempts = row.attempts + 1;
  const std::int64_t next = unix_ms_now() + backoff_ms;
  if (next - row.window_ms > max_age_ms) {
    KERNEX_RETURN_IF_ERROR(give_up(row.id, attempts, error));
    return true;
  }
  KERNEX_RETURN_IF_ERROR(retry_later(row.id, attempts, next, error));
  return false;
}

Result<void> WebhookOutbox::hurry_now(const std::string& endpoint) {
  return hurry(endpoint, unix_ms_now());
}

Result<std::size_t> WebhookOutbox::prune_older(std::chrono::milliseconds delivered_before) {
  return prune_delivered(unix_ms_now() - delivered_before.count());
}

Result<std::size_t> WebhookOutbox::retry_now(const std::vector<std::int64_t>& ids) {
  return retry(ids, unix_ms_now());
}

}  // namespace kernex::server
