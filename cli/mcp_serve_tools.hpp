// The tools `kernex mcp serve` offers besides kernex_run, called by the MCP client directly or by
// code in the REPL toolbox (the context kernel): one route per tool name, the permission rules
// checked before every call. The hook chain is not run: the kernel runs it only inside a run and
// offers hosts no public entry to it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/permissions.hpp"
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

  // Every executor's tools but those of `except`, in executor order; a name already taken is
  // skipped, and so is a toolbox that cannot list (with a warning).
  std::vector<ToolSpec> list(const ToolExecutor* except = nullptr);
  // Runs one listed tool of any executor but `except`: the permission rules, then the executor.
  // An unknown or refused tool, or a failing executor, is a result with is_error.
  ToolResult call(const ToolCall& call, const ToolExecutor* except = nullptr);

 private:
  const PermissionRules& rules_;
  std::shared_ptr<const Context> context_;
  std::vector<std::shared_ptr<ToolExecutor>> executors_;
  std::vector<std::string> reserved_;
  std::map<std::string, ToolExecutor*> routes_;  // by the last list(); refreshed on a miss
  RunHandles handles_;
};

// The RunServices of an MCP session's REPL code: one fixed session and span per serve process
// (stdio carries one MCP session, so its REPL persists across the client's calls), no model
// (llm_query stays deferred to the client: pending_queries, then provide_answers), and tools
// routed through ServeTools as the client's own calls are, the REPL's tools excepted (code
// calling eval_code would wait on its own REPL).
class ServeRunServices final : public RunServices {
 public:
  // `tools` must outlive this.
  ServeRunServices(ServeTools& tools, const ToolExecutor* repl, std::string session);

  std::uint32_t depth() const override { return 0; }
  const std::string& span() const override { return span_; }
  const std::string& session() const override { return session_; }
  bool can_query() const override { return false; }
  Result<std::string> llm_query(const std::string& prompt,
                                const std::optional<std::string>& model) override;
  std::vector<Result<std::string>> llm_query_batched(
      const std::vector<std::string>& prompts, const std::optional<std::string>& model) override;
  Result<std::string> rlm_query(const std::string& prompt,
                                const std::optional<std::string>& context) override;
  std::vector<ToolSpec> tools() override;
  ToolResult call_tool(ToolCall call, const std::string& code_run) override;

 private:
  ServeTools& tools_;
  const ToolExecutor* repl_;
  std::string session_;
  std::string span_ = "0";
};

}  // namespace kernex::cli
