// JSON-RPC 2.0 over newline-delimited JSON, the framing MCP's stdio transport uses. Shared by the
// client (plugins/toolbox-mcp) and the server (`kernex mcp serve`).
#pragma once

#include <array>
#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::mcp {

// The protocol revisions this implementation speaks, newest first. A client offers the first; a
// server answers with the client's version when it is listed here, else the first.
inline constexpr std::string_view kLatestProtocolVersion = "2025-06-18";
inline constexpr std::array<std::string_view, 2> kProtocolVersions = {"2025-06-18", "2025-03-26"};
bool is_supported_protocol_version(std::string_view version);

namespace jsonrpc {

enum RpcError : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
};

Json request(const Json& id, std::string_view method,
             const std::optional<Json>& params = std::nullopt);
Json notification(std::string_view method, const std::optional<Json>& params = std::nullopt);
Json result(const Json& id, Json result);
Json error(const Json& id, int code, std::string_view message,
           const std::optional<Json>& data = std::nullopt);

// One line of the stdio transport: compact JSON (invalid UTF-8 replaced, so it always serialises)
// followed by '\n'. JSON escapes every newline inside strings, so a message is always one line.
std::string frame(const Json& message);

enum class Kind { Request, Notification, Response, Invalid };

struct Message {
  Kind kind = Kind::Invalid;
  Json id;                    // requests and responses
  std::string method;         // requests and notifications
  Json params;                // null when absent
  Json result;                // successful responses
  std::optional<Json> error;  // error responses: {code, message, data?}
  std::string problem;        // why it is Invalid
};

// Classifies a parsed JSON value per JSON-RPC 2.0 (ids are strings or integers).
Message classify(const Json& value);
// Parses one line; ErrorCode::Parse naming the problem for text that is not a JSON value.
Result<Json> parse_line(std::string_view line);

// The longest line `kernex mcp serve` reads by default: 4 MiB holds any tool call's arguments,
// and parsing it stays within tens of MB.
inline constexpr std::size_t kMaxServerLineBytes = 4u << 20;

enum class LineRead { Line, TooLong, End };
// Reads the next '\n'-terminated line (the '\n' dropped; a last line without one counts) into
// `line`. A line longer than `max_bytes` is read to its end and dropped without being buffered
// (TooLong, `line` empty), so the next line is read normally. End: end of input, nothing read.
LineRead read_line(std::istream& in, std::string& line, std::size_t max_bytes);

}  // namespace jsonrpc
}  // namespace kernex::mcp
