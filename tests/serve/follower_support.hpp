// Followers that never read, and what the server says they cost (serve.stream, serve.metrics):
//   StuckFollower   a raw loopback socket with a tiny receive buffer that asks for a stream and
//                   then reads nothing; drain() reads what arrived once the server let it go
//   parse_partial   the complete SSE events of a (possibly cut) chunked response
//   scrape          one /metrics sample by name (with the metrics token)
//   rss_bytes       a process's resident set (/proc/PID/status)
#pragma once

#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "serve_harness.hpp"

namespace kernex::serve_test {

class StuckFollower {
 public:
  // Sends `method target` (+ body) and reads nothing from then on.
  StuckFollower(int port, const std::string& method, const std::string& target,
                const std::string& body, const Headers& headers) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    // Before connect, so the window the server sees stays small.
    int small = 4096;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    Headers h = headers;
    h.emplace_back("Accept", "text/event-stream");
    const std::string req = build_request(method, target, body, h);
    sent_ = ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  ~StuckFollower() {
    if (fd_ >= 0) ::close(fd_);
  }
  StuckFollower(const StuckFollower&) = delete;
  StuckFollower& operator=(const StuckFollower&) = delete;

  bool ok() const { return fd_ >= 0 && sent_; }

  // Everything the server sent, read until it closed the connection (true) or `limit` passed.
  bool drain(std::string& out, milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    char buf[65536];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) <= 0) return false;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool sent_ = false;
};

// The complete events of a chunked SSE response that may have been cut anywhere, and whether its
// last chunk (the end of the body) arrived.
struct PartialStream {
  int status = 0;
  std::vector<SseEvent> events;
  bool complete = false;
};

inline std::vector<SseEvent> parse_sse(const std::string& body);

inline PartialStream parse_partial(const std::string& raw) {
  PartialStream out;
  const auto head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return out;
  out.status = std::atoi(raw.substr(raw.find(' ') + 1, 3).c_str());
  std::string body;
  std::size_t at = head_end + 4;
  for (;;) {
    const auto eol = raw.find("\r\n", at);
    if (eol == std::string::npos) break;
    const std::size_t size = std::strtoul(raw.substr(at, eol - at).c_str(), nullptr, 16);
    if (size == 0) {
      out.complete = eol > at;
      break;
    }
    const std::size_t take = std::min(size, raw.size() - (eol + 2));
    body.append(raw, eol + 2, take);
    if (take < size) break;
    at = eol + 2 + size + 2;
  }
  out.events = parse_sse(body);
  return out;
}

// The whole events (blocks ending with a blank line) of an SSE body, in one linear pass.
inline std::vector<SseEvent> parse_sse(const std::string& body) {
  std::vector<SseEvent> events;
  std::size_t start = 0, end;
  while ((end = body.find("\n\n", start)) != std::string::npos) {
    SseEvent e;
    std::istringstream in(body.substr(start, end - start));
    std::string line;
    bool any = false;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == ':') continue;
      const auto colon = line.find(':');
      const std::string field = line.substr(0, colon);
      std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      if (field == "event") e.event = value, any = true;
      if (field == "id") e.id = value, any = true;
      if (field == "data") e.data += value, any = true;
    }
    if (any) {
      if (e.event.empty()) e.event = "message";
      events.push_back(std::move(e));
    }
    start = end + 2;
  }
  return events;
}

// The value of the sample `name` (no labels) on /metrics, or -1 when absent or refused.
inline double scrape(int port, const std::string& token, const std::string& name) {
  auto r = request(port, "GET", "/metrics", "", bearer(token));
  if (r.status != 200) return -1;
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::strtod(line.c_str() + name.size() + 1, nullptr);
  }
  return -1;
}

// Polls /metrics until `pred(value of name)` holds or `limit` passed: the server's own account
// is the synchronisation, not a pause.
template <class Pred>
bool wait_metric(int port, const std::string& token, const std::string& name, Pred pred,
                 milliseconds limit = milliseconds(60000)) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    if (pred(scrape(port, token, name))) return true;
    if (Clock::now() >= deadline) return false;
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 20);  // between scrapes only; the condition decides
  }
}

inline std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace kernex::serve_test
