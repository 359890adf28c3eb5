#include "run_tree.hpp"

#include <cstdio>

namespace kernex {

void RunTree::charge(const Usage& usage) {
  std::lock_guard lock(mu_);
  used_ += usage;
}

bool RunTree::take_tool_call() {
  std::lock_guard lock(mu_);
  if (limits_.budgets.tool_call_budget && tool_calls_ >= *limits_.budgets.tool_call_budget)
    return false;
  ++tool_calls_;
  return true;
}

Usage RunTree::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

std::uint32_t RunTree::tool_calls_used() const {
  std::lock_guard lock(mu_);
  return tool_calls_;
}

std::optional<std::string> RunTree::exhausted() const {
  std::lock_guard lock(mu_);
  if (limits_.budgets.token_budget && used_.billed_tokens() >= *limits_.budgets.token_budget) {
    return "tokens (" + std::to_string(used_.billed_tokens()) + " of " +
           std::to_string(*limits_.budgets.token_budget) + " used)";
  }
  if (limits_.budgets.cost_budget_usd && used_.cost_usd >= *limits_.budgets.cost_budget_usd) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "cost ($%.6f of $%.6f used)", used_.cost_usd,
                  *limits_.budgets.cost_budget_usd);
    return std::string(buf);
  }
  if (limits_.budgets.tool_call_budget && tool_calls_ >= *limits_.budgets.tool_call_budget) {
    return "tool_calls (" + std::to_string(tool_calls_) + " of " +
           std::to_string(*limits_.budgets.tool_call_budget) + " used)";
  }
  return std::nullopt;
}

std::string RunTree::child_span(const std::string& parent) {
  std::lock_guard lock(mu_);
  return parent + "." + std::to_string(++children_[parent]);
}

}  // namespace kernex
