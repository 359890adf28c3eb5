// The tools `kernex mcp serve` offers besides kernex_run, called by the MCP client directly or by
// code in the REPL toolbox (the context kernel): one route per tool name, the kernel's hook chain
// and permission rules around every call, in a run's order.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/approval.hpp"
#include "kernex/context.hpp"
#include "kernex/hooks.hpp"
#include "kernex/permissions.hpp"
#include "kernex/provider.hpp"
#include "kernex/run_handles.hpp"
#include "kernex/run_services.hpp"
#include "kernex/toolbox.hpp"

namespace kernex::cli {

class ServeTools {
 public:
  // `rules` must outlive this; `context` is the Context every call runs in; a tool named in
  // `reserved` (kernex_run) is neither offered nor called.
  ServeTools(const PermissionRules& rules, std::shared_ptr<const Context> context,
             std::vector<std::shared_ptr<ToolExecutor>> executors,
             std::vector<std::string> reserved = {});

  // The handles every executor is called with (services for the REPL's code).
  void set_handles(RunHandles handles) { handles_ = std::move(handles); }
  // The kernel's hook chain (Kernel::hooks) and whom it is told the calls are for: run around
  // every call as in a run (pre_tool may rewrite or block it, post_tool may rewrite its result).
  void set_hooks(std::shared_ptr<HookRunner> hooks, HookScope scope) {
    hooks_ = std::move(hooks);
    scope_ = std::move(scope);
  }

  // Every executor's tools but those of `except`, in executor order; a name already taken is
  // skipped, and so is a toolbox that cannot list (with a warning).
  std::vector<ToolSpec> list(const ToolExecutor* except = nullptr);
  // Runs one listed tool of any executor but `except`: the permission rules, then the executor.
  // An unknown or refused tool, or a failing executor, is a result with is_error.
  // `stop` (a client's cancel) reaches the executor as the call's Context::stop.
  // `code_max_bytes` (nonzero): code called it, which gets the whole result up to that cap.
  ToolResult call(const ToolCall& call, const ToolExecutor* except = nullptr,
                  std::stop_token stop = {}, std::size_t code_max_bytes = 0);

 private:
  const PermissionRules& rules_;
  std::shared_ptr<const Context> context_;
  std::vector<std::shared_ptr<ToolExecutor>> executors_;
  std::vector<std::string> reserved_;
  std::map<std::string, ToolExecutor*> routes_;  // by the last list(); refreshed on a miss
  RunHandles handles_;
  std::shared_ptr<HookRunner> hooks_;
  HookScope scope_;
};

// The RunServices of an MCP session's REPL code: one fixed session and span per serve process
// (stdio carries one MCP session, so its REPL persists across the client's calls), llm_query
// answered by the configured provider or, with none, deferred to the client (pending_queries, then
// provide_answers: "zero API keys", the client is a model), and tools
// routed through ServeTools as the client's own calls are, the REPL's tools excepted (code
// calling eval_code would wait on its own REPL).
class ServeRunServices final : public RunServices {
 public:
  // `tools` must outlive this.
  ServeRunServices(ServeTools& tools, const ToolExecutor* repl, std::string session);

  std::uint32_t depth() const override { return 0; }
  const std::string& span() const override { return span_; }
  const std::string& session() const override { return session_; }
  // With a provider (one is configured), llm_query is answered here; without, it is deferred.
  // `more` makes further instances: each query leases one (an idle one, else a new one, kept for
  // the next) so llm_query_batched runs concurrently; without it the one instance answers one
  // query at a time.
  using ProviderFactory = std::function<Result<std::shared_ptr<Provider>>()>;
  void set_provider(std::shared_ptr<Provider> provider, ProviderFactory more = {}) {
    provider_ = std::move(provider);
    more_providers_ = std::move(more);
  }
  bool can_query() const override { return provider_ != nullptr; }
#include "kernex/run_services_overrides.inc"
  // What the code submitted (submit_result) since the last take, handed back once.
  std::optional<Json> take_submitted();

 private:
  ServeTools& tools_;
  const ToolExecutor* repl_;
  std::string session_;
  std::string span_ = "0";
  std::shared_ptr<Provider> provider_;
  std::mutex provider_mutex_;  // provider_ answers one query at a time
  ProviderFactory more_providers_;
  std::mutex idle_mutex_;
  std::mutex make_mutex_;
  std::vector<std::shared_ptr<Provider>> idle_;  // made by more_providers_, none in use
  std::shared_ptr<Provider> lease();
  void give_back(std::shared_ptr<Provider> provider);
  Result<std::string> complete(Provider& provider, const std::string& prompt,
                               const std::optional<std::string>& model);
  std::mutex submitted_mutex_;
  std::optional<Json> submitted_;
};

}  // namespace kernex::cli
