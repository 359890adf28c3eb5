#include "tcp_connect.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kernex::http::detail {
namespace {

// A peer on this host (a local model server, loopback) has answered the handshake by the time
// connect() returns EINPROGRESS: one poll() then spares a fiber its suspension (an epoll
// registration, two context switches, a pool thread's wake; ~5 % of a run's start in a burst).
// Elsewhere it costs that one system call.
bool answered_already(int fd, short* revents) {
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1) return false;
  *revents = p.revents;
  return true;
}

// 0 once connected, else an errno.
int connect_by(int fd, const sockaddr* address, socklen_t length, Clock::time_point deadline,
               const std::stop_token& stop) {
  const std::stop_callback<ShutdownOnStop> wake(stop, ShutdownOnStop{fd});
  // Checked after the callback is in place: a stop from now on shuts the socket down, and one
  // before it (a shutdown that could not abort a handshake not yet begun) is seen here.
  if (stop.stop_requested()) return ECANCELED;
  if (::connect(fd, address, length) == 0) return 0;
  if (const int error = thread_errno(); error != EINPROGRESS && error != EINTR) return error;
  for (bool first = true;; first = false) {
    if (stop.stop_requested()) return ECANCELED;
    short revents = 0;
    if (!first || !answered_already(fd, &revents)) {
      if (const int error = wait_ready(fd, POLLOUT, deadline, &revents); error != 0) return error;
    }
    if (revents == 0) continue;  // interrupted: still connecting
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return thread_errno();
    if (stop.stop_requested()) return ECANCELED;
    return error;
  }
}

}  // namespace

Connected tcp_connect(const sockaddr* address, socklen_t length, Clock::time_point deadline,
                      const std::stop_token& stop) {
  const int fd =
      ::socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) return {-1, thread_errno()};
  if (const int error = connect_by(fd, address, length, deadline, stop); error != 0) {
    ::close(fd);
    return {-1, error};
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {fd, 0};
}

}  // namespace kernex::http::detail
