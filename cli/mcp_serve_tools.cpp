#include "mcp_serve_tools.hpp"

#include <algorithm>
#include <exception>

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

ToolResult ServeTools::call(const ToolCall& call, const ToolExecutor* except) {
  auto error = [&](std::string text) {
    return ToolResult{call.id, call.name, std::move(text), true};
  };
  if (!routes_.contains(call.name)) list();
  auto it = routes_.find(call.name);
  if (it == routes_.end() || it->second == except) return error("Unknown tool: " + call.name);
  ToolExecutor* executor = it->second;
  PermissionOutcome permitted = rules_.check(call.name, call.arguments);
  if (!permitted.allowed) return error("Tool call denied: " + permitted.reason);
  try {
    auto result = executor->execute(*context_, handles_, call);
    if (!result) return error("Tool failed: " + result.error().describe());
    return *result;
  } catch (const std::exception& e) {
    return error(std::string("Tool failed: ") + e.what());
  }
}

ServeRunServices::ServeRunServices(ServeTools& tools, const ToolExecutor* repl, std::string session)
    : tools_(tools), repl_(repl), session_(std::move(session)) {}

namespace {
Error no_model() {
  return Error{ErrorCode::Unsupported,
               "kernex mcp serve answers no sub-query itself: its MCP client does (deferred mode)"};
}
}  // namespace

Result<std::string> ServeRunServices::llm_query(const std::string&,
                                                const std::optional<std::string>&) {
  return std::unexpected(no_model());
}

std::vector<Result<std::string>> ServeRunServices::llm_query_batched(
    const std::vector<std::string>& prompts, const std::optional<std::string>&) {
  return std::vector<Result<std::string>>(prompts.size(), std::unexpected(no_model()));
}

Result<std::string> ServeRunServices::rlm_query(const std::string&,
                                                const std::optional<std::string>&) {
  return std::unexpected(no_model());
}

std::vector<ToolSpec> ServeRunServices::tools() { return tools_.list(repl_); }

// No trajectory is kept by mcp serve, so `code_run` names nothing to attach the call to.
ToolResult ServeRunServices::call_tool(ToolCall call, const std::string&) {
  return tools_.call(call, repl_);
}

}  // namespace kernex::cli
