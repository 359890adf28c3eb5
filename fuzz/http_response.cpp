// The HTTP client's response parsing (status line, headers, chunked and sized bodies, the limits)
// on whatever bytes a server sends: the input is the whole response, sent through a loopback
// socket, read once whole (send) and once streamed (stream), as providers do.
#include <chrono>

#include "fuzz.hpp"
#include "kernex/http/client.hpp"
#include "loopback_server.hpp"

KERNEX_FUZZ_TARGET(http_response) {
  static kernex::fuzz::LoopbackServer server;
  static kernex::http::Client client([] {
    kernex::http::ClientOptions options;
    options.connect_timeout = std::chrono::seconds(2);
    options.read_timeout = std::chrono::seconds(2);
    options.total_timeout = std::chrono::seconds(5);
    options.max_retries = 0;
    options.max_response_bytes = 1u << 20;
    options.proxy = "";
    return options;
  }());
  server.set_reply(std::string(kernex::fuzz::text(data, size)));
  kernex::http::Request request;
  request.url = server.url() + "/v1/x";
  request.body = "{}";
  if (auto r = client.send(request)) {
    (void)r->header("content-type");
  }
  std::size_t streamed = 0;
  (void)client.stream(request, [&](std::string_view chunk) {
    streamed += chunk.size();
    return true;
  });
  return 0;
}
