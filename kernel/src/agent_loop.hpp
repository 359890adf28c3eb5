// The agentic loop: provider -> tool calls -> hooks -> permissions -> executor -> provider,
// until a final answer or a limit.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/hooks.hpp"
#include "kernex/kernel.hpp"
#include "kernex/permissions.hpp"
#include "kernex/pricing.hpp"
#include "kernex/provider.hpp"
#include "kernex/toolbox.hpp"
#include "kernex/config.hpp"
#include "merged_tools.hpp"
#include "run_tree.hpp"

namespace kernex {

// Tool name -> the executor (or context tool) that offers it, for one run.
class ToolRouter {
 public:
  // Asks each executor for its tools, then takes the context tools, keeping those in
  // context.allowed_tools when that is a non-empty list; a later one offering a name already
  // taken is skipped (logged).
  // With `shared`, executors that share their lists (SharedToolList) are merged once for the runs
  // of the same lists: nothing is copied for this one.
  static ToolRouter collect(const std::vector<std::shared_ptr<ToolExecutor>>& executors,
                            const Context& context,
                            const std::vector<std::shared_ptr<ContextTool>>& context_tools = {},
                            MergedToolsCache* shared = nullptr);
  const std::vector<ToolSpec>& specs() const { return merged_ ? merged_->specs : specs_; }
  // The executors' tools only: what code may call (context tools change the run itself).
  std::vector<ToolSpec> code_specs() const;
  ToolExecutor* find(const std::string& name) const;
  ContextTool* find_context_tool(const std::string& name) const;

 private:
  bool offer(ToolSpec spec, const Context& context);

  std::shared_ptr<const MergedTools> merged_;  // the specs, when every list was shared
  std::vector<ToolSpec> specs_;                // the specs otherwise
  std::map<std::string, ToolExecutor*, std::less<>> routes_;
  std::map<std::string, ContextTool*, std::less<>> context_routes_;
};

// Where the loop is, for the journal's and approvals' keys: the model's tool call being run
// ("<turn>.<index>") and how many calls the code it runs has made.
struct LoopCursor {
  std::string tool_key;
  std::uint32_t code_calls = 0;
};

struct LoopDeps {
  Provider* provider = nullptr;
  std::string provider_name;
  const ToolRouter* tools = nullptr;
  // Set to have the loop keep it pointing at the router in use (tools called from code use it).
  const ToolRouter** router_in_use = nullptr;
  // Set when context tools may change the Context mid-run: the router is collected again from
  // these after a tool turn that changed the context's toolboxes or MCP servers.
  const std::vector<std::shared_ptr<ToolExecutor>>* executors = nullptr;
  MergedToolsCache* tool_lists = nullptr;  // for those collections; may be null
  std::vector<std::shared_ptr<ContextTool>> context_tools;
  HookRunner* hooks = nullptr;             // may be null
  const PermissionRules* rules = nullptr;  // may be null
  const PricingTable* pricing = nullptr;   // may be null: cost only as reported by the provider
  HookScope scope;
  // The live parts of the run that tools receive beside the Context.
  RunHandles handles;
  // The provider's events, and the loop's own ToolRun / ToolResult around each tool it runs.
  StreamSink sink;
  // The tree this run belongs to: its budgets cover every run and sub-call under the root, and
  // its trajectory (if any) receives provider_call and tool_call events under `span`. Null: the
  // budgets apply to this run alone and nothing is recorded.
  RunTree* tree = nullptr;
  std::string span = "0";
  std::uint32_t depth = 0;
  // Set on a root run that can be resumed (RunOptions::journal): model answers and tool calls
  // are recorded there and replayed from it.
  RunJournal* journal = nullptr;
  // The loop keeps it current; run_code_tool reads it. Null: calls have no key.
  LoopCursor* cursor = nullptr;
};

// One tool call through hooks, permission rules and the executor, recorded in the trajectory;
// used by the loop and by code that runs tools around it (RunOptions::extension).
// `code_run`: the id of the code run that called it (tools called from code), recorded with it.
// `key`: the call's journal and approval key ("" outside the loop: not journaled).
// `code_max_bytes`: nonzero for a call from code, its cap on the result (the executor sees it as
// RunHandles::code_result_max_bytes).
ToolResult run_tool(const LoopDeps& deps, const ToolRouter& tools, Context& context, ToolCall call,
                    const std::string& code_run = {}, const std::string& key = {},
                    std::size_t code_max_bytes = 0);

// A tool called from the run's code (RunServices::call_tool): as a model's call in the loop,
// with the stop request, the tool-call budget and the ToolRun / ToolResult stream events.
ToolResult run_code_tool(const LoopDeps& deps, const ToolRouter& tools, Context& context,
                         ToolCall call, const std::string& code_run, std::size_t max_bytes = 0);

// Runs the loop on `context` (its `turn` grows with the run's tool exchange). Provider errors
// end the run with an error; tool errors go back to the model as error results. A stop request
// on `context.stop`, seen before a model or tool call or after a failed model call, ends the
// run with Outcome::Cancelled: its text is what the model said so far, and the turn keeps the
// streamed partial answer and a "not run" result for each tool call it skipped.
// `limits` are the run's (RunPlan::limits): with a tree they are the tree's, so the loop and the
// tree read one set.
Result<RunResult> run_agent_loop(Context& context, const LoopDeps& deps, const Limits& limits);

}  // namespace kernex
