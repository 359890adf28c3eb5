// Hooks observe and gate tool calls. Several hook plugins run as an ordered chain.
#pragma once

#include <string>

#include "kernex/tool.hpp"

namespace kernex {

struct HookOutcome {
  bool blocked = false;
  // The call runs only once a person approved it (RunOptions::approver); `reason` says why.
  bool asks = false;
  std::string reason;

  static HookOutcome allow() { return {}; }
  static HookOutcome block(std::string why) { return {true, false, std::move(why)}; }
  static HookOutcome ask(std::string why) { return {false, true, std::move(why)}; }
};

// Who is running, for hooks that log or decide per conversation.
struct HookScope {
  std::string session_id;
  std::string sender_id;
  std::string agent_name;
};

class HookRunner {
 public:
  virtual ~HookRunner() = default;
  // Before a tool runs; a block becomes the tool's error result ("Tool blocked by hook: why"), an
  // ask sends the call for approval (in a chain: the first block wins, else any ask).
  // A hook may rewrite `call.arguments` (e.g. put redacted values back); later hooks, the
  // permission rules and the tool see the rewritten call, the model's transcript keeps its own.
  virtual HookOutcome pre_tool(const HookScope& scope, ToolCall& call) {
    (void)scope, (void)call;
    return HookOutcome::allow();
  }
  // After a tool ran (not for blocked or denied calls). A hook may rewrite `result.content`
  // (e.g. redact secrets); the model sees the result after every hook ran.
  virtual void post_tool(const HookScope& scope, const ToolCall& call, ToolResult& result) {
    (void)scope, (void)call, (void)result;
  }
  // When a run ends with a final answer (outcome end_turn).
  virtual void on_stop(const HookScope& scope, const std::string& final_text) {
    (void)scope, (void)final_text;
  }
};

}  // namespace kernex
