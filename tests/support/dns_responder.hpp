// A loopback DNS server speaking the wire format (RFC 1035) over UDP and TCP on one port of
// 127.0.0.1, for the HTTP client's resolver (ClientOptions::dns_servers = responder.server()).
// Names it knows get their A and AAAA records (none of a type: an empty NOERROR answer); any
// other name gets NXDOMAIN. A Mode makes it misbehave: never answer, answer with a record cut
// short or with bytes that are no DNS message, or truncate every UDP answer (TC) so the client
// asks again over TCP. hold_until_sources(n) keeps every answer back until queries came from n
// different client sockets: n resolutions waiting at once.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kernex::test {

class DnsResponder {
 public:
  enum class Mode { answer, silent, malformed, garbage, truncate };

  explicit DnsResponder(Mode mode = Mode::answer) : mode_(mode) {
    open_sockets();
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    thread_ = std::thread([this] { loop(); });
  }
  ~DnsResponder() {
    (void)!::write(stop_pipe_[1], "x", 1);
    thread_.join();
    for (const int fd : {udp_, tcp_, stop_pipe_[0], stop_pipe_[1]}) ::close(fd);
  }
  DnsResponder(const DnsResponder&) = delete;
  DnsResponder& operator=(const DnsResponder&) = delete;

  std::string server() const { return "127.0.0.1:" + std::to_string(port_); }
  void add(const std::string& name, const std::string& address) {
    std::lock_guard lock(mutex_);
    records_[name].push_back(address);
  }
  void set_mode(Mode mode) {
    std::lock_guard lock(mutex_);
    mode_ = mode;
  }
  void hold_until_sources(std::size_t n) {
    std::lock_guard lock(mutex_);
    hold_ = n;
  }
  std::size_t udp_queries() {
    std::lock_guard lock(mutex_);
    return udp_queries_;
  }
  std::size_t tcp_queries() {
    std::lock_guard lock(mutex_);
    return tcp_queries_;
  }
  std::size_t sources() {
    std::lock_guard lock(mutex_);
    return sources_.size();
  }
  bool wait_queries(std::size_t n, std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return udp_queries_ + tcp_queries_ >= n; });
  }
  bool wait_sources(std::size_t n, std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return sources_.size() >= n; });
  }

 private:
  struct Question {
    std::uint16_t id = 0;
    bool recursion = false;
    std::string name;  // lower-case, dot-separated, no trailing dot
    std::uint16_t type = 0;
    std::size_t end = 0;  // where the question section ends in the query
  };
  struct Held {
    std::string query;
    sockaddr_in from;
  };

  void open_sockets() {
    // TCP first at any port, then UDP at the same number (tried again if that one is taken).
    for (int tries = 0; tries < 50; ++tries) {
      tcp_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof addr;
      if (tcp_ < 0 || ::bind(tcp_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
          ::listen(tcp_, 64) != 0) {
        throw std::runtime_error("loopback TCP bind failed");
      }
      ::getsockname(tcp_, reinterpret_cast<sockaddr*>(&addr), &len);
      udp_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (udp_ >= 0 && ::bind(udp_, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
        port_ = ntohs(addr.sin_port);
        return;
      }
      if (udp_ >= 0) ::close(udp_);
      ::close(tcp_);
    }
    throw std::runtime_error("no port free for both UDP and TCP");
  }

  void loop() {
    while (true) {
      pollfd fds[3] = {{stop_pipe_[0], POLLIN, 0}, {udp_, POLLIN, 0}, {tcp_, POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) continue;
      if (fds[0].revents != 0) return;
      if (fds[1].revents != 0) on_udp();
      if (fds[2].revents != 0) on_tcp();
    }
  }

  void on_udp() {
    char buf[1500];
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const ssize_t n =
        ::recvfrom(udp_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) return;
    std::vector<Held> ready;
    {
      std::lock_guard lock(mutex_);
      ++udp_queries_;
      sources_.insert(ntohs(from.sin_port));
      changed_.notify_all();
      held_.push_back({std::string(buf, static_cast<std::size_t>(n)), from});
      if (sources_.size() >= hold_) ready.swap(held_);
    }
    for (const auto& q : ready) {
      const std::string reply = answer(q.query, true);
      if (reply.empty()) continue;
      ::sendto(udp_, reply.data(), reply.size(), 0, reinterpret_cast<const sockaddr*>(&q.from),
               sizeof q.from);
    }
  }

  // One query per connection: a two-byte length, the message; answered the same way.
  void on_tcp() {
    const int fd = ::accept4(tcp_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    timeval limit{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    std::string in;
    char buf[1024];
    while (in.size() < 2 || in.size() < 2 + length_at(in)) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<std::size_t>(n));
    }
    if (in.size() >= 2 && in.size() >= 2 + length_at(in)) {
      {
        std::lock_guard lock(mutex_);
        ++tcp_queries_;
        changed_.notify_all();
      }
      const std::string reply = answer(in.substr(2, length_at(in)), false);
      if (!reply.empty()) {
        std::string out;
        put16(out, static_cast<std::uint16_t>(reply.size()));
        out += reply;
        (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      }
    }
    ::close(fd);
  }

  static std::size_t length_at(const std::string& s) {
    return (static_cast<unsigned char>(s[0]) << 8) | static_cast<unsigned char>(s[1]);
  }
  static void put16(std::string& out, std::uint16_t v) {
    out += static_cast<char>(v >> 8);
    out += static_cast<char>(v & 0xff);
  }
  static void put32(std::string& out, std::uint32_t v) {
    put16(out, static_cast<std::uint16_t>(v >> 16));
    put16(out, static_cast<std::uint16_t>(v & 0xffff));
  }

  static bool parse(const std::string& q, Question& out) {
    if (q.size() < 12) return false;
    auto byte = [&](std::size_t i) { return static_cast<unsigned char>(q[i]); };
    out.id = static_cast<std::uint16_t>((byte(0) << 8) | byte(1));
    out.recursion = (byte(2) & 0x01) != 0;
    if (((byte(4) << 8) | byte(5)) != 1) return false;  // one question
    std::size_t at = 12;
    while (at < q.size() && byte(at) != 0) {
      const std::size_t n = byte(at);
      if (n > 63 || at + 1 + n >= q.size()) return false;
      if (!out.name.empty()) out.name += '.';
      for (std::size_t i = 0; i < n; ++i)
        out.name += static_cast<char>(std::tolower(byte(at + 1 + i)));
      at += 1 + n;
    }
    if (at + 5 > q.size()) return false;
    out.type = static_cast<std::uint16_t>((byte(at + 1) << 8) | byte(at + 2));
    out.end = at + 5;
    return true;
  }

  // The reply to `query` in the current mode; empty: none.
  std::string answer(const std::string& query, bool udp) {
    Question q;
    if (!parse(query, q)) return {};
    std::unique_lock lock(mutex_);
    const Mode mode = mode_;
    const auto found = records_.find(q.name);
    const bool known = found != records_.end();
    std::vector<std::string> addresses;
    if (known) addresses = found->second;
    lock.unlock();
    if (mode == Mode::silent) return {};
    std::string out;
    put16(out, q.id);
    if (mode == Mode::garbage) return out + "\x81\x80 not a DNS message";
    std::vector<std::string> rdata;
    for (const auto& a : addresses) {
      unsigned char raw[16];
      if (q.type == 1 && ::inet_pton(AF_INET, a.c_str(), raw) == 1)
        rdata.emplace_back(reinterpret_cast<char*>(raw), 4);
      if (q.type == 28 && ::inet_pton(AF_INET6, a.c_str(), raw) == 1)
        rdata.emplace_back(reinterpret_cast<char*>(raw), 16);
    }
    const bool truncated = mode == Mode::truncate && udp;
    const std::uint16_t rcode = known ? 0 : 3;  // NXDOMAIN
    put16(out, static_cast<std::uint16_t>(0x8080 | (q.recursion ? 0x0100 : 0) |
                                          (truncated ? 0x0200 : 0) | rcode));
    const bool cut = mode == Mode::malformed;
    put16(out, 1);
    put16(out, static_cast<std::uint16_t>(truncated ? 0 : cut ? 1 : rdata.size()));
    put16(out, 0);
    put16(out, 0);
    out += query.substr(12, q.end - 12);
    if (truncated) return out;
    if (cut) {  // a record whose data runs past the end of the message
      put16(out, 0xc00c);
      put16(out, q.type);
      put16(out, 1);
      put32(out, 60);
      put16(out, 16);
      return out + "\x7f";
    }
    for (const auto& r : rdata) {
      put16(out, 0xc00c);  // the name: a pointer to the question's
      put16(out, q.type);
      put16(out, 1);  // IN
      put32(out, 60);
      put16(out, static_cast<std::uint16_t>(r.size()));
      out += r;
    }
    return out;
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  Mode mode_;
  std::map<std::string, std::vector<std::string>> records_;
  std::size_t hold_ = 0;
  std::vector<Held> held_;
  std::set<int> sources_;  // client ports seen
  std::size_t udp_queries_ = 0;
  std::size_t tcp_queries_ = 0;
  int udp_ = -1;
  int tcp_ = -1;
  int port_ = 0;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace kernex::test
