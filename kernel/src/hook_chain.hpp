// Runs several hook plugins as one, in configured order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernex/hooks.hpp"

namespace kernex {

class HookChain final : public HookRunner {
 public:
  struct Entry {
    std::string name;  // for log messages
    std::shared_ptr<HookRunner> hook;
  };

  void add(std::string name, std::shared_ptr<HookRunner> hook);
  // Appends `other`'s hooks, in their order.
  void add_all(const HookChain& other) {
    hooks_.insert(hooks_.end(), other.hooks_.begin(), other.hooks_.end());
  }
  bool empty() const { return hooks_.empty(); }

  // The first hook that blocks wins; later hooks are not asked. A hook that throws blocks the
  // call (fail closed) and the exception's message is the reason.
  HookOutcome pre_tool(const HookScope& scope, ToolCall& call) override;
  // Every hook is told; one that throws is logged and the others still run.
  void post_tool(const HookScope& scope, const ToolCall& call, ToolResult& result) override;
  void on_stop(const HookScope& scope, const std::string& final_text) override;

 private:
  std::vector<Entry> hooks_;
};

}  // namespace kernex
