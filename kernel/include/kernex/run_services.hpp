// Services a tool may call back into while a run is going on (RunHandles::services). The kernel
// provides them per run; the REPL toolbox uses them for llm_query / rlm_query made by sandboxed
// code. One budget covers a run and every sub-call under it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/tool.hpp"

namespace kernex {

class RunServices {
 public:
  virtual ~RunServices() = default;
  // 0 for a root run, 1 for a run started by rlm_query from depth 0, and so on.
  virtual std::uint32_t depth() const = 0;
  // This run's span in the trajectory's sub-call tree ("0" for the root; see trajectory.hpp).
  virtual const std::string& span() const = 0;
  // The same for a whole tree of runs and, when memory is on, for every turn of one
  // conversation (its id); a fresh id otherwise. With span() it keys per-run state such as a
  // REPL session.
  virtual const std::string& session() const = 0;
  // False when nothing can answer sub-queries (deferred mode: no provider); the REPL then hands
  // pending queries back to its caller instead of calling these.
  virtual bool can_query() const = 0;
  // One completion by the run's provider (or `model`), tools off. Counted against the tree's
  // budget; a used-up budget is an Error with ErrorCode::Limit naming it ("tokens", "cost",
  // "tool_calls", "depth").
  virtual Result<std::string> llm_query(const std::string& prompt,
                                        const std::optional<std::string>& model) = 0;
  // Several completions run concurrently (bounded); results in the order of `prompts`.
  virtual std::vector<Result<std::string>> llm_query_batched(
      const std::vector<std::string>& prompts, const std::optional<std::string>& model) = 0;
  // A recursive sub-agent one level deeper with a REPL of its own; `context`, when given, is
  // loaded there as the variable `context`. Returns its final answer. Error (Limit) past max_depth.
  virtual Result<std::string> rlm_query(const std::string& prompt,
                                        const std::optional<std::string>& context) = 0;

  // Tools for code (a REPL's `tools.call`). The tools this run offers its model, as it sees
  // them; context tools (which change the run itself) are the model's alone. Empty: none.
  virtual std::vector<ToolSpec> tools() { return {}; }
  // Runs one tool exactly as a model's call would run: the hook chain, the permission rules, the
  // tool-call budget, the stream and the trajectory, where the call is recorded as a child of the
  // code run `code_run` (an id the caller chose, also on its own code_run event). A refusal or a
  // failure is a result with is_error; a used-up budget says so in its text (see
  // tool_budget_text()). `result_max_bytes` (nonzero) is the code's cap on the result: the tool
  // sees it as RunHandles::code_result_max_bytes and returns everything up to it.
  virtual ToolResult call_tool(ToolCall call, const std::string& code_run,
                               std::size_t result_max_bytes = 0) {
    (void)code_run, (void)result_max_bytes;
    return ToolResult{call.id, call.name, "Tool calls from code are not available in this run",
                      true};
  }
  // The code run (a REPL's eval_code, by the id on its code_run event) whose callbacks follow, ""
  // once it ended: sub-queries and sub-agents started meanwhile are recorded as its children
  // (`code_run` on their sub_call events), as the tools it calls are.
  virtual void set_code_run(std::string id) { (void)id; }
  // Records a result the run's code submitted (submit_result): the run's answer carries the last
  // one (RunResult::result) and the trajectory a `result` event.
  virtual void submit_result(Json value, const std::string& code_run) {
    (void)value, (void)code_run;
  }
};

// The start of a tool result refused because the run's tool-call budget is used up; code that
// calls tools raises its budget exception on it.
inline constexpr const char* kToolBudgetText = "Tool call not run: the run's tool-call budget";

}  // namespace kernex
