#include "fd_wait.hpp"

#include <cerrno>

#include "kernex/suspend.hpp"

namespace kernex::http::detail {

[[gnu::noinline]] int thread_errno() {
  int e = errno;
  asm volatile("" : "+r"(e));  // neither pure nor const: never merged with another call
  return e;
}

int wait_ready(int fd, short events, Clock::time_point deadline, short* revents) {
  short got = 0;
  if (revents != nullptr) *revents = 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return ETIMEDOUT;
  // Within int: a far deadline waits in ~12-day steps (the caller loops).
  const int ready =
      kernex::wait_fd(fd, events, static_cast<int>(left < (1 << 30) ? left : 1 << 30), &got);
  if (ready > 0) {
    if (revents != nullptr) *revents = got;
    return 0;
  }
  if (ready == 0) return 0;  // its time ran out: the caller's next look finds the deadline passed
  const int error = thread_errno();
  return error == EINTR ? 0 : error;
}

}  // namespace kernex::http::detail
