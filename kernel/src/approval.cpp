#include "kernex/approval.hpp"

namespace kernex {

std::string_view to_string(ApprovalVerdict verdict) noexcept {
  switch (verdict) {
    case ApprovalVerdict::Approve:
      return "approve";
    case ApprovalVerdict::Deny:
      return "deny";
    case ApprovalVerdict::Always:
      return "always";
  }
  return "deny";
}

std::optional<ApprovalVerdict> parse_approval_verdict(std::string_view text) noexcept {
  for (ApprovalVerdict v :
       {ApprovalVerdict::Approve, ApprovalVerdict::Deny, ApprovalVerdict::Always})
    if (to_string(v) == text) return v;
  return std::nullopt;
}

}  // namespace kernex
