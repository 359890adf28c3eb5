// The field tables of a skill manifest (kernex/config_fields.hpp): SKILL.md frontmatter (YAML or
// kernex TOML), its toolbox and MCP server entries, and its permissions. The doc of a field is
// what a message about a wrong value says it should be.
#pragma once

#include <array>
#include <string_view>

#include "kernex/config_fields.hpp"

namespace kernex::skills::detail::schema {

using config::Field;
using config::Section;
inline constexpr auto String = config::FieldType::String;
inline constexpr auto Bool = config::FieldType::Bool;
inline constexpr auto List = config::FieldType::List;
inline constexpr auto Table = config::FieldType::Table;
inline constexpr auto Options = config::FieldType::Options;

// `mcp-NAME` stands for kernex's YAML form of a server, any key starting with "mcp-".
inline constexpr std::string_view kMcpPrefixKey = "mcp-NAME";

inline constexpr std::array kFrontmatterFields{
    Field{"name", String, "the skill's name", "required"},
    Field{"description", String, "what the skill does and when to use it", "required"},
    Field{"license", String, "the licence name or file"},
    Field{"compatibility", String, "environment requirements"},
    Field{"metadata", Options, "free-form; metadata.<vendor>.requires.bins lists programs"},
    Field{"allowed-tools", List, "tool names, or one space-separated string", "every tool"},
    Field{"trigger", List, "trigger keywords, or one '|'-separated string", "[]"},
    Field{"triggers", List, "trigger keywords, or one '|'-separated string", "[]"},
    Field{"requires", List, "programs that must be on PATH", "[]"},
    Field{"homepage", String, "a URL"},
    Field{"version", String, "the skill's version"},
    Field{"model", String, "the model to use with this skill"},
    Field{"lazy", Bool, "load the instructions only when the skill is activated", "false"},
    Field{"mcp", Table, "server NAME: {command, args, env}"},
    Field{"toolbox", Table, "toolbox NAME: {description, command, ...}"},
    Field{"permissions", Table, "files, network, env, commands"},
    Field{kMcpPrefixKey, String, "the server command line: COMMAND ARG..."},
};
inline constexpr Section kFrontmatter{"", kFrontmatterFields};

inline constexpr std::array kToolboxFields{
    Field{"description", String, "what the tool does, shown to the model", "required"},
    Field{"command", String, "the program to run", "required"},
    Field{"args", List, "program arguments", "[]"},
    Field{"env", Options, "environment variables set for the program", "{}"},
    Field{"network", Bool, "whether the program may use the network", "false"},
    Field{"parameters", Options, "a JSON Schema object for the tool's arguments"},
    Field{"env_passthrough", List, "names of environment variables passed from the parent", "[]"},
    Field{"search_hints", List, "keywords", "[]"},
};
inline constexpr Section kToolbox{"toolbox.NAME", kToolboxFields};

inline constexpr std::array kMcpFields{
    Field{"command", String, "the program that runs the server", "required"},
    Field{"args", List, "program arguments", "[]"},
    Field{"env", Options, "environment variables set for the server", "{}"},
};
inline constexpr Section kMcp{"mcp.NAME", kMcpFields};

inline constexpr std::array kPermissionFields{
    Field{"files", List, "\"read:PATH\", \"write:PATH\" or \"!PATH\"", "[]"},
    Field{"network", List, "host names", "[]"},
    Field{"env", List, "environment variable names", "[]"},
    Field{"commands", List, "program names or absolute paths", "[]"},
};
inline constexpr Section kPermissions{"permissions", kPermissionFields};

// mcp.json and toolbox.json beside SKILL.md: a JSON object holding the entries.
inline constexpr Field kMcpJsonDocument{"", Table, "a JSON object with \"mcpServers\""};
inline constexpr Field kToolboxJsonDocument{"", Table, "a JSON object with \"toolboxes\""};

// The field `key` of `section`; the key is one of its own (a bug otherwise, caught by tests).
inline const Field& field(const Section& section, std::string_view key) {
  return *section.find(key);
}

}  // namespace kernex::skills::detail::schema
