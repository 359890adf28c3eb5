// A loopback HTTP/1.1 server for provider tests: answers each request with the next scripted
// raw reply and records every request. Plain POSIX sockets so tests build fast (no Asio).
//
//   FakeHttpServer server;
//   server.push(FakeHttpServer::json(200, R"({"ok":true})"));
//   ... client talks to server.url() ...
//   EXPECT_EQ(server.requests().at(0).target, "/v1/chat/completions");
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kernex::test {

class FakeHttpServer {
 public:
  struct Reply {
    std::vector<std::string> parts;  // written in order (each its own send)
    bool close = false;              // close the connection after writing
    bool stall = false;              // after writing the parts (if any), never write again
  };

  struct Recorded {
    std::string method;
    std::string target;
    std::map<std::string, std::string> headers;  // names lower-cased
    std::string body;
    std::string header(const std::string& name) const {
      auto it = headers.find(name);
      return it == headers.end() ? std::string() : it->second;
    }
  };

  // `port` 0: any free one; a given port serves a client again after an earlier server on it
  // was destroyed (a receiver down, then up).
  explicit FakeHttpServer(int port = 0) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("socket failed");
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      throw std::runtime_error("bind/listen failed");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~FakeHttpServer() {
    stopping_ = true;
    (void)!::write(stop_pipe_[1], "x", 1);
    acceptor_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }

  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  void push(Reply reply) {
    std::lock_guard lock(mutex_);
    replies_.push_back(std::move(reply));
  }
  // Answer with this reply whenever the script is empty (benchmarks, endless servers).
  void set_default(Reply reply) {
    std::lock_guard lock(mutex_);
    default_reply_ = std::move(reply);
  }
  // Compute the reply from the request whenever the script is empty (servers that play a model).
  void set_responder(std::function<Reply(const Recorded&)> responder) {
    std::lock_guard lock(mutex_);
    responder_ = std::move(responder);
  }
  // Stop keeping requests (benchmarks send millions; requests() then returns what came before).
  void keep_requests(bool keep) { keep_requests_ = keep; }
  // Answer CONNECT with 200 and go on serving scripted replies inside the tunnel.
  void act_as_proxy() { proxy_ = true; }

  std::vector<Recorded> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::size_t connections() const { return connections_.load(); }
  // Waits (bounded) until `n` requests arrived; for tests whose client runs on another thread.
  bool wait_for_requests(std::size_t n,
                         std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return requests_.size() >= n; });
  }

  // ---- reply builders ----
  static Reply raw(std::string bytes, bool close = false) {
    return Reply{{std::move(bytes)}, close, false};
  }

  static Reply response(int status, const std::string& body,
                        const std::string& content_type = "application/json",
                        const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
    out += "Content-Type: " + content_type + "\r\n";
    for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    return raw(std::move(out));
  }
  static Reply json(int status, const std::string& body) { return response(status, body); }

  // A chunked response, one chunk per part (each its own send), then the terminating chunk
  // unless `cut` (the connection is closed mid-stream instead).
  static Reply chunked(int status, const std::vector<std::string>& parts,
                       const std::string& content_type, bool cut = false) {
    Reply r;
    r.parts.push_back("HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                      "\r\nContent-Type: " + content_type +
                      "\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (const auto& p : parts) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", p.size());
      r.parts.push_back(std::string(size) + p + "\r\n");
    }
    if (cut) {
      r.close = true;
    } else {
      r.parts.push_back("0\r\n\r\n");
    }
    return r;
  }
  // Server-Sent Events: each string is one event's full text ("data: {...}\n\n").
  static Reply sse(const std::vector<std::string>& events, bool cut = false) {
    return chunked(200, events, "text/event-stream", cut);
  }
  static Reply stall() { return Reply{{}, false, true}; }

 private:
  static std::string reason(int status) {
    switch (status) {
      case 200:
        return "OK";
      case 400:
        return "Bad Request";
      case 401:
        return "Unauthorized";
      case 404:
        return "Not Found";
      case 429:
        return "Too Many Requests";
      case 500:
        return "Internal Server Error";
      case 502:
        return "Bad Gateway";
      case 503:
        return "Service Unavailable";
      default:
        return "Status";
    }
  }

  void accept_loop() {
    while (!stopping_) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      std::lock_guard lock(mutex_);
      open_fds_.push_back(fd);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // Reads until `buffer` holds `n` bytes or the peer/stop ends it.
  bool fill(int fd, std::string& buffer, std::size_t n) {
    char chunk[16384];
    while (buffer.size() < n) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) return false;
      if (fds[1].revents != 0) return false;
      const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
      if (got <= 0) return false;
      buffer.append(chunk, static_cast<std::size_t>(got));
    }
    return true;
  }

  bool read_request(int fd, std::string& buffer, Recorded& out) {
    std::size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(fd, buffer, buffer.size() + 1)) return false;
    }
    const std::string head = buffer.substr(0, end);
    buffer.erase(0, end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string first = head.substr(0, line_end);
    const auto sp1 = first.find(' ');
    const auto sp2 = first.find(' ', sp1 + 1);
    out.method = first.substr(0, sp1);
    out.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      auto next = head.find("\r\n", pos);
      if (next == std::string::npos) next = head.size();
      const std::string line = head.substr(pos, next - pos);
      pos = next + 2;
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      out.headers[name] = value;
    }
    const std::size_t length =
        out.headers.count("content-length") ? std::stoul(out.headers["content-length"]) : 0;
    if (!fill(fd, buffer, length)) return false;
    out.body = buffer.substr(0, length);
    buffer.erase(0, length);
    return true;
  }

  void serve(int fd) {
    std::string buffer;
    while (!stopping_) {
      Recorded req;
      if (!read_request(fd, buffer, req)) break;
      Reply reply;
      {
        std::lock_guard lock(mutex_);
        if (keep_requests_) requests_.push_back(req);
        if (proxy_ && req.method == "CONNECT") {
          reply = raw("HTTP/1.1 200 Connection established\r\n\r\n");
        } else if (!replies_.empty()) {
          reply = std::move(replies_.front());
          replies_.pop_front();
        } else if (responder_) {
          reply = responder_(req);
        } else if (default_reply_) {
          reply = *default_reply_;
        } else {
          reply = response(500, R"({"error":{"message":"fake server: no scripted reply left"}})");
        }
      }
      changed_.notify_all();
      bool ok = true;
      for (const auto& part : reply.parts) {
        if (::send(fd, part.data(), part.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(part.size())) {
          ok = false;
          break;
        }
      }
      if (reply.stall) {
        pollfd fds[1] = {{stop_pipe_[0], POLLIN, 0}};
        ::poll(fds, 1, -1);
        break;
      }
      if (!ok || reply.close) break;
    }
    ::shutdown(fd, SHUT_RDWR);
    std::lock_guard lock(mutex_);
    open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
    ::close(fd);
  }

  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> proxy_{false};
  std::atomic<bool> keep_requests_{true};
  std::atomic<std::size_t> connections_{0};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<Reply> replies_;
  std::function<Reply(const Recorded&)> responder_;
  std::optional<Reply> default_reply_;
  std::vector<Recorded> requests_;
  std::vector<int> open_fds_;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace kernex::test
