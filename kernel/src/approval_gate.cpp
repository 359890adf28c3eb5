#include "approval_gate.hpp"

#include <chrono>
#include <exception>

namespace kernex {
namespace {

void record(const ApprovalGate::Where& where, const ApprovalRequest& request,
            const ApprovalDecision& decision, double wait_ms) {
  if (where.trajectory == nullptr) return;
  Json event = {{"span", where.span},
                {"depth", where.depth},
                {"key", request.key},
                {"name", request.call.name},
                {"arguments", request.call.arguments},
                {"reason", request.reason},
                {"decision", std::string(to_string(decision.verdict))},
                {"wait_ms", wait_ms}};
  if (decision.arguments) event["edited_arguments"] = *decision.arguments;
  if (!decision.reason.empty()) event["decision_reason"] = decision.reason;
  if (!request.code_run.empty()) event["code_run"] = request.code_run;
  where.trajectory->record("approval", std::move(event));
}

ApprovalDecision ask(const Approver& approver, const ApprovalRequest& request,
                     std::stop_token stop) {
  try {
    return approver(request, stop);
  } catch (const std::exception& e) {
    return ApprovalDecision::deny(std::string("the approver failed: ") + e.what());
  } catch (...) {
    return ApprovalDecision::deny("the approver failed");
  }
}

}  // namespace

bool ApprovalGate::always_allowed(const std::string& tool) {
  std::lock_guard lock(mu_);
  return always_.contains(tool);
}

std::optional<std::string> ApprovalGate::decide(const ApprovalRequest& request, ToolCall& call,
                                                const PermissionRules* rules, std::stop_token stop,
                                                const Where& where) {
  if (always_allowed(call.name)) return std::nullopt;
  if (!approver_) return std::string(kNeedsApprovalText) + " (" + request.reason + ")";
  const auto t0 = std::chrono::steady_clock::now();
  ApprovalDecision decision = ask(approver_, request, stop);
  record(where, request, decision,
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  if (!decision.approved()) {
    return "denied by a person" + (decision.reason.empty() ? "" : ": " + decision.reason);
  }
  if (decision.arguments) {
    call.arguments = std::move(*decision.arguments);
    if (rules != nullptr) {
      PermissionOutcome again = rules->check_approved(call.name, call.arguments);
      if (!again.allowed) return again.reason + " (the edited arguments)";
    }
  }
  if (decision.verdict == ApprovalVerdict::Always) {
    std::lock_guard lock(mu_);
    always_.insert(call.name);
  }
  return std::nullopt;
}

}  // namespace kernex
