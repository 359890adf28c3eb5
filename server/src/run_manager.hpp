// Sessions and runs of one process: one active run per session, whatever the timing; a message to
// a busy session is rejected, queued or interrupts, as asked. Each active run is a thread calling
// Kernel::run (see the note in run_executor.cpp); its stream events become the run's events.
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
#include <vector>

#include "kernex/kernel.hpp"
#include "kernex/server/serve_config.hpp"
#include "approvals.hpp"
#include "kernex/skills/skill.hpp"
#include "run_executor.hpp"
#include "run_journal_store.hpp"
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

  std::expected<std::shared_ptr<RunState>, ApiError> submit(RunRequest request,
                                                            IfBusy if_busy) override;
  std::shared_ptr<RunState> find(const std::string& tenant, const std::string& run_id) override;
  std::expected<std::shared_ptr<RunState>, ApiError> cancel(const std::string& tenant,
                                                            const std::string& run_id) override;
  std::expected<Json, ApiError> session_runs(const std::string& tenant, const std::string& session,
                                             std::size_t limit) override;
  std::expected<Json, ApiError> history(const std::string& tenant, const std::string& session,
                                        std::size_t limit,
                                        std::optional<std::int64_t> before) override;
  bool session_exists(const std::string& tenant, const std::string& session) override;
  std::expected<void, ApiError> forget(const std::string& tenant,
                                       const std::string& session) override;
  // Runs what the last server acknowledged but never finished; queued runs stay queued in the
  // store over a shutdown, for the next start.
  void resume_unfinished() override;
  void shutdown(std::chrono::milliseconds grace) override;
  void evict_expired() override;
  std::size_t active_runs() const override;
  std::size_t queued_runs() const override;
  const ServeConfig& config() const override { return *deps_.config; }
  Kernel& kernel() override { return *deps_.kernel; }
  Approvals* approvals() override { return deps_.approvals.get(); }

 private:
  struct Pending {
    std::shared_ptr<RunState> run;
    RunRequest request;
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
  void cancel_queued(Pending& pending);                        // mutex_ held

  Deps deps_;
  RunEnv env_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<std::string, Slot> slots_;  // sessions with an active or queued run only
  // Sessions a DELETE is forgetting: a run submitted meanwhile would outlive the forget.
  std::set<std::string> forgetting_;
  std::map<std::string, std::shared_ptr<RunState>> runs_;  // live and recently finished
  // Finished runs read back from serve.db while someone follows them: one copy of the result
  // (and of big events' renderings) however many follow.
  std::map<std::string, std::weak_ptr<RunState>> restored_;
  std::size_t threads_ = 0;
  std::size_t queued_ = 0;
  bool draining_ = false;
};

}  // namespace kernex::server
