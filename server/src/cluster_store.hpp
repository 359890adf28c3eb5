// Runs and their events in PostgreSQL, shared by every `kernex serve` node on one database. The
// table is the truth: a run is inserted before it is acknowledged; a node claims a queued run
// with FOR UPDATE SKIP LOCKED and holds it with a lease (the database's clock) that it renews; a
// partial unique index allows one running run per session across all nodes; every write of an
// executing node is fenced by (node, attempt), so a node that lost its claim writes nothing.
// Changes are announced with NOTIFY: kernex_serve_queue (a run may be claimable),
// kernex_serve_events (run id: new events) and kernex_serve_cancel (run id).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernex/json.hpp"
#include "kernex/pg/pool.hpp"
#include "kernex/pg/writer.hpp"
#include "cluster_hooks.hpp"
#include "kernex/server/serve_config.hpp"
#include "run_state.hpp"

namespace kernex::server {

struct SharedRun {
  std::string id, tenant, session, status, created_at, node;
  int attempt = 0;
  bool cancel_requested = false;
  Json request;
  Json result;
};

struct ClaimedRun {
  SharedRun run;
  std::vector<RunEvent> events;  // stored by earlier attempts (run_retry included)
};

// A claim this node still holds, as the last renewal saw it.
struct HeldClaim {
  std::string id;
  int attempt = 0;
  bool cancel_requested = false;
};

// Queues a run awaiting approval again once none of its approvals is pending (its row may be
// locked by the caller); true when it did.
Result<bool> requeue_if_decided(pg::Connection& c, const std::string& run_id);
// The same as one statement (for a write of the writer's batches): a row when it queued the run.
pg::Statement requeue_statement(const std::string& run_id);

class ClusterStore {
 public:
  inline static const char* kQueueChannel = "kernex_serve_queue";
  inline static const char* kEventsChannel = "kernex_serve_events";
  inline static const char* kCancelChannel = "kernex_serve_cancel";
  inline static const char* kApprovalsChannel = "kernex_serve_approvals";  // run id: decided

  // Connects and applies the schema under an advisory lock (nodes starting at once don't race).
  static Result<std::unique_ptr<ClusterStore>> open(const pg::Options& options,
                                                    std::size_t pool_size);

  // Cluster mode's webhooks and limits (cluster_hooks.hpp); set before the store is shared.
  void set_hooks(ClusterHooks hooks) { hooks_ = std::move(hooks); }

  enum class Admitted { Queued, Busy, Limited };
  // Inserts the run as queued unless its session is busy and `if_busy` is reject; interrupt
  // cancels the session's queued runs and asks its running one to stop. One transaction, under a
  // per-session advisory lock, so two nodes deciding for one session never both see it idle:
  // reject and enqueue without limits ride the writer's batches (returned once committed).
  // Limited: hooks.admit refused it (why in `refused`).
  Result<Admitted> submit(const SharedRun& run, IfBusy if_busy, LimitRefusal* refused = nullptr);
  // Claims the oldest claimable run: queued, and the first of its session with none running.
  Result<std::optional<ClaimedRun>> claim(const std::string& node, std::chrono::seconds lease);
  // Extends the claims of `node` on `ids` (the runs it executes); returns those it still holds. A
  // claim nothing runs (a failed end, say) is left to expire and be reaped.
  Result<std::vector<HeldClaim>> renew(const std::string& node, std::chrono::seconds lease,
                                       const std::vector<std::string>& ids);
  // Runs whose lease expired: queued again (retry) or failed, with a run_retry or error event.
  // Returns the ids it changed.
  Result<std::vector<std::string>> reap(const ClusterConfig& cluster);
  // Stores events (ids contiguous after what is stored) while the claim holds; false: it doesn't.
  Result<bool> append_events(const std::string& id, const std::string& node, int attempt,
                             const std::vector<RunEvent>& events);
  // The run's end: the remaining events, status and result, in one fenced transaction (one write
  // of the writer's batches, unless a run_end hook needs a transaction of its own).
  Result<bool> finish(const std::string& id, const std::string& node, int attempt, RunStatus status,
                      const Json& result, const std::vector<RunEvent>& events);

  // A run that stopped to wait for a person (approvals in cluster mode): its events stored, its
  // lease given up, and its status awaiting_approval (queued when every approval it asked is
  // decided by now, cancelled when it was cancelled meanwhile). Nothing: the claim is gone.
  Result<std::optional<RunStatus>> release(const std::string& id, const std::string& node,
                                           int attempt, const std::vector<RunEvent>& events);

  // Whether (node, attempt) still holds the run: checked before its exchange goes to memory.
  Result<bool> holds(const std::string& id, const std::string& node, int attempt);

  enum class CancelOutcome { NotFound, Finished, CancelledQueued, Requested };
  Result<CancelOutcome> cancel(const std::string& tenant, const std::string& id);
  // Cancels every queued run of the session and asks its running one to stop.
  Result<void> cancel_session(const std::string& tenant, const std::string& session);
  Result<bool> session_running(const std::string& tenant, const std::string& session);
  Result<bool> session_has_runs(const std::string& tenant, const std::string& session);
  Result<void> delete_session(const std::string& tenant, const std::string& session);

  Result<std::optional<SharedRun>> find(const std::string& tenant, const std::string& id);
  Result<std::vector<RunEvent>> events_after(const std::string& id, std::uint64_t after);
  // Newest first.
  Result<std::vector<SharedRun>> session_runs(const std::string& tenant, const std::string& session,
                                              std::size_t limit);
  Result<std::uint64_t> queued_count();

  const pg::Options& options() const { return pool_.options(); }
  // Journals and approvals (pg_run_stores.hpp) live in the same database.
  pg::Pool& pool() { return pool_; }
  // Group commit for the run path's writes (events, journals): concurrent runs share batches.
  pg::Writer& writer() { return writer_; }
  // The database's clock in unix seconds, as SQL.
  inline static const char* kEpochNow = "floor(extract(epoch from clock_timestamp()))::bigint";

 private:
  Result<Admitted> submit_batched(const SharedRun& run, IfBusy if_busy);
  Result<bool> finish_batched(const std::string& id, const std::string& node, int attempt,
                              RunStatus status, const Json& result,
                              const std::vector<RunEvent>& events);
  Result<bool> finish_alone(const std::string& id, const std::string& node, int attempt,
                            RunStatus status, const Json& result,
                            const std::vector<RunEvent>& events);
  ClusterStore(const pg::Options& options, std::size_t pool_size)
      : pool_(options, pool_size), control_(options, 1), writer_(pool_) {}
  pg::Pool pool_;
  // Renewals and reaping have their own connection: runs busy with the main pool must never
  // delay the renewal that keeps their claims.
  pg::Pool control_;
  pg::Writer writer_;  // after pool_ (it leases from it when KERNEX_GROUP_COMMIT=off)
  ClusterHooks hooks_;
};

}  // namespace kernex::server
