#include "kernex/mcp/server.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <istream>
#include <ostream>

#include "kernex/mcp/jsonrpc.hpp"

namespace kernex::mcp {

StdioServer::StdioServer(ServerInfo info, ServerHandlers handlers)
    : info_(std::move(info)), handlers_(std::move(handlers)) {}

namespace {

Json tool_json(const ToolSpec& spec) {
  Json schema = spec.parameters.is_object() ? spec.parameters : Json{{"type", "object"}};
  if (!schema.contains("type")) schema["type"] = "object";
  return Json{
      {"name", spec.name}, {"description", spec.description}, {"inputSchema", std::move(schema)}};
}

}  // namespace

Json StdioServer::call(const Json& id, const Json& params, std::stop_token stop) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
    return jsonrpc::error(id, jsonrpc::kInvalidParams,
                          "tools/call needs params {\"name\": string, \"arguments\": object}");
  }
  const std::string name = params["name"].get<std::string>();
  Json arguments = Json::object();
  if (auto a = params.find("arguments"); a != params.end() && !a->is_null()) {
    if (!a->is_object())
      return jsonrpc::error(id, jsonrpc::kInvalidParams,
                            "tools/call: \"arguments\" must be an object");
    arguments = *a;
  }
  auto tools = handlers_.list_tools();
  if (!tools) return jsonrpc::error(id, jsonrpc::kInternalError, tools.error().describe());
  const bool known =
      std::any_of(tools->begin(), tools->end(), [&](const ToolSpec& t) { return t.name == name; });
  if (!known) return jsonrpc::error(id, jsonrpc::kInvalidParams, "Unknown tool: " + name);
  auto result = handlers_.call_tool_stoppable ? handlers_.call_tool_stoppable(name, arguments, stop)
                                              : handlers_.call_tool(name, arguments);
  const std::string text = result ? result->content : result.error().describe();
  const bool is_error = result ? result->is_error : true;
  return jsonrpc::result(id,
                         Json{{"content", Json::array({Json{{"type", "text"}, {"text", text}}})},
                              {"isError", is_error}});
}

std::optional<Json> StdioServer::handle(const Json& message, std::stop_token stop) {
  if (message.is_array()) {
    // 2025-06-18 removed JSON-RPC batching.
    return jsonrpc::error(nullptr, jsonrpc::kInvalidRequest, "batches are not supported");
  }
  jsonrpc::Message m = jsonrpc::classify(message);
  switch (m.kind) {
    case jsonrpc::Kind::Invalid: {
      Json id = nullptr;
      if (message.is_object() && message.contains("id") &&
          (message["id"].is_string() || message["id"].is_number_integer())) {
        id = message["id"];
      }
      return jsonrpc::error(id, jsonrpc::kInvalidRequest, "Invalid request: " + m.problem);
    }
    case jsonrpc::Kind::Response:
      return std::nullopt;  // we send no requests
    case jsonrpc::Kind::Notification:
      if (m.method == "notifications/initialized") initialized_ = true;
      return std::nullopt;
    case jsonrpc::Kind::Request:
      break;
  }
  const Json params = m.params.is_null() ? Json::object() : m.params;
  if (m.method == "initialize") {
    if (!params.is_object() || !params.contains("protocolVersion") ||
        !params["protocolVersion"].is_string()) {
      return jsonrpc::error(m.id, jsonrpc::kInvalidParams,
                            "initialize needs params.protocolVersion (a string)");
    }
    const std::string asked = params["protocolVersion"].get<std::string>();
    const std::string version =
        is_supported_protocol_version(asked) ? asked : std::string(kLatestProtocolVersion);
    Json result = {{"protocolVersion", version},
                   {"capabilities", {{"tools", {{"listChanged", false}}}}},
                   {"serverInfo", {{"name", info_.name}, {"version", info_.version}}}};
    if (!info_.instructions.empty()) result["instructions"] = info_.instructions;
    return jsonrpc::result(m.id, std::move(result));
  }
  if (m.method == "ping") return jsonrpc::result(m.id, Json::object());
  if (m.method == "tools/list") {
    if (!params.is_object())
      return jsonrpc::error(m.id, jsonrpc::kInvalidParams, "tools/list: params must be an object");
    if (auto c = params.find("cursor"); c != params.end() && !c->is_null()) {
      // Everything fits on one page, so no cursor we hand out exists.
      return jsonrpc::error(m.id, jsonrpc::kInvalidParams, "tools/list: unknown cursor");
    }
    auto tools = handlers_.list_tools();
    if (!tools) return jsonrpc::error(m.id, jsonrpc::kInternalError, tools.error().describe());
    Json list = Json::array();
    for (const auto& t : *tools) list.push_back(tool_json(t));
    return jsonrpc::result(m.id, Json{{"tools", std::move(list)}});
  }
  if (m.method == "tools/call") return call(m.id, params, stop);
  return jsonrpc::error(m.id, jsonrpc::kMethodNotFound, "Method not found: " + m.method);
}

std::optional<Json> StdioServer::handle_line(std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return std::nullopt;
  auto parsed = jsonrpc::parse_line(line);
  if (!parsed)
    return jsonrpc::error(nullptr, jsonrpc::kParseError, "Parse error: " + parsed.error().message);
  return handle(*parsed);
}

namespace {

// The requests read but not yet answered, in order, and the stop of each by id (a cancel may name
// one still queued). The reader thread fills it; the worker thread empties it.
class RequestQueue {
 public:
  struct Item {
    Json message;
    std::string key;  // the id as JSON text ("" for a notification)
    std::stop_source stop;
  };

  // Blocks while kMaxWaiting requests wait: a client that floods requests and never reads the
  // answers then finds stdin full (the server stops reading), instead of the queue growing.
  void push(Json message) {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return items_.size() < kMaxWaiting; });
    Item item{std::move(message), "", {}};
    if (item.message.is_object() && item.message.contains("id") && item.message.contains("method"))
      item.key = item.message["id"].dump();
    if (!item.key.empty()) live_[item.key] = item.stop;
    items_.push_back(std::move(item));
    ready_.notify_one();
  }
  // A client's notifications/cancelled: the named request, running or queued, is stopped.
  void cancel(const Json& request_id) {
    std::lock_guard lock(mutex_);
    if (auto it = live_.find(request_id.dump()); it != live_.end()) it->second.request_stop();
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    ready_.notify_one();
  }
  // The next request, or nothing once closed and drained.
  std::optional<Item> pop() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    Item item = std::move(items_.front());
    items_.pop_front();
    room_.notify_one();
    return item;
  }
  void done(const Item& item) {
    std::lock_guard lock(mutex_);
    if (!item.key.empty()) live_.erase(item.key);
  }

 private:
  std::mutex mutex_;
  static constexpr std::size_t kMaxWaiting = 16;
  std::condition_variable ready_;
  std::condition_variable room_;
  std::deque<Item> items_;
  std::map<std::string, std::stop_source> live_;
  bool closed_ = false;
};

bool is_cancel(const Json& message) {
  return message.is_object() && !message.contains("id") && message.contains("method") &&
         message["method"] == "notifications/cancelled" && message.contains("params") &&
         message["params"].is_object() && message["params"].contains("requestId");
}

}  // namespace

void StdioServer::serve(std::istream& in, std::ostream& out, std::size_t max_line_bytes) {
  // The reader thread must not flush `out` behind the worker's back: a tied stream (std::cin is
  // tied to std::cout) flushes it before every read, outside out_mutex, which raced the worker's
  // writes and sent answers twice. Untied while serving, as it was after.
  std::ostream* const tied = in.tie(nullptr);
  struct Retie {
    std::istream& in;
    std::ostream* tied;
    ~Retie() { in.tie(tied); }
  } retie{in, tied};
  std::mutex out_mutex;
  auto send = [&](const Json& response) {
    std::lock_guard lock(out_mutex);
    out << jsonrpc::frame(response);
    out.flush();
  };
  RequestQueue queue;
  std::jthread worker([&] {
    while (auto item = queue.pop()) {
      std::optional<Json> response;
      if (!item->stop.stop_requested()) response = handle(item->message, item->stop.get_token());
      queue.done(*item);
      // A cancelled request is not answered, whatever it came to.
      if (response && !item->stop.stop_requested()) send(*response);
    }
  });
  std::string line;
  for (;;) {
    const auto read = jsonrpc::read_line(in, line, max_line_bytes);
    if (read == jsonrpc::LineRead::End) break;
    // An over-long line was skipped unread: its id is unknown, so the error carries none.
    if (read == jsonrpc::LineRead::TooLong) {
      send(jsonrpc::error(nullptr, jsonrpc::kInvalidRequest,
                          "Invalid request: a line longer than " + std::to_string(max_line_bytes) +
                              " bytes was skipped"));
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = jsonrpc::parse_line(line);
    if (!parsed) {
      send(jsonrpc::error(nullptr, jsonrpc::kParseError, "Parse error: " + parsed.error().message));
      continue;
    }
    if (is_cancel(*parsed)) {
      queue.cancel((*parsed)["params"]["requestId"]);
      continue;
    }
    queue.push(std::move(*parsed));
  }
  queue.close();
}

}  // namespace kernex::mcp
