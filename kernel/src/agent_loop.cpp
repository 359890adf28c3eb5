#include "agent_loop.hpp"

#include <algorithm>
#include <exception>

#include "kernex/log.hpp"

namespace kernex {
namespace {

ToolResult error_result(const ToolCall& call, std::string message) {
  return ToolResult{call.id, call.name, std::move(message), true};
}

Result<Response> call_provider(const LoopDeps& deps, const ToolRouter& tools, const Context& context) {
  try {
    const std::vector<ToolSpec> none;
    return deps.provider->complete(context, context.tools_enabled() ? tools.specs() : none, deps.sink);
  } catch (const std::exception& e) {
    return fail(ErrorCode::Provider, "provider '" + deps.provider_name + "' threw: " + e.what());
  } catch (...) {
    return fail(ErrorCode::Provider, "provider '" + deps.provider_name + "' threw a non-standard exception");
  }
}

// One tool call through hook, permission rules and executor, kernex's order. Hooks work on a
// copy: they may rewrite the arguments the tool gets, never the model's own transcript.
ToolResult run_tool(const LoopDeps& deps, const ToolRouter& tools, Context& context, ToolCall call) {
  if (deps.hooks != nullptr) {
    HookOutcome pre = deps.hooks->pre_tool(deps.scope, call);
    if (pre.blocked) return error_result(call, "Tool blocked by hook: " + pre.reason);
  }
  const PermissionRules* rules = context.permission_rules ? context.permission_rules.get() : deps.rules;
  if (rules != nullptr) {
    PermissionOutcome permitted = rules->check(call.name, call.arguments);
    if (!permitted.allowed) return error_result(call, "Tool call denied: " + permitted.reason);
  }
  ToolExecutor* executor = tools.find(call.name);
  ContextTool* context_tool = executor == nullptr ? tools.find_context_tool(call.name) : nullptr;
  if (executor == nullptr && context_tool == nullptr) return error_result(call, "Unknown tool: " + call.name);

  ToolResult result;
  try {
    auto executed = executor != nullptr ? executor->execute(context, call) : context_tool->execute(context, call);
    result = executed ? *executed : error_result(call, "Tool failed: " + executed.error().describe());
  } catch (const std::exception& e) {
    result = error_result(call, std::string("Tool failed: ") + e.what());
  } catch (...) {
    result = error_result(call, "Tool failed with a non-standard exception");
  }
  if (deps.hooks != nullptr) deps.hooks->post_tool(deps.scope, call, result);
  result.call_id = call.id;
  result.name = call.name;
  return result;
}

// What a context tool may change that decides which tools the executors offer.
std::vector<std::string> tool_sources(const Context& context) {
  std::vector<std::string> out;
  for (const auto& t : context.toolboxes) out.push_back("toolbox:" + t.name);
  for (const auto& m : context.mcp_servers) out.push_back("mcp:" + m.name);
  return out;
}

void add_usage(RunResult& run, const Response& response, const LoopDeps& deps) {
  Usage usage = response.usage;
  if (usage.cost_usd == 0.0 && deps.pricing != nullptr) {
    usage.cost_usd = deps.pricing->cost(response.model.empty() ? run.model : response.model, usage);
  }
  run.usage += usage;
}

}  // namespace

bool ToolRouter::offer(ToolSpec spec, const Context& context) {
  // kernex only used allowed_tools as an on/off switch; here a non-empty list is a filter.
  if (context.allowed_tools && !context.allowed_tools->empty() &&
      std::find(context.allowed_tools->begin(), context.allowed_tools->end(), spec.name) ==
          context.allowed_tools->end()) {
    return false;
  }
  if (routes_.contains(spec.name) || context_routes_.contains(spec.name)) {
    log(LogLevel::Warn, "tool '" + spec.name + "' is offered twice; keeping the first");
    return false;
  }
  specs_.push_back(std::move(spec));
  return true;
}

ToolRouter ToolRouter::collect(const std::vector<std::shared_ptr<ToolExecutor>>& executors,
                               const Context& context,
                               const std::vector<std::shared_ptr<ContextTool>>& context_tools) {
  ToolRouter router;
  for (const auto& executor : executors) {
    Result<std::vector<ToolSpec>> specs = [&]() -> Result<std::vector<ToolSpec>> {
      try {
        return executor->list_tools(context);
      } catch (const std::exception& e) {
        return fail(ErrorCode::Tool, std::string("list_tools threw: ") + e.what());
      }
    }();
    if (!specs) {
      log(LogLevel::Warn, "a toolbox could not list its tools: " + specs.error().describe());
      continue;
    }
    for (auto& spec : *specs) {
      std::string name = spec.name;
      if (router.offer(std::move(spec), context)) router.routes_.emplace(std::move(name), executor.get());
    }
  }
  for (const auto& tool : context_tools) {
    if (!tool) continue;
    ToolSpec spec = tool->spec();
    std::string name = spec.name;
    if (router.offer(std::move(spec), context)) router.context_routes_.emplace(std::move(name), tool.get());
  }
  return router;
}

ContextTool* ToolRouter::find_context_tool(const std::string& name) const {
  auto it = context_routes_.find(name);
  return it == context_routes_.end() ? nullptr : it->second;
}

ToolExecutor* ToolRouter::find(const std::string& name) const {
  auto it = routes_.find(name);
  return it == routes_.end() ? nullptr : it->second;
}

Result<RunResult> run_agent_loop(Context& context, const LoopDeps& deps, const LoopLimits& limits) {
  RunResult run;
  run.provider = deps.provider_name;
  run.model = context.model.value_or(deps.provider->default_model());
  std::uint32_t tools_run = 0;
  // The router in use: the caller's, until a context tool changes what the executors offer.
  const ToolRouter* tools = deps.tools;
  ToolRouter refreshed;

  while (true) {
    if (run.turns >= limits.max_turns) {
      run.outcome = Outcome::MaxTurns;
      return run;
    }
    auto response = call_provider(deps, *tools, context);
    if (!response) {
      return fail(ErrorCode::Provider, "provider '" + deps.provider_name + "' failed on turn " +
                                           std::to_string(run.turns + 1), response.error());
    }
    ++run.turns;
    if (!response->model.empty()) run.model = response->model;
    add_usage(run, *response, deps);

    if (response->tool_calls.empty()) {
      run.text = response->text;
      run.outcome = Outcome::EndTurn;
      if (deps.hooks != nullptr) deps.hooks->on_stop(deps.scope, run.text);
      return run;
    }

    ContextEntry assistant = ContextEntry::assistant(response->text);
    assistant.tool_calls = response->tool_calls;
    assistant.provider_state = response->provider_state;
    context.turn.push_back(std::move(assistant));

    bool tools_exhausted = false;
    const std::vector<std::string> sources_before = tool_sources(context);
    for (const ToolCall& call : response->tool_calls) {
      ToolResult result;
      if (limits.tool_call_budget && tools_run >= *limits.tool_call_budget) {
        // Every call still gets a result so the transcript stays well-formed for the provider.
        result = error_result(call, "Tool call not run: the run's tool-call budget of " +
                                        std::to_string(*limits.tool_call_budget) + " is used up");
        tools_exhausted = true;
      } else {
        ++tools_run;
        result = run_tool(deps, *tools, context, call);
      }
      run.tool_calls.push_back({call, result});
      context.turn.push_back(ContextEntry::tool(result));
    }
    if (deps.executors != nullptr && tool_sources(context) != sources_before) {
      refreshed = ToolRouter::collect(*deps.executors, context, deps.context_tools);
      tools = &refreshed;
    }

    // Budgets are checked after a tool turn, so a final answer is always returned.
    if (limits.token_budget && run.usage.billed_tokens() >= *limits.token_budget) {
      run.outcome = Outcome::BudgetTokens;
      return run;
    }
    if (limits.cost_budget_usd && run.usage.cost_usd >= *limits.cost_budget_usd) {
      run.outcome = Outcome::BudgetCost;
      return run;
    }
    if (tools_exhausted) {
      run.outcome = Outcome::BudgetTools;
      return run;
    }
  }
}

}  // namespace kernex
