// What the bench's own servers (fake LLM, bare JSON server, bare proxy) share: an io_context run by
// a few threads, listening on 127.0.0.1 at a port the system picks, handing each accepted socket
// (on a strand of its own, Nagle off) to the server's connection code. Asio in a header:
// bench-only, included by .cpp files that use Asio anyway.
#pragma once

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace kernex::bench {

class LoopbackServer {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  LoopbackServer() = default;
  // Stops the threads, then destroys the pending handlers (and the connections they hold): a
  // server declares this member after whatever its connections touch, so those outlive them.
  ~LoopbackServer() {
    ioc_.stop();
    for (auto& t : threads_) t.join();
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  // Listens, accepts into `on_accept` (called on the socket's strand) and runs `threads` threads.
  void start(std::function<void(Socket)> on_accept, int threads) {
    on_accept_ = std::move(on_accept);
    const boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(boost::asio::socket_base::max_listen_connections);
    port_ = acceptor_.local_endpoint().port();
    accept();
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  unsigned short port() const { return port_; }

 private:
  void accept() {
    acceptor_.async_accept(
        boost::asio::make_strand(ioc_), [this](boost::system::error_code ec, Socket socket) {
          if (ec == boost::asio::error::operation_aborted) return;
          if (ec) {  // out of descriptors, say: try again shortly instead of spinning
            retry_.expires_after(std::chrono::milliseconds(5));
            retry_.async_wait([this](boost::system::error_code e) {
              if (!e) accept();
            });
            return;
          }
          socket.set_option(boost::asio::ip::tcp::no_delay(true));
          on_accept_(std::move(socket));
          accept();
        });
  }

  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_{ioc_};
  boost::asio::steady_timer retry_{ioc_};
  std::function<void(Socket)> on_accept_;
  unsigned short port_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace kernex::bench
