// Runs shared by several `kernex serve` nodes through PostgreSQL (ClusterStore). Any node accepts
// a request and stores it as queued; every node's dispatcher claims claimable runs up to its
// max_runs and executes them like RunManager does (run_executor); a heartbeat renews the node's
// leases and re-queues (or fails) the runs of nodes that stopped renewing theirs; a listener
// (LISTEN/NOTIFY) wakes the dispatcher, stops runs cancelled from another node, and feeds the
// runs this node's clients follow but another node executes. A node that cannot renew its lease
// stops its runs before the lease ends, so no run ever executes on two nodes at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "approvals.hpp"
#include "cluster_store.hpp"
#include "pg_run_stores.hpp"
#include "run_executor.hpp"
#include "run_pool.hpp"
#include "runs.hpp"

namespace kernex::server {

class ClusterRuns final : public Runs {
 public:
  struct Deps {
    Kernel* kernel = nullptr;
    const ServeConfig* config = nullptr;
    std::vector<skills::Skill> skills;
    std::unique_ptr<ClusterStore> store;
    RunObserver* observer = nullptr;    // may be null
    RunAdmission* admission = nullptr;  // may be null; ClusterLimits counts in the database
  };
  explicit ClusterRuns(Deps deps);
  ~ClusterRuns() override;

  const std::string& node() const { return node_; }

#include "runs_overrides.inc"
  Approvals* approvals() override { return approvals_.get(); }
  const ServeConfig& config() const override { return *deps_.config; }
  Kernel& kernel() override { return *deps_.kernel; }

 private:
  // A run this node executes or whose events its clients follow.
  struct Tracked {
    std::shared_ptr<RunState> state;
    std::mutex sync;  // one refresh from the store at a time
    std::atomic<bool> executing =
        false;  // by this node: events come from the run's thread, not the store
    std::atomic<int> attempt = 0;
    // When this node claimed it: a renewal asked before then cannot have seen the claim.
    std::atomic<std::chrono::steady_clock::rep> claimed_at = 0;
    std::uint64_t flushed = 0;        // events stored so far (executing only)
    std::atomic<bool> armed = false;  // flush_soon's waker is registered
  };

  std::shared_ptr<Tracked> track(const SharedRun& row, std::vector<RunEvent> events);
  void adopt_before_end(RunState& state);  // mutex_ held
  void refresh(
      Tracked& tracked);  // a followed run: new events, status and placement from the store
  void refresh_all();
  void kick();

  void dispatch_loop(std::stop_token stop);
  void listen_loop(std::stop_token stop);
  void heartbeat_loop(std::stop_token stop);
  void flush_loop(std::stop_token stop);
  void launch(ClaimedRun claimed);
  void execute(const std::shared_ptr<Tracked>& tracked, const RunRequest& request);
  void end(Tracked& tracked, const RunEnd& result);
  // A run suspended for an approval: stored as awaiting_approval without a lease, followed here
  // like another node's run until a node claims it again.
  void park(Tracked& tracked);
  void attach(RunState& run, RunOptions& options);
  bool flush(Tracked& tracked);  // false: the store failed (tried again later)
  void flush_soon(
      const std::shared_ptr<Tracked>& tracked);  // wakes flush_loop at the run's next event
  void stop_local(const std::string& id);
  std::vector<std::shared_ptr<Tracked>> executing() const;

  Deps deps_;
  RunEnv env_;
  const std::string node_;
  std::unique_ptr<PgJournalStore> journals_;
  std::unique_ptr<Approvals> approvals_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<Tracked>> runs_;
  std::map<std::string, RunState::BeforeEnd> before_end_;  // taken here, not yet tracked
  std::size_t threads_ = 0;                                // executing runs
  bool kicked_ = false;
  bool flush_due_ = false;  // a running run has events to store (flush_loop waits on changed_)
  bool draining_ = false;
  std::mutex shutdown_mutex_;
  std::jthread dispatcher_;  // stopped first when draining: no claim after that
  std::vector<std::jthread> loops_;
  RunPool pool_;  // last: shutdown() has waited for its tasks; its threads go before the rest
};

}  // namespace kernex::server
