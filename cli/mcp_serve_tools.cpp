#include "mcp_serve_tools.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "kernex/log.hpp"

namespace kernex::cli {

ServeTools::ServeTools(const PermissionRules& rules, std::shared_ptr<const Context> context,
                       std::vector<std::shared_ptr<ToolExecutor>> executors,
                       std::vector<std::string> reserved)
    : rules_(rules),
      context_(std::move(context)),
      executors_(std::move(executors)),
      reserved_(std::move(reserved)) {}

std::vector<ToolSpec> ServeTools::list(const ToolExecutor* except) {
  std::vector<ToolSpec> specs;
  std::map<std::string, ToolExecutor*> routes;
  for (const auto& executor : executors_) {
    auto listed = executor->list_tools(*context_);
    if (!listed) {
      log(LogLevel::Warn, "a toolbox could not list its tools: " + listed.error().describe());
      continue;
    }
    for (auto& spec : *listed) {
      if (routes.contains(spec.name) ||
          std::find(reserved_.begin(), reserved_.end(), spec.name) != reserved_.end())
        continue;
      routes.emplace(spec.name, executor.get());
      if (executor.get() != except) specs.push_back(std::move(spec));
    }
  }
  // A call running now holds its executor, never an entry of this map: replacing it is safe.
  routes_ = std::move(routes);
  return specs;
}

ToolResult ServeTools::call(const ToolCall& requested, const ToolExecutor* except,
                            std::stop_token stop, std::size_t code_max_bytes) {
  ToolCall call = requested;  // hooks may rewrite the arguments the tool gets
  auto error = [&](std::string text) {
    return ToolResult{call.id, call.name, std::move(text), true};
  };
  if (!routes_.contains(call.name)) list();
  auto it = routes_.find(call.name);
  if (it == routes_.end() || it->second == except) return error("Unknown tool: " + call.name);
  ToolExecutor* executor = it->second;
  if (hooks_) {
    HookOutcome pre = hooks_->pre_tool(scope_, call);
    if (pre.blocked) return error("Tool blocked by hook: " + pre.reason);
    // No person answers here (the MCP client is a program): what needs approval is refused.
    if (pre.asks)
      return error(std::string("Tool call denied: ") + kNeedsApprovalText + " (" + pre.reason +
                   ")");
  }
  PermissionOutcome permitted = rules_.check(call.name, call.arguments);
  if (permitted.ask)
    return error(std::string("Tool call denied: ") + kNeedsApprovalText + " (" + permitted.reason +
                 ")");
  if (!permitted.allowed) return error("Tool call denied: " + permitted.reason);
  ToolResult result;
  try {
    RunHandles handles = handles_;
    handles.code_result_max_bytes = code_max_bytes;
    Result<ToolResult> executed;
    if (stop.stop_possible()) {
      Context stoppable = *context_;  // this call's own stop, the shared rest unchanged
      stoppable.stop = stop;
      executed = executor->execute(stoppable, handles, call);
    } else {
      executed = executor->execute(*context_, handles, call);
    }
    result = executed ? *executed : error("Tool failed: " + executed.error().describe());
  } catch (const std::exception& e) {
    result = error(std::string("Tool failed: ") + e.what());
  }
  if (hooks_) hooks_->post_tool(scope_, call, result);
  return result;
}

ServeRunServices::ServeRunServices(ServeTools& tools, const ToolExecutor* repl, std::string session)
    : tools_(tools), repl_(repl), session_(std::move(session)) {}

namespace {
Error no_model() {
  return Error{ErrorCode::Unsupported,
               "kernex mcp serve answers no sub-query itself: its MCP client does (deferred mode)"};
}
}  // namespace

// One completion, tools off, as a run's llm_query: no budget here beyond the provider's own.
Result<std::string> ServeRunServices::complete(Provider& provider, const std::string& prompt,
                                               const std::optional<std::string>& model) {
  Context ctx(prompt);
  ctx.model = model;
  ctx.allowed_tools = std::vector<std::string>{};
  try {
    auto response = provider.complete(ctx, {}, {});
    if (!response) return fail(ErrorCode::Provider, "llm_query failed", response.error());
    return response->text;
  } catch (const std::exception& e) {
    return fail(ErrorCode::Provider, std::string("llm_query: the provider threw: ") + e.what());
  }
}

std::shared_ptr<Provider> ServeRunServices::lease() {
  {
    std::lock_guard lock(idle_mutex_);
    if (!idle_.empty()) {
      auto provider = std::move(idle_.back());
      idle_.pop_back();
      return provider;
    }
  }
  if (!more_providers_) return nullptr;
  std::lock_guard lock(make_mutex_);  // the factory (plugin host, kernel) is asked by one at a time
  auto made = more_providers_();
  return made ? *made : nullptr;
}

void ServeRunServices::give_back(std::shared_ptr<Provider> provider) {
  std::lock_guard lock(idle_mutex_);
  idle_.push_back(std::move(provider));
}

Result<std::string> ServeRunServices::llm_query(const std::string& prompt,
                                                const std::optional<std::string>& model) {
  if (!provider_) return std::unexpected(no_model());
  if (auto leased = lease()) {
    auto text = complete(*leased, prompt, model);
    give_back(std::move(leased));
    return text;
  }
  std::lock_guard lock(provider_mutex_);  // one provider instance: one request at a time
  return complete(*provider_, prompt, model);
}

// Concurrently, on at most kBatchWorkers leased instances; results in the order of `prompts`.
std::vector<Result<std::string>> ServeRunServices::llm_query_batched(
    const std::vector<std::string>& prompts, const std::optional<std::string>& model) {
  constexpr std::size_t kBatchWorkers = 4;
  std::vector<Result<std::string>> out(prompts.size(), std::unexpected(no_model()));
  if (!provider_) return out;
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < prompts.size(); i = next++)
      out[i] = llm_query(prompts[i], model);
  };
  {
    std::vector<std::jthread> threads;
    const std::size_t workers = std::min(prompts.size(), kBatchWorkers);
    for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work);
    work();
  }  // joined
  return out;
}

Result<std::string> ServeRunServices::rlm_query(const std::string&,
                                                const std::optional<std::string>&) {
  if (!provider_) return std::unexpected(no_model());
  return fail(ErrorCode::Unsupported,
              "rlm_query needs a run with a REPL of its own: use kernex_run or `kernex rlm`");
}

std::vector<ToolSpec> ServeRunServices::tools() { return tools_.list(repl_); }

// No trajectory is kept by mcp serve, so `code_run` names nothing to attach the call to.
ToolResult ServeRunServices::call_tool(ToolCall call, const std::string&,
                                       std::size_t result_max_bytes) {
  return tools_.call(call, repl_, {}, result_max_bytes);
}

void ServeRunServices::submit_result(Json value, const std::string&) {
  std::lock_guard lock(submitted_mutex_);
  submitted_ = std::move(value);
}

std::optional<Json> ServeRunServices::take_submitted() {
  std::lock_guard lock(submitted_mutex_);
  return std::exchange(submitted_, std::nullopt);
}

}  // namespace kernex::cli
