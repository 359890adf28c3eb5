// Running one acknowledged request through the kernel, and the session data runs leave behind
// (memory conversations, workspace). Shared by the single-process RunManager and ClusterRuns, so
// a run does the same thing whichever node executes it.
#pragma once

#include <chrono>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernex/skills/skill.hpp"
#include "kernex/utc_time.hpp"
#include "runs.hpp"

namespace kernex::server {

// Workspace directories runs already made or found: checked once per session (per workspace), not
// once per run; a run that fails forgets its workspace, so the next run checks it again.
class KnownWorkspaces {
 public:
  bool known(const std::filesystem::path& dir) const {
    std::lock_guard lock(mutex_);
    return dirs_.contains(dir);
  }
  void remember(const std::filesystem::path& dir) {
    std::lock_guard lock(mutex_);
    dirs_.insert(dir);
  }
  void forget(const std::filesystem::path& dir) {
    std::lock_guard lock(mutex_);
    dirs_.erase(dir);
  }

 private:
  mutable std::mutex mutex_;
  std::set<std::filesystem::path> dirs_;
};

struct RunEnv {
  Kernel* kernel = nullptr;
  const ServeConfig* config = nullptr;
  const std::vector<skills::Skill>* skills = nullptr;
  // Offers the loaded skills to runs that name none (activation by trigger or activate_skill);
  // made once, since a source holds a copy of every skill.
  std::shared_ptr<ContextSource> default_skills;
  RunObserver* observer = nullptr;  // may be null
  // Sets the run's approver and journal (single node: approvals.hpp, run_journal_store.hpp);
  // unset, a call that needs approval is denied "needs approval".
  std::function<void(RunState&, RunOptions&)> attach_approvals;
  // Whether the run stopped only to be resumed at the next start (it keeps its workspace).
  std::function<bool(const std::string& run_id)> suspended;
  std::shared_ptr<KnownWorkspaces> workspaces = std::make_shared<KnownWorkspaces>();
};
RunEnv make_run_env(Kernel* kernel, const ServeConfig* config,
                    const std::vector<skills::Skill>* skills, RunObserver* observer);

// How a run ended: its status, its last event (run_end or error) and what it used.
struct RunEnd {
  RunStatus status = RunStatus::Done;
  std::string event = "run_end";
  Json body;
  Usage usage;
  std::string model;
  std::string outcome;
};

// Marks the run running, emits run_start, runs the kernel with the run's stop token, and returns
// how it ended. Does not finish the RunState: the caller stores the end first.
// `before_save`, when set, may veto saving the exchange to memory (RunOptions::before_save).
RunEnd execute_run(const RunEnv& env, RunState& run, const RunRequest& request,
                   std::function<Result<void>()> before_save = {});

// The run_end body of a run cancelled before it started.
Json cancelled_result(const std::string& run_id, const std::string& session);
// A requested skill that is not loaded; when it was refused at load, the error says why.
std::optional<ApiError> unknown_skill(const std::vector<skills::Skill>& loaded,
                                      const RunRequest& request, const ServeConfig& config);
// Times as the API shows them: kernex::utc_now() and utc_time(), "YYYY-MM-DD HH:MM:SS" (UTC).

// Where a session's workspace is: workspaces_root/<tenant>/<session_dir_name>. Its runs'
// trajectories are in its tenant's day segments (session_trajectories.hpp).
std::filesystem::path session_workspace(const ServeConfig& config, const std::string& tenant,
                                        const std::string& session);
std::expected<Json, ApiError> session_history(Kernel& kernel, const std::string& tenant,
                                              const std::string& session, std::size_t limit,
                                              std::optional<std::int64_t> before);
// Deletes what the session left outside serve.db: its memory conversations, the contents of its
// workspace, its overlay layers and its trajectories.
std::expected<void, ApiError> forget_session_data(Kernel& kernel, const ServeConfig& config,
                                                  const std::string& tenant,
                                                  const std::string& session);

}  // namespace kernex::server
