// A loopback HTTP server for harnesses that drive the real HTTP client (and the providers on top
// of it): every connection gets the bytes set for the current input, then is closed. One thread,
// one connection at a time, so millions of inputs leave no threads or sockets behind.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace kernex::fuzz {

class LoopbackServer {
 public:
  LoopbackServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("loopback server: cannot listen");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~LoopbackServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // What every following connection receives (a whole raw HTTP response, or anything else).
  void set_reply(std::string bytes) {
    std::lock_guard lock(mutex_);
    reply_ = std::move(bytes);
  }

 private:
  void run() {
    while (!stop_) {
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      if (read_request(conn)) {
        std::string reply;
        {
          std::lock_guard lock(mutex_);
          reply = reply_;
        }
        for (std::size_t sent = 0; sent < reply.size();) {
          const ssize_t n = ::send(conn, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
          if (n <= 0) break;
          sent += static_cast<std::size_t>(n);
        }
      }
      ::shutdown(conn, SHUT_RDWR);
      ::close(conn);
    }
  }

  // The request's head and its Content-Length body; false when the client goes quiet for 2 s.
  static bool read_request(int conn) {
    std::string buffer;
    std::size_t want = std::string::npos;
    char chunk[8192];
    while (want == std::string::npos || buffer.size() < want) {
      pollfd p{conn, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) return false;
      const ssize_t n = ::recv(conn, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<std::size_t>(n));
      const auto head_end = buffer.find("\r\n\r\n");
      if (want == std::string::npos && head_end != std::string::npos)
        want = head_end + 4 + content_length(buffer.substr(0, head_end));
    }
    return true;
  }

  static std::size_t content_length(const std::string& head) {
    for (const char* name : {"\r\nContent-Length:", "\r\ncontent-length:"}) {
      const auto at = head.find(name);
      if (at != std::string::npos) return std::stoul(head.substr(at + std::string(name).size()));
    }
    return 0;
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string reply_;
  std::thread thread_;
};

// A complete response around `body`, so the input exercises the body's parser.
inline std::string http_reply(int status, const std::string& content_type, std::string_view body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         std::string(body);
}

}  // namespace kernex::fuzz
