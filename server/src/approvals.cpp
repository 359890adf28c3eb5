#include "approvals.hpp"

#include "kernex/log.hpp"
#include "kernex/suspend.hpp"
#include "random_id.hpp"
#include "run_executor.hpp"

namespace kernex::server {
namespace {

// What the run goes on with, from a resolved approval.
ApprovalDecision decision_of(const StoredApproval& a) {
  if (a.status != "approved") {
    return ApprovalDecision::deny(a.decision_reason.empty() ? "denied by a person"
                                                            : a.decision_reason);
  }
  ApprovalDecision d{parse_approval_verdict(a.decision).value_or(ApprovalVerdict::Approve),
                     a.edited_arguments, a.decision_reason};
  if (d.verdict == ApprovalVerdict::Deny) d.verdict = ApprovalVerdict::Approve;
  return d;
}

Json requested_event(const RunState& run, const StoredApproval& a) {
  return {{"run_id", run.id},
          {"approval_id", a.id},
          {"session_id", run.session},
          {"tool", a.tool},
          {"arguments", a.arguments},
          {"reason", a.reason},
          {"expires_at", utc_time(a.expires_at)}};
}

Json resolved_event(const RunState& run, const StoredApproval& a) {
  Json j{{"run_id", run.id}, {"approval_id", a.id}, {"session_id", run.session},
         {"tool", a.tool},   {"status", a.status},  {"decision", a.decision}};
  if (a.edited_arguments) j["arguments"] = *a.edited_arguments;
  if (!a.decision_reason.empty()) j["reason"] = a.decision_reason;
  return j;
}

}  // namespace

Approver Approvals::approver(RunState& run, SetStatus set_status) {
  return [this, &run, set_status = std::move(set_status)](const ApprovalRequest& request,
                                                          std::stop_token stop) {
    return ask(run, set_status, request, std::move(stop));
  };
}

Result<StoredApproval> Approvals::find_or_create(RunState& run, const ApprovalRequest& request,
                                                 bool& granted) {
  // The key is the call's place in the run, the same when a run resumes; without one (no
  // journal) every ask is a new approval.
  const std::string key = request.key.empty() ? random_id("call") : request.key;
  KERNEX_ASSIGN_OR_RETURN(auto found, store_->by_key(run.tenant, run.id, key));
  if (found) {
    // A resumed run asks again for the very call it asked about; anything else under that key
    // must never inherit its decision. A decision stored for the call wins over a session
    // grant: it may carry the person's edited arguments.
    if (found->tool != request.call.name || found->arguments != request.call.arguments)
      return fail(ErrorCode::Internal, "approval key " + key + " was stored for another call");
    return *found;
  }
  if (!run.session.empty()) {
    auto grant = store_->granted(run.tenant, run.session, request.call.name);
    if (grant && *grant) {
      granted = true;
      return StoredApproval{};
    }
  }
  StoredApproval a;
  a.id = random_id("apr");
  a.tenant = run.tenant;
  a.session = run.session;
  a.run_id = run.id;
  a.key = key;
  a.tool = request.call.name;
  a.arguments = request.call.arguments;
  a.reason = request.reason;
  KERNEX_ASSIGN_OR_RETURN(a.created_at, store_->now());
  a.expires_at = a.created_at + timeout_.count();
  return store_->insert(a);
}

ApprovalDecision Approvals::ask(RunState& run, const SetStatus& set_status,
                                const ApprovalRequest& request, std::stop_token stop) {
  bool granted = false;
  auto approval = find_or_create(run, request, granted);
  if (!approval) {
    log(LogLevel::Error, "serve: approval not stored: " + approval.error().describe());
    return ApprovalDecision::deny("the approval could not be stored");
  }
  if (granted) return ApprovalDecision::approve();  // "always" for this session
  if (approval->status != "pending") {              // decided before a restart
    announce(run, "approval.resolved", "approval_resolved", resolved_event(run, *approval));
    set_status(RunStatus::Running);
    return decision_of(*approval);
  }
  // Expired while its run was parked (or the server down): denied now, nobody waits for it.
  if (auto now = store_->now(); now && *now >= approval->expires_at && !request.key.empty()) {
    const StoredApproval expired = settle(*approval, "expired", "approval expired");
    announce(run, "approval.resolved", "approval_resolved", resolved_event(run, expired));
    set_status(RunStatus::Running);
    return decision_of(expired);
  }
  // Stored (approval, then the run's status) before anyone hears of it.
  set_status(RunStatus::AwaitingApproval);
  announce(run, "approval.requested", "approval_requested", requested_event(run, *approval));
  const bool nested = request.key.find_first_of("/:") != std::string::npos;
  if (release_ && !nested && !request.key.empty()) {
    {
      std::lock_guard lock(mutex_);
      suspended_.insert(run.id);
    }
    run.mute();  // the put-off call's denial is not its result: the resumed attempt gives that
    run.request_cancel();  // the loop stops here; the node stores the run as awaiting_approval
    return ApprovalDecision::deny("the run waits for a person; it resumes on their decision");
  }
  StoredApproval resolved = *approval;
  const ApprovalDecision decision = wait(*approval, stop);
  if (suspended(run.id)) {  // still pending, the run awaiting_approval
    run.mute();
    return decision;
  }
  if (auto row = store_->by_id(run.tenant, approval->id); row && *row) resolved = **row;
  announce(run, "approval.resolved", "approval_resolved", resolved_event(run, resolved));
  set_status(RunStatus::Running);
  return decision;
}

// The run's stream event, and the webhook event (stored in the outbox first, so the receiver
// hears of it whatever happens next). A resumed run announces again: receivers key on
// approval_id.
void Approvals::announce(RunState& run, const std::string& type, const std::string& event,
                         Json data) {
  if (publish_) publish_(type, run.tenant, data);
  run.append(event, std::move(data));
}

ApprovalDecision Approvals::wait(const StoredApproval& approval, std::stop_token stop) {
  const auto deadline =
      std::chrono::system_clock::time_point(std::chrono::seconds(approval.expires_at));
  std::optional<StoredApproval> done;
  {
    const BlockingScope waiting;  // a person's decision, on this thread (park: false)
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, stop, deadline, [&] {
      auto row = store_->by_id(approval.tenant, approval.id);
      if (row && *row && (*row)->status != "pending") done = **row;
      return done.has_value();
    });
  }
  if (done) return decision_of(*done);
  if (stop.stop_requested() && suspend(approval.run_id))
    return ApprovalDecision::deny("the server is stopping; the approval stays pending");
  if (stop.stop_requested())
    return decision_of(settle(approval, "denied", "the run was cancelled"));
  return decision_of(settle(approval, "expired", "approval expired"));
}

StoredApproval Approvals::settle(StoredApproval approval, std::string status, std::string reason) {
  std::lock_guard lock(mutex_);
  approval.status = std::move(status);
  approval.decision = "deny";
  approval.decision_reason = std::move(reason);
  approval.resolved_at = store_->now().value_or(0);
  auto won = store_->resolve(approval);
  if (!won) log(LogLevel::Error, "serve: " + won.error().describe());
  if (won && !*won) {
    if (auto row = store_->by_id(approval.tenant, approval.id); row && *row) return **row;
  }
  changed_.notify_all();
  return approval;
}

std::expected<Json, ApiError> Approvals::decide(const std::string& tenant, const std::string& id,
                                                const ApprovalDecision& decision) {
  std::string run_id;
  auto decided = resolve_by_person(tenant, id, decision, run_id);
  // Outside the lock: the hook submits the run, which may ask for approvals again at once.
  if (!run_id.empty() && decided_) decided_(run_id);
  return decided;
}

std::expected<Json, ApiError> Approvals::resolve_by_person(const std::string& tenant,
                                                           const std::string& id,
                                                           const ApprovalDecision& decision,
                                                           std::string& run_id) {
  std::lock_guard lock(mutex_);
  auto row = store_->by_id(tenant, id);
  if (!row) return std::unexpected(api_error(500, "store_failed", row.error().describe()));
  if (!*row || (*row)->tenant != tenant)
    return std::unexpected(api_error(404, "not_found", "no approval '" + id + "'"));
  StoredApproval a = **row;
  auto now = store_->now();
  if (!now) return std::unexpected(api_error(500, "store_failed", now.error().describe()));
  if (a.status == "pending" && *now >= a.expires_at) {
    // The waiting run will find it expired too; a server that was down resolves it here.
    a.status = "expired";
    a.decision = "deny";
    a.decision_reason = "approval expired";
    a.resolved_at = *now;
    (void)store_->resolve(a);
    changed_.notify_all();
    run_id = a.run_id;
  }
  if (a.status != "pending") {
    return std::unexpected(
        api_error(409, "already_resolved", "approval '" + id + "' is already " + a.status));
  }
  a.status = decision.approved() ? "approved" : "denied";
  a.decision = std::string(to_string(decision.verdict));
  a.edited_arguments = decision.arguments;
  a.decision_reason = decision.reason;
  a.resolved_at = *now;
  if (decision.verdict == ApprovalVerdict::Always && !a.session.empty()) {
    if (auto r = store_->grant(a.tenant, a.session, a.tool); !r)
      return std::unexpected(api_error(500, "store_failed", r.error().describe()));
  }
  auto won = store_->resolve(a);
  if (!won) return std::unexpected(api_error(500, "store_failed", won.error().describe()));
  if (!*won)
    return std::unexpected(
        api_error(409, "already_resolved", "approval '" + id + "' was resolved"));
  changed_.notify_all();
  run_id = a.run_id;
  return a.to_json();
}

Result<std::optional<std::int64_t>> Approvals::waiting(const RunState& run) {
  KERNEX_ASSIGN_OR_RETURN(auto rows, store_->pending(run.tenant, run.session));
  std::optional<std::int64_t> first;
  for (const auto& a : rows) {
    if (a.run_id == run.id && (!first || a.expires_at < *first)) first = a.expires_at;
  }
  return first;
}

void Approvals::cancel_waiting(RunState& run) {
  auto rows = store_->pending(run.tenant, run.session);
  if (!rows) {
    log(LogLevel::Error, "serve: " + rows.error().describe());
    return;
  }
  for (const auto& a : *rows) {
    if (a.run_id != run.id) continue;
    const StoredApproval denied = settle(a, "denied", "the run was cancelled");
    announce(run, "approval.resolved", "approval_resolved", resolved_event(run, denied));
  }
}

std::expected<Json, ApiError> Approvals::pending(const std::string& tenant,
                                                 const std::string& session) {
  auto rows = store_->pending(tenant, session);
  if (!rows) return std::unexpected(api_error(500, "store_failed", rows.error().describe()));
  Json list = Json::array();
  for (const auto& a : *rows) list.push_back(a.to_json());
  return Json{{"approvals", list}};
}

void Approvals::stop_waiting() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
}

bool Approvals::suspend(const std::string& run_id) {
  std::lock_guard lock(mutex_);
  if (stopping_) suspended_.insert(run_id);
  return stopping_;
}

void Approvals::changed() {
  std::lock_guard lock(mutex_);
  changed_.notify_all();
}

void Approvals::resume(const std::string& run_id) {
  std::lock_guard lock(mutex_);
  suspended_.erase(run_id);
}

bool Approvals::suspended(const std::string& run_id) {
  std::lock_guard lock(mutex_);
  return suspended_.contains(run_id);
}

Result<void> Approvals::forget_session(const std::string& tenant, const std::string& session) {
  std::lock_guard lock(mutex_);
  return store_->delete_session(tenant, session);
}

}  // namespace kernex::server
