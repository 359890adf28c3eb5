// Tool definitions and tool-call records shared by providers, toolboxes, hooks and memory.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/json.hpp"

namespace kernex {

// What a model sees of a tool.
struct ToolSpec {
  std::string name;
  std::string description;
  Json parameters = Json{{"type", "object"}};  // JSON Schema
  std::vector<std::string> search_hints;
  bool operator==(const ToolSpec&) const = default;
};

// A model's request to run a tool.
struct ToolCall {
  std::string id;
  std::string name;
  Json arguments = Json::object();
  bool operator==(const ToolCall&) const = default;
};

// What went back to the model for one ToolCall, and what code that called the tool receives.
struct ToolResult {
  std::string call_id;
  std::string name;
  std::string content;  // the text the model sees
  bool is_error = false;
  // The tool's structured result beside the text (MCP structuredContent, a built-in tool's JSON),
  // null when it has none. Code that called the tool gets this (a dict or list) instead of the
  // text; hooks that rewrite the content rewrite it too (hook-pii tokenises its strings).
  Json structured = {};
  bool operator==(const ToolResult&) const = default;
};

// A script tool (kernex `Toolbox`): JSON arguments on stdin, stdout is the result, exit 0 is
// success.
struct Toolbox {
  std::string name;
  std::string description;
  Json parameters = Json{{"type", "object"}};
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  bool network = false;
  std::vector<std::string> env_passthrough;
  std::vector<std::string> allowed_commands;
  std::vector<std::string> search_hints;
  // The folder of the skill that declared it (readable in the sandbox, never executable or
  // writable); empty when it did not come from a skill. The initializer keeps aggregate
  // initialisations that stop before it free of -Wmissing-field-initializers.
  std::string source_dir = {};

  ToolSpec spec() const { return ToolSpec{name, description, parameters, search_hints}; }
};

struct McpServer {
  std::string name;
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::string source_dir = {};  // the declaring skill's folder, or empty
  // What the declaring skill's permissions grant the server's sandbox, as for a Toolbox: TCP
  // connect (to the MCP plugin's network_ports), variables passed through from the kernel's
  // environment, and programs it may start besides its own command.
  bool network = false;
  std::vector<std::string> env_passthrough = {};
  std::vector<std::string> allowed_commands = {};
};

// kernex semantics: empty list allows all; an entry with '/' must equal the command exactly,
// otherwise it must equal the command's basename (text after the last '/'). Case-sensitive.
bool command_matches_allowlist(const std::vector<std::string>& allowed, std::string_view command);

// JSON forms follow kernex's serde rules (required / defaulted / skipped-if-empty fields).
// from_json throws nlohmann::json::exception on a missing required field or a wrong type.
void to_json(Json& j, const ToolSpec& v);
void from_json(const Json& j, ToolSpec& v);
void to_json(Json& j, const ToolCall& v);
void from_json(const Json& j, ToolCall& v);
void to_json(Json& j, const ToolResult& v);
void from_json(const Json& j, ToolResult& v);
void to_json(Json& j, const Toolbox& v);
void from_json(const Json& j, Toolbox& v);
void to_json(Json& j, const McpServer& v);
void from_json(const Json& j, McpServer& v);

}  // namespace kernex
