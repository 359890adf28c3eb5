// Host names resolved without holding a thread. c-ares (kept inside dns_resolve.cpp) sends the A
// and AAAA queries; its sockets are watched through one epoll descriptor, and that descriptor is
// waited on through wait_ready (on a fiber of `kernex serve`: no thread; elsewhere poll()), by the
// request's deadline, a stop request waking the wait through an eventfd in the same set. c-ares
// reads /etc/hosts and /etc/resolv.conf as getaddrinfo() does. Numeric hosts never reach it, and
// `localhost` names are answered from /etc/hosts or else as loopback, never asked of a server.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "fd_wait.hpp"

namespace kernex::http::detail {

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

struct Resolution {
  enum class Outcome { resolved, not_found, timed_out, cancelled, failed, bad_config };
  Outcome outcome = Outcome::failed;
  std::vector<Address> addresses;  // resolved: at least one, in the order to try them
  std::string cause;               // otherwise: why ("timed out", the resolver's own words)
};

// One per HTTP client: calls are serialised (one resolution at a time), possibly each on another
// thread. The resolver's state (sockets, the parsed /etc/resolv.conf) is made on the first name.
class Resolver {
 public:
  // `servers`: "host:port,..." asked instead of /etc/resolv.conf's nameservers (empty: those).
  explicit Resolver(std::string servers);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // The addresses of `host` with `port`, by `deadline`; a stop request ends the wait at once.
  Resolution resolve(const std::string& host, std::uint16_t port, Clock::time_point deadline,
                     const std::stop_token& stop);

 private:
  struct Channel;
  std::string servers_;
  std::unique_ptr<Channel> channel_;
};

}  // namespace kernex::http::detail
