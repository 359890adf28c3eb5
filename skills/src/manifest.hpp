// Reading manifest fields from a parsed document into the Skill model, with a Diagnostic for
// every wrong or missing value.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kernex/skills/skill.hpp"
#include "node.hpp"

namespace kernex::skills::detail {

// A toolbox or MCP server with the place it was declared, so that the load-time checks can
// point at it.
template <class T>
struct Declared {
  T value;
  std::filesystem::path file;
  int line = 0;
  std::string field;  // "toolbox.lint", "mcp.github", "toolboxes.lint" (toolbox.json)
};

struct Manifest {
  std::vector<Declared<Toolbox>> toolboxes;
  std::vector<Declared<McpServer>> mcp_servers;
  int permissions_line = 0;
};

// Frontmatter (YAML or TOML) into `skill` (all fields but toolboxes and MCP servers, which are
// returned in the Manifest for merging and checking).
Manifest read_frontmatter(const Node& root, const std::filesystem::path& file, Skill& skill,
                          std::vector<Diagnostic>& diagnostics);
// mcp.json: {"mcpServers": {name: {command, args, env}}}.
std::vector<Declared<McpServer>> read_mcp_json(const Node& root, const std::filesystem::path& file,
                                               std::vector<Diagnostic>& diagnostics);
// toolbox.json: {"toolboxes": {name: {description, command, args, env, network, parameters}}}.
std::vector<Declared<Toolbox>> read_toolbox_json(const Node& root,
                                                 const std::filesystem::path& file,
                                                 std::vector<Diagnostic>& diagnostics);

}  // namespace kernex::skills::detail
