// Tool executors: a toolbox plugin offers tools for a Context and runs calls to them.
#pragma once

#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/tool.hpp"

namespace kernex {

class ToolExecutor {
 public:
  virtual ~ToolExecutor() = default;
  // Tools this executor can run for `context` (e.g. the context's script toolboxes, or the
  // tools of its MCP servers). Called once per run; names must be unique across executors.
  virtual Result<std::vector<ToolSpec>> list_tools(const Context& context) = 0;
  // Run one call. Tool failures are results with is_error = true; an Error return means the
  // executor itself failed (it is reported to the model as an error result as well).
  virtual Result<ToolResult> execute(const Context& context, const ToolCall& call) = 0;
};

}  // namespace kernex
