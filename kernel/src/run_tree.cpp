#include "run_tree.hpp"

#include <cstdio>

namespace kernex {

void RunTree::charge(const Usage& usage) {
  std::lock_guard lock(mu_);
  used_ += usage;
}

bool RunTree::take_tool_call() {
  std::lock_guard lock(mu_);
  if (budget_.tool_calls && tool_calls_ >= *budget_.tool_calls) return false;
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
  if (budget_.tokens && used_.billed_tokens() >= *budget_.tokens) {
    return "tokens (" + std::to_string(used_.billed_tokens()) + " of " +
           std::to_string(*budget_.tokens) + " used)";
  }
  if (budget_.cost_usd && used_.cost_usd >= *budget_.cost_usd) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "cost ($%.6f of $%.6f used)", used_.cost_usd, *budget_.cost_usd);
    return std::string(buf);
  }
  if (budget_.tool_calls && tool_calls_ >= *budget_.tool_calls) {
    return "tool_calls (" + std::to_string(tool_calls_) + " of " +
           std::to_string(*budget_.tool_calls) + " used)";
  }
  return std::nullopt;
}

std::string RunTree::child_span(const std::string& parent) {
  std::lock_guard lock(mu_);
  return parent + "." + std::to_string(++children_[parent]);
}

}  // namespace kernex
