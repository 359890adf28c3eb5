// A TCP connection opened without holding a thread while the handshake is under way: a
// non-blocking connect(), a wait for writability through wait_ready (on a fiber, no thread), then
// the socket's SO_ERROR. Name resolution is the caller's (dns_resolve.hpp, waiting the same way).
#pragma once

#include <sys/socket.h>

#include <stop_token>

#include "fd_wait.hpp"

namespace kernex::http::detail {

struct Connected {
  int fd = -1;    // connected, non-blocking, close-on-exec, TCP_NODELAY; the caller closes it
  int error = 0;  // otherwise: ETIMEDOUT (deadline), ECANCELED (stop), or the connect's errno
};

// Connects to `address` by `deadline`. A stop request shuts the socket down, which ends the wait.
Connected tcp_connect(const sockaddr* address, socklen_t length, Clock::time_point deadline,
                      const std::stop_token& stop);

}  // namespace kernex::http::detail
