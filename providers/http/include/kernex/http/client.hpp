// A small blocking HTTP/1.1 client for provider plugins. Beast, Asio and OpenSSL stay inside
// client.cpp: this header is all a provider sees (Beast translation units are slow to build).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Url {
  std::string scheme;  // "http" | "https"
  std::string host;    // without brackets for IPv6
  std::string port;    // always set ("80"/"443" by default)
  std::string target;  // path + query, at least "/"

  // Only http:// and https:// URLs with a host; userinfo and fragments are refused.
  static Result<Url> parse(std::string_view text);
  bool is_loopback() const;       // localhost, 127.0.0.0/8, ::1
  std::string authority() const;  // host:port, IPv6 bracketed
};

struct Request {
  std::string method = "POST";
  std::string url;
  Headers headers;  // Host, Content-Length, User-Agent and Connection are set by the client
  std::string body;
  // Fired: the request is aborted at once (connect, TLS, write, read or a retry wait) and the
  // call returns ErrorCode::Cancelled; nothing is retried after it. Default: never stops.
  std::stop_token stop;
};

struct Response {
  int status = 0;
  Headers headers;
  std::string body;  // empty for a streamed 2xx body (it went to the handler)
  std::optional<std::string> header(std::string_view name) const;  // case-insensitive
};

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{10'000};
  // Longest wait for the next bytes of a response (streams idle this long fail).
  std::chrono::milliseconds read_timeout{120'000};
  // Whole request, retries and waits included (kernex: 120 s).
  std::chrono::milliseconds total_timeout{120'000};
  std::size_t max_response_bytes = 32u << 20;
  int max_retries = 3;                                // attempts = 1 + max_retries
  std::chrono::milliseconds backoff_base{1000};       // waits base, 2×base, 4×base
  std::chrono::milliseconds retry_after_cap{30'000};  // Retry-After is honoured up to this
  // "http://[user:pass@]host:port". Unset: HTTPS_PROXY / HTTP_PROXY (either case) from the
  // environment, skipped for hosts matched by NO_PROXY and for loopback hosts. Empty: none.
  std::optional<std::string> proxy;
  std::optional<std::string> no_proxy;  // unset: NO_PROXY / no_proxy
  std::string user_agent = "kernex/0.1";
  // Name servers asked for host names, "address[:port],..." (IPv6 bracketed when a port
  // follows); empty: /etc/resolv.conf's. /etc/hosts is read first either way.
  std::string dns_servers;
};

// Receives a 2xx body as it arrives; returning false aborts the request.
using ChunkHandler = std::function<bool(std::string_view chunk)>;

// What the client observed (for tests and benchmarks).
struct ClientStats {
  std::size_t connections_opened = 0;
  std::size_t attempts = 0;
};

// One client per provider instance. Calls are serialised; connections are kept alive per
// scheme/host/port and reused. Errors are ErrorCode::Provider values naming the host, never
// the request headers (which carry keys).
class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends and buffers the response. 429, 5xx and network failures are retried with backoff;
  // any other status is returned as a Response (the caller decides what is an error).
  Result<Response> send(const Request& request);

  // Like send, but a 2xx body goes to `on_chunk` as it arrives. Retries happen only before
  // the first body byte reached the handler; a failure after that is returned as is. A
  // non-2xx response is returned with its (capped) body, on_chunk never called.
  Result<Response> stream(const Request& request, const ChunkHandler& on_chunk);

  const ClientOptions& options() const;
  ClientStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Seconds to wait from a Retry-After value (integer seconds only; HTTP dates are ignored).
std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value);

// Whether `host` is excluded from proxying by a NO_PROXY list ("*", "host", ".domain", "domain").
bool no_proxy_matches(std::string_view no_proxy, std::string_view host);

}  // namespace kernex::http
