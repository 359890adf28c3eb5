#include "kernex/tool.hpp"

#include <algorithm>

namespace kernex {

namespace jf = json_fields;

bool command_matches_allowlist(const std::vector<std::string>& allowed, std::string_view command) {
  if (allowed.empty()) return true;  // nothing declared: unrestricted
  const auto slash = command.rfind('/');
  const std::string_view basename =
      slash == std::string_view::npos ? command : command.substr(slash + 1);
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& entry) {
    // A path entry pins the exact executable; a bare name accepts it from any directory.
    return entry.find('/') != std::string::npos ? entry == command : entry == basename;
  });
}

void to_json(Json& j, const ToolSpec& v) {
  j = Json{{"name", v.name}, {"description", v.description}, {"parameters", v.parameters}};
  if (!v.search_hints.empty()) j["search_hints"] = v.search_hints;
}

void from_json(const Json& j, ToolSpec& v) {
  jf::expect_object(j);
  ToolSpec out;
  jf::required(j, "name", out.name);
  jf::defaulted(j, "description", out.description);
  jf::defaulted(j, "parameters", out.parameters);
  jf::defaulted(j, "search_hints", out.search_hints);
  v = std::move(out);
}

void to_json(Json& j, const ToolCall& v) {
  j = Json{{"id", v.id}, {"name", v.name}, {"arguments", v.arguments}};
}

void from_json(const Json& j, ToolCall& v) {
  jf::expect_object(j);
  ToolCall out;
  jf::required(j, "id", out.id);
  jf::required(j, "name", out.name);
  jf::defaulted(j, "arguments", out.arguments);
  v = std::move(out);
}

void to_json(Json& j, const ToolResult& v) {
  j = Json{
      {"call_id", v.call_id}, {"name", v.name}, {"content", v.content}, {"is_error", v.is_error}};
  if (!v.structured.is_null()) j["structured"] = v.structured;
}

void from_json(const Json& j, ToolResult& v) {
  jf::expect_object(j);
  ToolResult out;
  jf::required(j, "call_id", out.call_id);
  jf::defaulted(j, "name", out.name);
  jf::required(j, "content", out.content);
  jf::defaulted(j, "is_error", out.is_error);
  if (auto it = j.find("structured"); it != j.end()) out.structured = *it;
  v = std::move(out);
}

void to_json(Json& j, const Toolbox& v) {
  j = Json{{"name", v.name},
           {"description", v.description},
           {"parameters", v.parameters},
           {"command", v.command},
           {"args", v.args},
           {"network", v.network}};
  if (!v.env.empty()) j["env"] = v.env;
  if (!v.env_passthrough.empty()) j["env_passthrough"] = v.env_passthrough;
  if (!v.allowed_commands.empty()) j["allowed_commands"] = v.allowed_commands;
  if (!v.search_hints.empty()) j["search_hints"] = v.search_hints;
  if (!v.source_dir.empty()) j["source_dir"] = v.source_dir;
}

void from_json(const Json& j, Toolbox& v) {
  jf::expect_object(j);
  Toolbox out;
  jf::required(j, "name", out.name);
  jf::required(j, "description", out.description);
  jf::defaulted(j, "parameters", out.parameters);
  jf::required(j, "command", out.command);
  jf::defaulted(j, "args", out.args);
  jf::defaulted(j, "env", out.env);
  jf::defaulted(j, "network", out.network);
  jf::defaulted(j, "env_passthrough", out.env_passthrough);
  jf::defaulted(j, "allowed_commands", out.allowed_commands);
  jf::defaulted(j, "search_hints", out.search_hints);
  jf::defaulted(j, "source_dir", out.source_dir);
  v = std::move(out);
}

void to_json(Json& j, const McpServer& v) {
  j = Json{{"name", v.name}, {"command", v.command}, {"args", v.args}};
  if (!v.env.empty()) j["env"] = v.env;
  if (!v.source_dir.empty()) j["source_dir"] = v.source_dir;
  if (v.network) j["network"] = true;
  if (!v.env_passthrough.empty()) j["env_passthrough"] = v.env_passthrough;
  if (!v.allowed_commands.empty()) j["allowed_commands"] = v.allowed_commands;
}

void from_json(const Json& j, McpServer& v) {
  jf::expect_object(j);
  McpServer out;
  jf::required(j, "name", out.name);
  jf::required(j, "command", out.command);
  jf::required(j, "args", out.args);  // kernex has no serde default here
  jf::defaulted(j, "env", out.env);
  jf::defaulted(j, "source_dir", out.source_dir);
  jf::defaulted(j, "network", out.network);
  jf::defaulted(j, "env_passthrough", out.env_passthrough);
  jf::defaulted(j, "allowed_commands", out.allowed_commands);
  v = std::move(out);
}

}  // namespace kernex
