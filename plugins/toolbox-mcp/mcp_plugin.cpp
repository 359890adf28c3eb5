// toolbox-mcp: the tools of the Context's MCP servers, each server run inside the sandbox
// (kernex::mcp::McpToolbox). The plugin object lives as long as the Kernel, so servers started
// in one run are reused by the next and shut down with the kernel.
#include "kernex/mcp/toolbox.hpp"
#include "kernex/plugin.hpp"

namespace {

kernex::Result<std::shared_ptr<kernex::ToolExecutor>> make_mcp_toolbox(const kernex::Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto parsed, kernex::mcp::ToolboxConfig::from_json(config));
  return std::make_shared<kernex::mcp::McpToolbox>(std::move(parsed));
}

}  // namespace

KERNEX_PLUGIN(Toolbox, "mcp", "0.1.0", "Tools of MCP servers, each run inside the sandbox",
              make_mcp_toolbox)
