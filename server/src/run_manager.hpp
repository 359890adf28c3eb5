// Sessions and runs of one process: one active run per session, whatever the timing; a message to
// a busy session is rejected, queued or interrupts, as asked. Each active run is a task on the
// run pool (run_pool.hpp) calling Kernel::run; its stream events become the run's events.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernex/kernel.hpp"
#include "kernex/server/serve_config.hpp"
#include "approvals.hpp"
#include "kernex/skills/skill.hpp"
#include "run_executor.hpp"
#include "run_journal_store.hpp"
#include "run_pool.hpp"
#include "run_state.hpp"
#include "run_store.hpp"
#include "runs.hpp"
#include "webhook_sender.hpp"

namespace kernex::server {

class RunManager final : public Runs {
 public:
  struct Deps {
    Kernel* kernel = nullptr;
    const ServeConfig* config = nullptr;
    std::vector<skills::Skill> skills;
    std::unique_ptr<RunStore> store;
    RunObserver* observer = nullptr;    // may be null
    RunAdmission* admission = nullptr;  // may be null: no limits
    // Outbound events beside the run ends its store sends (approvals: Webhooks::publish); null
    // without serve.webhooks.
    Webhooks* webhooks = nullptr;
    // Both or neither: runs pause for approvals and resume after kill -9 where they were.
    std::unique_ptr<JournalStore> journals;
    std::unique_ptr<Approvals> approvals;
  };
  explicit RunManager(Deps deps);
  ~RunManager() override;

#include "runs_overrides.inc"
  const ServeConfig& config() const override { return *deps_.config; }
  Kernel& kernel() override { return *deps_.kernel; }
  Approvals* approvals() override { return deps_.approvals.get(); }

 private:
  // A new run's row on its way to serve.db: submit() queues it and returns (an HTTP thread never
  // waits on a commit, nor holds mutex_ through one); the run's task is handed to the pool once
  // the row is committed, so nothing of the run (its run_start first) reaches anyone before its
  // row is on disk, as when submit() waited for it.
  class Recording {
   public:
    // The writer's thread, after the run's RunState::settle_record (which says how it went):
    // takes no lock of ours.
    void settle();
    // Calls `start` once settled: now if it is, else from settle().
    void then(std::function<void()> start);

   private:
    mutable std::mutex mutex_;
    bool settled_ = false;
    std::function<void()> start_;
  };
  struct Pending {
    std::shared_ptr<RunState> run;
    RunRequest request;
    std::shared_ptr<Recording> recording;  // null: the row was stored before (a resumed run)
  };
  struct Slot {
    std::shared_ptr<RunState> active;
    std::deque<Pending> queue;
  };
  static std::string slot_key(const std::string& tenant, const std::string& session);
  void launch(Pending pending);  // mutex_ held
  void execute(const Pending& pending);
  void finished(const std::shared_ptr<RunState>& run);
  void release_session(const std::shared_ptr<RunState>& run);  // starts the session's next run
  void release_session_locked(const std::shared_ptr<RunState>& run);  // mutex_ held
  void cancel_queued(Pending& pending);                               // mutex_ held
  // The run's row could not be stored: it ends failed, never started (store_failed).
  void end_unrecorded(const Pending& pending);
  // The pool's task for a launched run: runs it unless it was cancelled before a thread took it.
  void run_task(const Pending& pending);
  // A run suspended for an approval: parked, holding no thread, until the decision, its expiry
  // or a cancel submits it again. False when the server is stopping (the next start resumes it).
  bool park(const Pending& pending);
  void unpark(const std::string& run_id);          // the approval was decided
  bool end_unstarted_locked(const RunState& run);  // ended a run awaiting a thread; mutex_ held
  void end_parked(Pending& pending);               // cancelled while parked; mutex_ held
  void expire_parked(std::stop_token stop);        // submits parked runs whose approval expired

  Deps deps_;
  RunEnv env_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::unordered_map<std::string, Slot> slots_;  // sessions with an active or queued run only
  // Sessions a DELETE is forgetting: a run submitted meanwhile would outlive the forget.
  std::set<std::string> forgetting_;
  std::unordered_map<std::string, std::shared_ptr<RunState>> runs_;  // live and recently finished
  // Runs in the order they ended (or their session was released): evict_expired() takes the
  // expired ones from the front instead of scanning every run of event_retention under mutex_.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> ended_;
  // Finished runs read back from serve.db while someone follows them: one copy of the result
  // (and of big events' renderings) however many follow.
  std::map<std::string, std::weak_ptr<RunState>> restored_;
  struct Parked {
    Pending pending;
    std::int64_t expires_at = 0;  // its approval's, seconds since the epoch
  };
  std::map<std::string, Parked> parked_;
  std::set<std::string> cancels_;  // executing runs a cancel reached (a park must not drop it)
  std::condition_variable_any parked_changed_;
  std::size_t parks_ = 0;  // runs parked so far (wakes expire_parked)
  // Launched runs no pool thread has taken yet: a cancel ends them at once.
  std::unordered_map<std::string, Pending> unstarted_;
  std::size_t threads_ = 0;  // launched runs whose task has not returned
  std::size_t queued_ = 0;
  bool draining_ = false;
  std::size_t launched_ = 0;  // executions (a parked run's resumption counts again)
  const bool thread_per_run_;
  // Each run on its own fiber (run_fiber.hpp): waiting on its model it holds no pool thread.
  // KERNEX_SERVE_NO_FIBERS (bench/serve's baseline only): a run holds its thread throughout.
  const bool fibers_;
  std::jthread expiry_;  // stopped by shutdown(), before the pool goes
  RunPool pool_;         // last: its threads are gone before anything they use
};

}  // namespace kernex::server
