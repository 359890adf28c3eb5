// Where a call that needs a person's approval waits for one. Shared by a root run and its
// sub-runs (RunTree), so "always" given once holds for the whole run.
#pragma once

#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>

#include "kernex/approval.hpp"
#include "kernex/permissions.hpp"
#include "kernex/trajectory.hpp"

namespace kernex {

class ApprovalGate {
 public:
  explicit ApprovalGate(Approver approver) : approver_(std::move(approver)) {}

  struct Where {
    Trajectory* trajectory = nullptr;
    std::string span;
    std::uint32_t depth = 0;
  };
  // Asks about `request.call` and applies the answer to `call` (edited arguments, checked again
  // with `rules`). Nothing: the call may run; otherwise the reason it may not.
  std::optional<std::string> decide(const ApprovalRequest& request, ToolCall& call,
                                    const PermissionRules* rules, std::stop_token stop,
                                    const Where& where);

 private:
  bool always_allowed(const std::string& tool);

  Approver approver_;
  std::mutex mu_;
  std::set<std::string> always_;
};

}  // namespace kernex
