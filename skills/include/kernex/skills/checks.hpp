// Load-time checks of what a skill asks to run. The sandbox enforces the same rules again at
// spawn time; failing early gives the skill author the reason instead of a refused tool call.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernex/skills/skill.hpp"
#include "kernex/tool.hpp"

namespace kernex::skills {

// A finding about one toolbox or MCP server: `field` is relative to the entry ("command",
// "env.PATH", ...).
struct Problem {
  std::string field;
  std::string message;
};

// Environment names that change what a child executes or loads (dynamic linker, interpreter
// start-up hooks, PATH, git/shell hooks). A skill may neither set nor pass them through.
// ASCII case-insensitive.
bool is_hijacking_env_name(std::string_view name);

// kernex token rule: non-empty, only alphanumerics and "-_./@", no ".." segment; an absolute
// path must be under /usr/, /opt/, /bin/, /sbin/ (or /Applications/); a relative path with '/'
// is refused.
bool is_safe_command_token(std::string_view command);
// A safe token that is an absolute path or one of the MCP runners npx uvx uv node python
// python3 deno bun docker.
bool is_safe_mcp_command(std::string_view command);
// `[A-Za-z_][A-Za-z0-9_]*`.
bool is_valid_env_name(std::string_view name);

// Toolbox as declared (before the permission-derived fields are filled in).
std::vector<Problem> check_toolbox(const Toolbox& toolbox, const Permissions& permissions);
std::vector<Problem> check_mcp_server(const McpServer& server, const Permissions& permissions);
// The skill's own declarations (e.g. permissions.env naming LD_PRELOAD).
std::vector<Problem> check_permissions(const Permissions& permissions);

// Fills the fields kernex derives from the skill's permissions: allowed_commands = commands,
// env_passthrough = permissions.env unless the toolbox named its own subset, network |= any
// network permission.
void apply_permissions(Toolbox& toolbox, const Permissions& permissions);
// The same for an MCP server the skill declares, so it runs under the skill's permissions:
// allowed_commands = commands, env_passthrough = env, network = any network permission.
void apply_permissions(McpServer& server, const Permissions& permissions);

}  // namespace kernex::skills
