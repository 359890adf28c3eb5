#include "client_exchange.hpp"

#include "kernex/log.hpp"
#include "kernex/mcp/jsonrpc.hpp"

namespace kernex::mcp::detail {
namespace {

constexpr int kMaxPages = 1000;
// Every page's tools together, as JSON: each page is under the line cap, but a hostile server could
// otherwise send a thousand pages of it and have them all kept.
constexpr std::size_t kMaxToolsBytes = 64u << 20;

// Answers what the server asks of us while we wait: ping, and nothing else (kernex offers no
// roots, sampling or elicitation), so a server that asks never stalls.
Result<void> answer_server_request(const ServerLink& link, const jsonrpc::Message& m) {
  if (m.method == "ping") return link.send(jsonrpc::result(m.id, Json::object()));
  return link.send(jsonrpc::error(m.id, jsonrpc::kMethodNotFound, "Method not found: " + m.method));
}

void on_notification(const ServerLink& link, const jsonrpc::Message& m) {
  if (m.method == "notifications/tools/list_changed") {
    link.tools_changed();
  } else if (m.method == "notifications/message") {
    log(LogLevel::Info,
        link.who + " log: " + m.params.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
}

Error error_answer(const ServerLink& link, std::string_view method, const Json& e) {
  std::string text =
      e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
  return Error(ErrorCode::Tool, link.who + " answered " + std::string(method) + " with error " +
                                    e["code"].dump() + ": " + text);
}

// About the bytes `j` takes as JSON text: what its strings and keys hold, a few per other value.
// Walks values, not characters, so a long description costs nothing; messages nest at most
// kMaxJsonDepth levels (parse_line refuses deeper ones), which bounds the recursion.
std::size_t json_bytes(const Json& j) {
  if (j.is_string()) return j.get_ref<const std::string&>().size() + 2;
  if (j.is_object()) {
    std::size_t n = 2;
    for (const auto& [key, value] : j.items()) n += key.size() + 4 + json_bytes(value);
    return n;
  }
  if (j.is_array()) {
    std::size_t n = 2;
    for (const auto& value : j) n += 1 + json_bytes(value);
    return n;
  }
  return 8;
}

// One tools/list entry, or nullopt (logged) for an entry without a name.
std::optional<McpTool> tool_entry(const Json& t, const std::string& who) {
  if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
      t["name"].get<std::string>().empty()) {
    log(LogLevel::Warn, who + ": skipping a tools/list entry without a name: " +
                            t.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200));
    return std::nullopt;
  }
  McpTool tool;
  tool.name = t["name"].get<std::string>();
  if (t.contains("title") && t["title"].is_string()) tool.title = t["title"].get<std::string>();
  if (t.contains("description") && t["description"].is_string())
    tool.description = t["description"].get<std::string>();
  if (t.contains("inputSchema") && t["inputSchema"].is_object())
    tool.input_schema = t["inputSchema"];
  tool.raw = t;
  return tool;
}

}  // namespace

Result<Json> await_response(const ServerLink& link, std::int64_t id, std::string_view method) {
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto line, link.read_line());
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = jsonrpc::parse_line(line);
    if (!parsed) {
      return std::unexpected(
          link.broken("wrote something that is not JSON-RPC on stdout: " + parsed.error().message));
    }
    jsonrpc::Message m = jsonrpc::classify(*parsed);
    switch (m.kind) {
      case jsonrpc::Kind::Invalid:
        return std::unexpected(link.broken("sent an invalid JSON-RPC message: " + m.problem));
      case jsonrpc::Kind::Request:
        KERNEX_RETURN_IF_ERROR(answer_server_request(link, m));
        continue;
      case jsonrpc::Kind::Notification:
        on_notification(link, m);
        continue;
      case jsonrpc::Kind::Response:
        break;
    }
    if (!(m.id.is_number_integer() && m.id.get<std::int64_t>() == id)) {
      log(LogLevel::Debug, link.who + ": ignoring a response to id " + m.id.dump());
      continue;
    }
    if (m.error) return std::unexpected(error_answer(link, method, *m.error));
    return m.result;
  }
}

Result<std::string> negotiated_version(const Json& r) {
  if (!r.is_object() || !r.contains("protocolVersion") || !r["protocolVersion"].is_string()) {
    return fail(ErrorCode::Tool, "answered initialize without a protocolVersion");
  }
  std::string v = r["protocolVersion"].get<std::string>();
  if (!is_supported_protocol_version(v)) {
    return fail(ErrorCode::Tool, "speaks MCP " + v + "; kernex speaks " +
                                     std::string(kProtocolVersions[0]) + " and " +
                                     std::string(kProtocolVersions[1]));
  }
  return v;
}

Result<std::vector<McpTool>> list_all_tools(const ToolsRequest& request, const std::string& who) {
  std::vector<McpTool> out;
  std::size_t kept_bytes = 0;
  std::optional<std::string> cursor;
  for (int page = 0; page < kMaxPages; ++page) {
    std::optional<Json> params;
    if (cursor) params = Json{{"cursor", *cursor}};
    KERNEX_ASSIGN_OR_RETURN(auto result, request(params));
    if (!result.is_object() || !result.contains("tools") || !result["tools"].is_array()) {
      return fail(ErrorCode::Tool, who + " answered tools/list without a \"tools\" array");
    }
    for (const auto& t : result["tools"]) {
      auto tool = tool_entry(t, who);
      if (!tool) continue;
      kept_bytes += json_bytes(tool->raw);
      if (kept_bytes > kMaxToolsBytes) {
        return fail(ErrorCode::Tool, who + " listed more than " +
                                         std::to_string(kMaxToolsBytes >> 20) + " MiB of tools");
      }
      out.push_back(std::move(*tool));
    }
    auto next = result.find("nextCursor");
    if (next == result.end() || !next->is_string() || next->get<std::string>().empty()) return out;
    if (cursor && *cursor == next->get<std::string>()) {
      return fail(ErrorCode::Tool, who + " repeated the tools/list cursor '" + *cursor + "'");
    }
    cursor = next->get<std::string>();
  }
  return fail(ErrorCode::Tool,
              who + " sent more than " + std::to_string(kMaxPages) + " pages of tools");
}

}  // namespace kernex::mcp::detail
