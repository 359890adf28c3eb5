// The server's view of HTTP, free of Beast: the router maps an HttpRequest to an HttpReply, and
// http_server.cpp does the wire. A reply either carries its body, or names a run whose events
// are streamed (SSE) or whose end completes the body.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api_error.hpp"
#include "kernex/json.hpp"
#include "run_state.hpp"

namespace kernex::server {

struct HttpRequest {
  std::string method;
  std::string path;      // decoded, without the query
  std::string raw_path;  // as sent: split into segments before decoding (ids may hold "%2F")
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string request_id;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string tenant;  // for the log line

  // Streamed: the run's events after `stream_after`, live, until its end.
  std::shared_ptr<RunState> stream;
  std::uint64_t stream_after = 0;
  // One event as SSE text (native: event/id/data; OpenAI: chat.completion.chunk data lines),
  // written after `stream_head`, then `stream_tail` once the run ended.
  std::function<std::string(const RunEvent&)> render_event;
  // Non-empty when render_event depends on the event alone (native SSE): followers of one run
  // then share the rendering of an event too large for their buffers.
  std::string render_key;
  std::string stream_head;
  std::string stream_tail;
  // Waited: once `wait` ended, `complete` makes the reply.
  std::shared_ptr<RunState> wait;
  std::function<HttpReply(const RunState&)> complete;
  // Streamed or waited: a client that closes its connection before the run's end cancels the
  // run (serve.openai.on_disconnect: cancel), rather than leaving it running for no one.
  bool cancel_on_disconnect = false;

  static HttpReply json(int status, const Json& body);
  static HttpReply error(const ApiError& e);
};

// %XX sequences decoded (http_server.cpp); `plus_is_space` for query strings.
std::string percent_decode(std::string_view in, bool plus_is_space);

}  // namespace kernex::server
