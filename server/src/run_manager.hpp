// Sessions and runs: one active run per session, whatever the timing; a message to a busy
// session is rejected, queued or interrupts, as asked. Each active run is a thread calling
// Kernel::run (see the note in run_manager.cpp); its stream events become the run's events.
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
#include <string>
#include <vector>

#include "api_error.hpp"
#include "kernex/kernel.hpp"
#include "kernex/server/serve_config.hpp"
#include "kernex/skills/skill.hpp"
#include "run_state.hpp"
#include "run_store.hpp"

namespace kernex::server {

// What the manager tells the server about runs (metrics), from the runs' threads.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void first_token(std::chrono::duration<double> after_start) = 0;
  virtual void run_finished(const std::string& tenant, const std::string& model, const std::string& outcome, const Usage& usage, std::chrono::duration<double> took) = 0;
};

// Per-tenant admission (concurrent runs, tokens and cost per day).
class RunAdmission {
 public:
  virtual ~RunAdmission() = default;
  // An error (429 with Retry-After) when the tenant may not start another run now.
  virtual std::optional<ApiError> admit(const std::string& tenant) = 0;
  virtual void release(const std::string& tenant, std::uint64_t tokens, double cost_usd) = 0;
};

struct RunRequest {
  std::string tenant;
  std::string session;  // empty: a one-off run (OpenAI request without a session)
  std::string message;
  std::string sender;  // who wrote it; default: the session
  std::vector<std::string> skills;
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::string extra_system_prompt;
  std::optional<std::vector<ContextEntry>> history;  // one-off runs: the whole context
  std::string api_model;  // the OpenAI `model` the client asked for (metrics)

  Json to_json() const;
  static std::optional<RunRequest> from_json(const Json& j);
};

class RunManager {
 public:
  struct Deps {
    Kernel* kernel = nullptr;
    const ServeConfig* config = nullptr;
    std::vector<skills::Skill> skills;
    std::unique_ptr<RunStore> store;
    RunObserver* observer = nullptr;    // may be null
    RunAdmission* admission = nullptr;  // may be null: no limits
  };
  explicit RunManager(Deps deps);
  ~RunManager();

  // Starts (or queues) a run; the run is in the store before this returns.
  std::expected<std::shared_ptr<RunState>, ApiError> submit(RunRequest request, IfBusy if_busy);
  // A run of this tenant (live, or read back from the store); null when none.
  std::shared_ptr<RunState> find(const std::string& tenant, const std::string& run_id);
  std::expected<std::shared_ptr<RunState>, ApiError> cancel(const std::string& tenant, const std::string& run_id);
  std::expected<Json, ApiError> session_runs(const std::string& tenant, const std::string& session, std::size_t limit);
  std::expected<Json, ApiError> history(const std::string& tenant, const std::string& session, std::size_t limit,
                                        std::optional<std::int64_t> before);
  // Whether this tenant ever ran anything in `session` (and didn't forget it).
  bool session_exists(const std::string& tenant, const std::string& session);
  std::expected<void, ApiError> forget(const std::string& tenant, const std::string& session);

  // Runs what the last server acknowledged but never finished (kill -9, power loss).
  void resume_unfinished();
  // Drains: refuse new runs, wait up to `grace` for active ones, then cancel them and wait.
  // Queued runs stay queued in the store for the next start.
  void shutdown(std::chrono::milliseconds grace);
  // Drops finished runs from memory once the retention passed (the store keeps them).
  void evict_expired();

  std::size_t active_runs() const;
  std::size_t queued_runs() const;
  const ServeConfig& config() const { return *deps_.config; }
  Kernel& kernel() { return *deps_.kernel; }

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
  void cancel_queued(Pending& pending);  // mutex_ held
  ConversationKey conversation(const std::string& tenant, const std::string& session) const;
  std::expected<std::vector<std::string>, ApiError> session_conversations(MemoryStore& memory, const std::string& tenant,
                                                                          const std::string& session) const;
  std::filesystem::path workspace(const std::string& tenant, const std::string& session) const;

  Deps deps_;
  // Offers the loaded skills to runs that name none (activation by trigger or activate_skill);
  // made once, since a source holds a copy of every skill.
  std::shared_ptr<ContextSource> default_skills_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<std::string, Slot> slots_;  // sessions with an active or queued run only
  std::map<std::string, std::shared_ptr<RunState>> runs_;  // live and recently finished
  std::size_t threads_ = 0;
  std::size_t queued_ = 0;
  bool draining_ = false;
};

}  // namespace kernex::server
