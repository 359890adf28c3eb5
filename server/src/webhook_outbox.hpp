// The webhook outbox in serve.db: one row per (event, endpoint), written where the event becomes
// durable (a run's end, in the same transaction), so an event is never lost between the store and
// the network. Rows go pending -> delivered, or -> failed once their endpoint's max age passed;
// `kernex serve webhooks retry` makes failed rows pending again with a fresh age.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "serve_writer.hpp"

struct sqlite3;

namespace kernex::server {

// An event as sent: its body is fixed when made, so every attempt sends the same bytes.
struct WebhookEvent {
  std::string id;      // X-Kernex-Event-Id, shared by the rows of every endpoint
  std::string type;    // run.completed, run.failed, approval.requested, approval.resolved
  std::string stream;  // events of one stream (a run) reach an endpoint in the order made
  std::string body;    // {"type", "id", "created_at", "data"}
};
// A new event with a fresh id; `stream` is data.run_id when there is one, else the event's id.
WebhookEvent make_webhook_event(const std::string& type, const Json& data);

struct OutboxRow {
  std::int64_t id = 0;
  std::string event_id, endpoint, stream, type, body, status, last_error;
  std::int64_t attempts = 0;
  std::int64_t created_ms = 0;  // when the event was made (unix ms)
  std::int64_t window_ms = 0;   // the age counts from here: created, or the last manual retry
  std::int64_t next_ms = 0;     // next attempt (pending rows)
  std::int64_t delivered_ms = 0;
};

std::int64_t unix_ms_now();
// "2026-01-31T12:00:00Z"; "" for 0.
std::string iso_utc(std::int64_t unix_ms);

// Where the outbox rows live, as the sender sees them: serve.db on one node (WebhookOutbox), or
// PostgreSQL shared by every node (ClusterOutbox: rows claimed with a lease, so one node sends
// each). Times are the store's own clock: the sender only says "after this long".
class OutboxStore {
 public:
  virtual ~OutboxStore() = default;
  // One pending row per endpoint, all or none; `tenant` owns them.
  virtual Result<void> put(const WebhookEvent& event, const std::vector<std::string>& endpoints,
                           const std::string& tenant) = 0;
  // Rows of `endpoint` this sender may send now: due, heads of their streams, oldest first (and
  // held by this sender for a while where several send).
  virtual Result<std::vector<OutboxRow>> take_due(const std::string& endpoint,
                                                  std::size_t limit) = 0;
  // Milliseconds until the endpoint's next row is due (<= 0: now); nullopt: none pending.
  virtual Result<std::optional<std::int64_t>> wait_ms(const std::string& endpoint) = 0;
  virtual Result<void> mark_delivered(const OutboxRow& row) = 0;
  // A failed attempt: due again after `backoff_ms`, or failed for good once that would pass the
  // max age counted from the row's window. True when it gave up.
  virtual Result<bool> mark_failed(const OutboxRow& row, std::int64_t backoff_ms,
                                   std::int64_t max_age_ms, const std::string& error) = 0;
  // The endpoint answered again: its waiting rows are due now.
  virtual Result<void> hurry_now(const std::string& endpoint) = 0;
  virtual Result<std::size_t> prune_older(std::chrono::milliseconds delivered_before) = 0;
  // Newest first.
  virtual Result<std::vector<OutboxRow>> list(bool failed_only, std::size_t limit) = 0;
  // Failed rows (`ids`, or all when empty) become pending, due now, with a fresh max age.
  virtual Result<std::size_t> retry_now(const std::vector<std::int64_t>& ids) = 0;
};

class WebhookOutbox final : public OutboxStore {
 public:
  // Opens (and makes, if missing) the outbox table of serve.db on a connection of its own.
  static Result<std::unique_ptr<WebhookOutbox>> open(const std::filesystem::path& serve_db);
  ~WebhookOutbox();

  // One pending row per endpoint, written on `db` (inside the caller's transaction, if any).
  static Result<void> enqueue(sqlite3* db, const WebhookEvent& event,
                              const std::vector<std::string>& endpoints, std::int64_t now_ms);
  Result<void> enqueue(const WebhookEvent& event, const std::vector<std::string>& endpoints);

  // Pending rows of `endpoint` due by `now_ms` whose stream has no earlier pending row, oldest
  // first: what may be sent now without overtaking an earlier event of the same run.
  Result<std::vector<OutboxRow>> due(const std::string& endpoint, std::int64_t now_ms,
                                     std::size_t limit);
  // The earliest next attempt of the endpoint's pending rows that head their streams.
  Result<std::optional<std::int64_t>> next_due(const std::string& endpoint);
  Result<void> delivered(std::int64_t id, std::int64_t now_ms);
  Result<void> retry_later(std::int64_t id, std::int64_t attempts, std::int64_t next_ms,
                           const std::string& error);
  Result<void> give_up(std::int64_t id, std::int64_t attempts, const std::string& error);
  // The endpoint answered again: its waiting rows are due now instead of after their backoff.
  Result<void> hurry(const std::string& endpoint, std::int64_t now_ms);

  // Forgets deliveries that succeeded before `before_ms` (the outbox would grow forever).
  Result<std::size_t> prune_delivered(std::int64_t before_ms);
  // Failed rows (`ids`, or all when empty) become pending, due now, with a fresh max age.
  Result<std::size_t> retry(const std::vector<std::int64_t>& ids, std::int64_t now_ms);

  // OutboxStore, on this process's clock (one sender: nothing to claim).
#include "outbox_store_overrides.inc"

 private:
  explicit WebhookOutbox(sqlite3* db) : db_(db) {}
  Result<void> update(const char* sql, std::int64_t id, std::int64_t a, const std::string& text);
  std::mutex mutex_;  // db_: the reads' connection
  sqlite3* db_;
  std::shared_ptr<ServeWriter> writer_;  // every write: serve.db's batches
};

}  // namespace kernex::server
