// The wire: Boost.Beast over Asio on a fixed pool of threads, one strand per connection. Reads
// with caps and deadlines, hands each request to the router, writes JSON replies or streams a
// run's events as SSE (chunked), with heartbeats. Asio stays inside http_server.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "http_types.hpp"
#include "kernex/error.hpp"

namespace kernex::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  unsigned threads = 1;
  std::size_t max_body_bytes = 1u << 20;
  std::size_t max_header_bytes = 16u << 10;
  std::size_t max_connections = 20'000;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds write_timeout{30'000};
  std::chrono::seconds heartbeat{15};
  // A follower's buffer: the most rendered text it holds (one event larger than this is sent
  // alone), and how long one slice of it may wait for a client that does not read.
  std::size_t stream_buffer_bytes = 256u << 10;
  std::chrono::milliseconds slow_timeout{30'000};
};

// What the followers cost, for /metrics.
struct StreamStats {
  std::uint64_t buffered_bytes = 0;       // held by followers now
  std::uint64_t buffered_bytes_peak = 0;  // the most ever held at once
  std::uint64_t followers = 0;            // open streams
  std::uint64_t slow_disconnects = 0;     // followers dropped for not reading
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  // Called on the server's threads; the request's route decides whether it may block.
  HttpServer(HttpOptions options, Handler handler);
  ~HttpServer();

  // Binds and listens; the port actually bound (options.port 0: a free one).
  Result<std::uint16_t> listen();
  // Runs the threads until stop(); calls `on_signal` (on a server thread) for SIGTERM/SIGINT.
  void run(std::function<void(int)> on_signal);
  // Every `period` on a server thread, until stop().
  void every(std::chrono::milliseconds period, std::function<void()> task);
  void stop_accepting();
  // Ends run() once open connections closed or `linger` passed.
  void stop(std::chrono::milliseconds linger);
  std::size_t connections() const;
  StreamStats stream_stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kernex::server
