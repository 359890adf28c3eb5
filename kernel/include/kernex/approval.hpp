// A person in the loop. A tool call that a permission rule (`ask:`) or a hook
// (HookOutcome::ask) sends for approval waits for the run's Approver before it runs; without
// one it is denied with the reason "needs approval".
#pragma once

#include <functional>
#include <optional>
#include <stop_token>
#include <string>

#include "kernex/json.hpp"
#include "kernex/tool.hpp"

namespace kernex {

struct ApprovalRequest {
  // The call's idempotency key within its run (see RunJournal): the same when a run is resumed
  // after a restart, so a host finds a decision it already stored instead of asking again.
  std::string key;
  ToolCall call;       // as the tool would get it (after the hooks)
  std::string reason;  // "ask rule: Bash(rm *)" or the hook's reason
  std::string session_id;
  std::string code_run;  // set when the run's code called the tool (RunServices::call_tool)
};

enum class ApprovalVerdict { Approve, Deny, Always };
std::string_view to_string(ApprovalVerdict verdict) noexcept;
std::optional<ApprovalVerdict> parse_approval_verdict(std::string_view text) noexcept;

struct ApprovalDecision {
  ApprovalVerdict verdict = ApprovalVerdict::Deny;
  // Approve/Always: arguments the person edited; checked against the permission rules again.
  std::optional<Json> arguments;
  std::string reason;  // shown to the model on a deny

  static ApprovalDecision approve() { return {ApprovalVerdict::Approve, std::nullopt, {}}; }
  static ApprovalDecision always() { return {ApprovalVerdict::Always, std::nullopt, {}}; }
  static ApprovalDecision deny(std::string why) {
    return {ApprovalVerdict::Deny, std::nullopt, std::move(why)};
  }
  bool approved() const { return verdict != ApprovalVerdict::Deny; }
};

// Blocks until a person decided (or a stop request or expiry, which should deny). Called on the
// run's thread. `Always` also approves later calls of the same tool in this run; a host that
// keeps sessions remembers it for the session.
using Approver = std::function<ApprovalDecision(const ApprovalRequest&, std::stop_token)>;

// The reason of a call denied because it needed approval and nothing could ask a person.
inline constexpr const char* kNeedsApprovalText = "needs approval";

}  // namespace kernex
