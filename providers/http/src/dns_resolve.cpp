#include "dns_resolve.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ares.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace kernex::http::detail {
namespace {

using Outcome = Resolution::Outcome;

Resolution failed(Outcome outcome, std::string cause) {
  Resolution r;
  r.outcome = outcome;
  r.cause = std::move(cause);
  return r;
}

void add_address(Resolution& r, const sockaddr* sa, std::uint16_t port) {
  Address a;
  if (sa->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, sa, sizeof in);
    in.sin_port = htons(port);
    std::memcpy(&a.storage, &in, sizeof in);
    a.length = sizeof in;
  } else if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, sa, sizeof in6);
    in6.sin6_port = htons(port);
    std::memcpy(&a.storage, &in6, sizeof in6);
    a.length = sizeof in6;
  } else {
    return;  // neither: not something to connect to
  }
  r.addresses.push_back(a);
  r.outcome = Outcome::resolved;
}

// A raw address of `family` as a socket address (the port is set by add_address).
void add_raw(Resolution& r, int family, const void* raw, std::uint16_t port) {
  if (family == AF_INET) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    std::memcpy(&in.sin_addr, raw, sizeof in.sin_addr);
    add_address(r, reinterpret_cast<const sockaddr*>(&in), port);
  } else if (family == AF_INET6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    std::memcpy(&in6.sin6_addr, raw, sizeof in6.sin6_addr);
    add_address(r, reinterpret_cast<const sockaddr*>(&in6), port);
  }
}

// "127.0.0.1", "::1": no resolver involved.
bool add_numeric(Resolution& r, const std::string& host, std::uint16_t port) {
  unsigned char raw[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, host.c_str(), raw) == 1) {
    add_raw(r, AF_INET, raw, port);
    return true;
  }
  if (::inet_pton(AF_INET6, host.c_str(), raw) == 1) {
    add_raw(r, AF_INET6, raw, port);
    return true;
  }
  return false;
}

// RFC 6761: localhost names are loopback and never asked of a name server.
bool is_localhost(const std::string& host) {
  return host == "localhost" || host == "localhost." || host.ends_with(".localhost") ||
         host.ends_with(".localhost.");
}

void init_library() {
  static std::once_flag once;
  std::call_once(once, [] { ares_library_init(ARES_LIB_INIT_ALL); });
}

// What ares_getaddrinfo's callback saw.
struct Query {
  bool done = false;
  int status = ARES_SUCCESS;
  Resolution result;
  std::uint16_t port = 0;
};

void on_addrinfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* info) {
  auto& q = *static_cast<Query*>(arg);
  q.done = true;
  q.status = status;
  if (info == nullptr) return;
  if (status == ARES_SUCCESS) {
    for (const auto* node = info->nodes; node != nullptr; node = node->ai_next) {
      if (node->ai_addr != nullptr) add_address(q.result, node->ai_addr, q.port);
    }
  }
  ares_freeaddrinfo(info);
}

// A stop request makes the wake descriptor readable, which ends the wait on the epoll set.
struct WakeOnStop {
  int fd;
  void operator()() const noexcept {
    const std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  }
};

}  // namespace

struct Resolver::Channel {
  ares_channel channel = nullptr;
  int epoll = -1;  // c-ares's sockets, and `wake`
  int wake = -1;   // an eventfd, written by a stop request

  ~Channel() {
    if (channel != nullptr) ares_destroy(channel);  // first: it may still unwatch its sockets
    if (epoll >= 0) ::close(epoll);
    if (wake >= 0) ::close(wake);
  }

  // c-ares says which of its sockets to watch, and for what.
  static void on_socket(void* data, ares_socket_t fd, int readable, int writable) {
    const int epoll_fd = static_cast<Channel*>(data)->epoll;
    if (!readable && !writable) {
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
      return;
    }
    epoll_event ev{};
    ev.events = (readable ? EPOLLIN : 0u) | (writable ? EPOLLOUT : 0u);
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev) != 0)
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }

  // Empty when ready, else why not.
  std::string open(const std::string& servers) {
    init_library();
    epoll = ::epoll_create1(EPOLL_CLOEXEC);
    wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll < 0 || wake < 0) return std::string("cannot watch sockets: ") + std::strerror(errno);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, wake, &ev) != 0)
      return std::string("cannot watch sockets: ") + std::strerror(errno);
    ares_options options{};
    options.sock_state_cb = &Channel::on_socket;
    options.sock_state_cb_data = this;
    if (const int status = ares_init_options(&channel, &options, ARES_OPT_SOCK_STATE_CB);
        status != ARES_SUCCESS) {
      channel = nullptr;
      return std::string("cannot start the resolver: ") + ares_strerror(status);
    }
    if (!servers.empty()) {
      if (const int status = ares_set_servers_ports_csv(channel, servers.c_str());
          status != ARES_SUCCESS) {
        return "dns_servers `" + servers.substr(0, 200) + "` is not a list of address[:port] (" +
               ares_strerror(status) + ")";
      }
    }
    return {};
  }

  // Hands c-ares what is ready in the set (or, when nothing is, lets it see its timeouts).
  void process() {
    epoll_event events[16];
    const int n = ::epoll_wait(epoll, events, 16, 0);
    bool any = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake) continue;
      const bool in = (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0;
      const bool out = (events[i].events & EPOLLOUT) != 0;
      ares_process_fd(channel, in ? fd : ARES_SOCKET_BAD, out ? fd : ARES_SOCKET_BAD);
      any = true;
    }
    if (!any) ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  }

  // When c-ares next needs to look (a retransmission, its own timeout), never past `deadline`.
  Clock::time_point next_look(Clock::time_point deadline) const {
    const auto now = Clock::now();
    const auto left =
        std::max(std::chrono::microseconds(0),
                 std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
    timeval max{};
    max.tv_sec = static_cast<time_t>(left.count() / 1'000'000);
    max.tv_usec = static_cast<suseconds_t>(left.count() % 1'000'000);
    timeval tv{};
    const timeval* wait = ares_timeout(channel, &max, &tv);
    const auto until =
        now + std::chrono::seconds(wait->tv_sec) + std::chrono::microseconds(wait->tv_usec);
    return until < deadline ? until : deadline;
  }

  // Runs the started query `q` to its end, the deadline or a stop request.
  void run(Query& q, Clock::time_point deadline, const std::stop_token& stop) {
    {
      const std::stop_callback<WakeOnStop> on_stop(stop, WakeOnStop{wake});
      while (!q.done) {
        if (stop.stop_requested()) {
          finish(q, failed(Outcome::cancelled, "cancelled"));
          break;
        }
        if (Clock::now() >= deadline) {
          finish(q, failed(Outcome::timed_out, "timed out"));
          break;
        }
        const int error = wait_ready(epoll, POLLIN, next_look(deadline));
        if (error != 0 && error != ETIMEDOUT) {
          finish(q, failed(Outcome::failed,
                           std::string("waiting for an answer: ") + std::strerror(error)));
          break;
        }
        process();
      }
    }
    std::uint64_t count = 0;  // the stop callback is gone: no later stop can wake another call
    while (::read(wake, &count, sizeof count) > 0) {
    }
  }

  // Ends `q` early: c-ares abandons it (its callback runs now, with ARES_ECANCELLED).
  void finish(Query& q, Resolution why) {
    ares_cancel(channel);
    q.done = true;
    q.result = std::move(why);
  }

  // /etc/hosts for a localhost name, else loopback (IPv4 first: it works without IPv6).
  Resolution localhost(const std::string& host, std::uint16_t port) {
    Resolution r;
    for (const int family : {AF_INET, AF_INET6}) {
      hostent* entry = nullptr;
      if (ares_gethostbyname_file(channel, host.c_str(), family, &entry) != ARES_SUCCESS) continue;
      for (char** a = entry->h_addr_list; a != nullptr && *a != nullptr; ++a)
        add_raw(r, entry->h_addrtype, *a, port);
      ares_free_hostent(entry);
    }
    if (!r.addresses.empty()) return r;
    const in_addr v4{htonl(INADDR_LOOPBACK)};
    add_raw(r, AF_INET, &v4, port);
    add_raw(r, AF_INET6, &in6addr_loopback, port);
    return r;
  }
};

Resolver::Resolver(std::string servers) : servers_(std::move(servers)) {}
Resolver::~Resolver() = default;

Resolution Resolver::resolve(const std::string& host, std::uint16_t port,
                             Clock::time_point deadline, const std::stop_token& stop) {
  Resolution numeric;
  if (add_numeric(numeric, host, port)) return numeric;
  if (!channel_) {
    auto made = std::make_unique<Channel>();
    if (auto why = made->open(servers_); !why.empty()) {
      const bool config = made->channel != nullptr;  // the servers were refused, not the system
      return failed(config ? Outcome::bad_config : Outcome::failed, std::move(why));
    }
    channel_ = std::move(made);
  }
  if (is_localhost(host)) return channel_->localhost(host, port);
  Query q;
  q.port = port;
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  ares_getaddrinfo(channel_->channel, host.c_str(), nullptr, &hints, &on_addrinfo, &q);
  channel_->run(q, deadline, stop);  // returns at once when the hosts file answered
  if (q.result.outcome == Outcome::resolved) return std::move(q.result);
  if (q.status == ARES_SUCCESS || q.status == ARES_ECANCELLED) {
    if (!q.result.cause.empty()) return std::move(q.result);  // ended here: deadline, stop
    return failed(Outcome::not_found, "no address");
  }
  if (q.status == ARES_ETIMEOUT) return failed(Outcome::timed_out, "timed out (no DNS answer)");
  const bool missing = q.status == ARES_ENOTFOUND || q.status == ARES_ENODATA;
  return failed(missing ? Outcome::not_found : Outcome::failed, ares_strerror(q.status));
}

}  // namespace kernex::http::detail
