// Approvals in `kernex serve`: the Approver of every run (RunOptions::approver) and what the API
// does with them. A call that needs a person is stored as pending, and the run as
// awaiting_approval, before the `approval_requested` event goes out; the run's thread then waits
// for a decision (POST /v1/approvals/{id}), its stop token (cancel: deny) or the expiry (deny).
// After kill -9 the resumed run asks again under the same key and finds the stored approval.
#pragma once

#include <chrono>
#include <condition_variable>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "api_error.hpp"
#include "approval_store.hpp"
#include "kernex/approval.hpp"
#include "run_state.hpp"

namespace kernex::server {

class Approvals {
 public:
  Approvals(std::unique_ptr<ApprovalStore> store, std::chrono::seconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  // Outbound events (webhooks' approval.requested / approval.resolved); set before runs start.
  using Publish =
      std::function<void(const std::string& type, const std::string& tenant, const Json& data)>;
  void on_event(Publish publish) { publish_ = std::move(publish); }

  // Stores the run's status (serve.db and the RunState) when it pauses and goes on.
  using SetStatus = std::function<void(RunStatus)>;
  // The approver of `run`, which outlives the run's Kernel::run call.
  Approver approver(RunState& run, SetStatus set_status);

  // Resolves approval `id` of `tenant`: 404 unknown or another tenant's, 409 resolved or
  // expired. The resolved approval.
  std::expected<Json, ApiError> decide(const std::string& tenant, const std::string& id,
                                       const ApprovalDecision& decision);
  // {"approvals": [...]} pending in the tenant's session.
  std::expected<Json, ApiError> pending(const std::string& tenant, const std::string& session);
  Result<void> forget_session(const std::string& tenant, const std::string& session);

  // Cluster mode: a run does not wait for a person. Once its approval is stored and announced it
  // is suspended (its stop token fires, nothing is saved) and its node stores it as
  // awaiting_approval without a lease (ClusterStore::release); the decision queues it again and
  // the node that claims it resumes it from its journal, finding the decision under the same key.
  // Calls inside REPL code or a sub-run (keys with '/' or ':') wait in the run's thread instead,
  // since their tool's code cannot stop and go on later; a decision on another node reaches them
  // through changed() (ClusterRuns hears it with LISTEN).
  void release_while_waiting() { release_ = true; }
  // An approval may have been resolved elsewhere: waiting runs look again.
  void changed();
  // One node: told the run of each approval a person decided (or that decide() found expired),
  // after it is stored, so a run parked for it is submitted again (RunManager). Set before runs
  // start.
  void on_decided(std::function<void(const std::string& run_id)> decided) {
    decided_ = std::move(decided);
  }
  // When the run's oldest pending approval expires (seconds since the epoch); none: nothing
  // pending, so a run parked for one has its decision already and can go on.
  Result<std::optional<std::int64_t>> waiting(const RunState& run);
  // Denies the run's pending approvals, "the run was cancelled" (a parked run has no thread to
  // do it when the cancel comes), announcing each.
  void cancel_waiting(RunState& run);
  // A run starts (again) on this node: not suspended, whatever an earlier attempt was.
  void resume(const std::string& run_id);

  // A server going down (SIGTERM) leaves waiting runs for the next start: from now on a wait
  // ended by the run's stop token denies without storing anything, and marks the run suspended.
  void stop_waiting();
  // Whether the run stopped waiting because the server is going down: its end is not stored,
  // nor its exchange saved, so the next start resumes it.
  bool suspended(const std::string& run_id);

 private:
  ApprovalDecision ask(RunState& run, const SetStatus& set_status, const ApprovalRequest& request,
                       std::stop_token stop);
  // The stored approval of this call, created when there is none and no session grant holds
  // (then `granted` is set and nothing is stored).
  Result<StoredApproval> find_or_create(RunState& run, const ApprovalRequest& request,
                                        bool& granted);
  ApprovalDecision wait(const StoredApproval& approval, std::stop_token stop);
  std::expected<Json, ApiError> resolve_by_person(const std::string& tenant, const std::string& id,
                                                  const ApprovalDecision& decision,
                                                  std::string& run_id);
  bool suspend(const std::string& run_id);  // true (and marked) when the server is stopping
  // Resolves as the server (cancel, expiry); what was decided when someone else won.
  StoredApproval settle(StoredApproval approval, std::string status, std::string reason);

  void announce(RunState& run, const std::string& type, const std::string& event, Json data);

  std::unique_ptr<ApprovalStore> store_;
  std::chrono::seconds timeout_;
  Publish publish_;
  std::function<void(const std::string& run_id)> decided_;
  std::mutex mutex_;                     // held while resolving and while checking for a decision
  std::condition_variable_any changed_;  // an approval was resolved
  bool stopping_ = false;
  bool release_ = false;
  std::set<std::string> suspended_;
};

}  // namespace kernex::server
