#include "kernex/context.hpp"

namespace kernex {

namespace jf = json_fields;

ContextEntry ContextEntry::tool(ToolResult result) {
  ContextEntry entry{"tool", result.content, {}, {}, {}};
  entry.tool_result = std::move(result);
  return entry;
}

namespace {

// Text-only rendering of the tool parts of an entry, for consumers that cannot carry tool
// calls/results structurally. Plain user/assistant entries render as their content, so
// kernex's output is unchanged when no tools are involved.
std::string render_tool_result(const ContextEntry& e) {
  if (!e.tool_result) return "[Tool result]\n" + e.content;
  const ToolResult& r = *e.tool_result;
  return std::string(r.is_error ? "[Tool error " : "[Tool result ") + r.call_id + " " + r.name +
         "]\n" + r.content;
}

std::string render_content(const ContextEntry& e) {
  if (e.role == "tool") return render_tool_result(e);
  std::string out = e.content;
  for (const ToolCall& call : e.tool_calls) {
    if (!out.empty()) out += '\n';
    out += "[Tool call " + call.id + "] " + call.name + " " + call.arguments.dump();
  }
  return out;
}

// One "[Role]\n..." part of to_prompt_string; kernex renders every non-"user" role as Assistant.
std::string prompt_part(const ContextEntry& e) {
  if (e.role == "user") return "[User]\n" + e.content;
  if (e.role == "tool") return render_tool_result(e);
  return "[Assistant]\n" + render_content(e);
}

}  // namespace

std::string Context::to_prompt_string() const {
  std::vector<std::string> parts;
  if (!system_prompt.empty()) parts.push_back("[System]\n" + system_prompt);
  for (const ContextEntry& e : history) parts.push_back(prompt_part(e));
  parts.push_back("[User]\n" + current_message);
  for (const ContextEntry& e : turn) parts.push_back(prompt_part(e));

  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += "\n\n";
    out += parts[i];
  }
  return out;
}

std::pair<std::string, std::vector<ApiMessage>> Context::to_api_messages() const {
  std::vector<ApiMessage> messages;
  messages.reserve(history.size() + 1 + turn.size());
  for (const ContextEntry& e : history) messages.push_back({e.role, render_content(e)});
  messages.push_back({"user", current_message});
  for (const ContextEntry& e : turn) messages.push_back({e.role, render_content(e)});
  return {system_prompt, std::move(messages)};
}

std::vector<ContextEntry> Context::messages() const {
  std::vector<ContextEntry> out;
  out.reserve(history.size() + 1 + turn.size());
  out.insert(out.end(), history.begin(), history.end());
  out.push_back(ContextEntry::user(current_message));
  out.insert(out.end(), turn.begin(), turn.end());
  return out;
}

void to_json(Json& j, const ContextEntry& v) {
  j = Json{{"role", v.role}, {"content", v.content}};
  if (!v.tool_calls.empty()) j["tool_calls"] = v.tool_calls;
  if (v.tool_result) j["tool_result"] = *v.tool_result;
  if (!v.provider_state.is_null()) j["provider_state"] = v.provider_state;
}

void from_json(const Json& j, ContextEntry& v) {
  jf::expect_object(j);
  ContextEntry out;
  jf::required(j, "role", out.role);
  jf::required(j, "content", out.content);
  jf::defaulted(j, "tool_calls", out.tool_calls);
  jf::defaulted(j, "tool_result", out.tool_result);
  jf::defaulted(j, "provider_state", out.provider_state);
  v = std::move(out);
}

void to_json(Json& j, const ApiMessage& v) { j = Json{{"role", v.role}, {"content", v.content}}; }

void from_json(const Json& j, ApiMessage& v) {
  jf::expect_object(j);
  ApiMessage out;
  jf::required(j, "role", out.role);
  jf::required(j, "content", out.content);
  v = std::move(out);
}

void to_json(Json& j, const Context& v) {
  j = Json{{"system_prompt", v.system_prompt},
           {"history", v.history},
           {"current_message", v.current_message},
           {"mcp_servers", v.mcp_servers}};  // kernex always writes mcp_servers
  if (!v.turn.empty()) j["turn"] = v.turn;
  if (!v.toolboxes.empty()) j["toolboxes"] = v.toolboxes;
  if (v.allowed_tools) j["allowed_tools"] = *v.allowed_tools;
  if (v.model) j["model"] = *v.model;
  if (v.generation != Generation{}) j["generation"] = v.generation;
  if (!v.client_tools.empty()) j["client_tools"] = v.client_tools;
}

void from_json(const Json& j, Context& v) {
  jf::expect_object(j);
  Context out;
  jf::required(j, "system_prompt", out.system_prompt);
  jf::required(j, "history", out.history);
  jf::required(j, "current_message", out.current_message);
  jf::defaulted(j, "turn", out.turn);
  jf::defaulted(j, "mcp_servers", out.mcp_servers);
  jf::defaulted(j, "toolboxes", out.toolboxes);
  jf::defaulted(j, "allowed_tools", out.allowed_tools);
  jf::defaulted(j, "model", out.model);
  jf::defaulted(j, "generation", out.generation);
  jf::defaulted(j, "client_tools", out.client_tools);
  v = std::move(out);
}

}  // namespace kernex
