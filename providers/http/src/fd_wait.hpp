// Waiting for a socket descriptor by a deadline, through kernex::wait_fd: on a fiber of
// `kernex serve` inside a SuspendPoint the wait holds no thread (kernex/suspend.hpp); elsewhere
// it is poll(). Shared by the HTTP client's reads, writes, TLS and connects.
#pragma once

#include <sys/socket.h>

#include <chrono>

namespace kernex::http::detail {

using Clock = std::chrono::steady_clock;

// errno read afresh: after kernex::wait_fd the caller may be on another thread (a fiber moves),
// and errno's address is the thread's (GCC may keep __errno_location()'s result otherwise).
int thread_errno();

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT) or `deadline` passes. 0: woken (ready,
// or interrupted: the caller tries its I/O again and waits again if it must); `*revents` says
// how (0 when interrupted). ETIMEDOUT: the deadline passed. Another errno: the wait failed.
int wait_ready(int fd, short events, Clock::time_point deadline, short* revents = nullptr);

// A stop callback that wakes any of those waits on `fd` (a connect, a handshake, a read):
// shutdown() is safe from any thread and the descriptor stays open (its owner closes it only after
// the callback was deregistered).
struct ShutdownOnStop {
  int fd;
  void operator()() const noexcept { ::shutdown(fd, SHUT_RDWR); }
};

}  // namespace kernex::http::detail
