// Tool executors: a toolbox plugin offers tools for a Context and runs calls to them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/run_handles.hpp"
#include "kernex/tool.hpp"

namespace kernex {

class ToolExecutor {
 public:
  virtual ~ToolExecutor() = default;
  // Tools this executor can run for `context` (e.g. the context's script toolboxes, or the
  // tools of its MCP servers). Called once per run; names must be unique across executors.
  virtual Result<std::vector<ToolSpec>> list_tools(const Context& context) = 0;
  // Run one call; `run` holds the live parts of the run it belongs to (services, trajectory,
  // read grants). Tool failures are results with is_error = true; an Error return means the
  // executor itself failed (it is reported to the model as an error result as well).
  virtual Result<ToolResult> execute(const Context& context, const RunHandles& run,
                                     const ToolCall& call) = 0;
};

// Beside ToolExecutor, for an executor whose tools are the same for many runs (the builtin and
// files toolboxes): it hands out one immutable list instead of a copy of every schema for each
// run. The kernel finds it with dynamic_cast and calls it instead of list_tools. A list once
// returned never changes (other tools are a new vector): the kernel keeps what it merged from
// the lists it holds, by their addresses, for the next runs.
class SharedToolList {
 public:
  // As list_tools; null is no tools.
  virtual Result<std::shared_ptr<const std::vector<ToolSpec>>> list_tools_shared(
      const Context& context) = 0;

 protected:
  SharedToolList() = default;
  SharedToolList(const SharedToolList&) = default;
  SharedToolList& operator=(const SharedToolList&) = default;
  ~SharedToolList() = default;  // never deleted through this interface
};

// A tool whose calls change the running Context, e.g. `activate_skill`, which adds a skill's
// toolboxes and MCP servers. Offered per run by a ContextSource (host code, never a plugin),
// it goes through hooks and permission rules like any tool; it receives the Context mutably
// and may append to system_prompt, toolboxes and mcp_servers. When the toolboxes or MCP
// servers changed, the loop asks the executors for their tools again before the next model
// call, so what was added is callable at once.
class ContextTool {
 public:
  virtual ~ContextTool() = default;
  virtual ToolSpec spec() const = 0;
  // Failures are results with is_error = true; an Error return is reported the same way.
  virtual Result<ToolResult> execute(Context& context, const ToolCall& call) = 0;
};

}  // namespace kernex
