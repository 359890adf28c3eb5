#include "hook_chain.hpp"

#include <exception>

#include "kernex/log.hpp"

namespace kernex {
namespace {

template <class F>
void notify_each(const std::vector<HookChain::Entry>& hooks, std::string_view what, F&& call) {
  for (const auto& entry : hooks) {
    try {
      call(*entry.hook);
    } catch (const std::exception& e) {
      log(LogLevel::Warn,
          "hook '" + entry.name + "' threw in " + std::string(what) + ": " + e.what());
    } catch (...) {
      log(LogLevel::Warn, "hook '" + entry.name + "' threw in " + std::string(what));
    }
  }
}

}  // namespace

void HookChain::add(std::string name, std::shared_ptr<HookRunner> hook) {
  if (hook) hooks_.push_back({std::move(name), std::move(hook)});
}

// The first block wins; otherwise the first ask (a later hook may still block the call).
HookOutcome HookChain::pre_tool(const HookScope& scope, ToolCall& call) {
  HookOutcome asked = HookOutcome::allow();
  for (const auto& entry : hooks_) {
    try {
      HookOutcome outcome = entry.hook->pre_tool(scope, call);
      if (outcome.blocked) return outcome;
      if (outcome.asks && !asked.asks) asked = std::move(outcome);
    } catch (const std::exception& e) {
      return HookOutcome::block("hook '" + entry.name + "' failed: " + e.what());
    } catch (...) {
      return HookOutcome::block("hook '" + entry.name + "' failed");
    }
  }
  return asked;
}

void HookChain::post_tool(const HookScope& scope, const ToolCall& call, ToolResult& result) {
  notify_each(hooks_, "post_tool", [&](HookRunner& h) { h.post_tool(scope, call, result); });
}

void HookChain::on_stop(const HookScope& scope, const std::string& final_text) {
  notify_each(hooks_, "on_stop", [&](HookRunner& h) { h.on_stop(scope, final_text); });
}

}  // namespace kernex
