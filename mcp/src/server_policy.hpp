// The sandbox policy one MCP server runs under.
#pragma once

#include "kernex/mcp/client.hpp"
#include "kernex/sandbox/policy.hpp"

namespace kernex::mcp::detail {

// Workspace read-write (through its overlay in overlay mode); the declaring skill's folder readable
// and executable, kept read-only; declared env set, passthrough names copied; network only on
// declared ports; the server's command (and its `#!/usr/bin/env X` interpreter) allowed; node's
// global module directory readable when node lives outside the system paths.
Result<sandbox::Policy> build_server_policy(const McpServer& server, const ServerSandbox& sandbox);

}  // namespace kernex::mcp::detail
