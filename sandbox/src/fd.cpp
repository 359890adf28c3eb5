#include "fd.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace kernex::sandbox::detail {

std::string errno_text(int err) { return std::strerror(err); }

Result<Fd> above_stdio(int fd) {
  if (fd >= 3) return Fd(fd);
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  if (high < 0)
    return fail(ErrorCode::Sandbox, "fcntl(F_DUPFD_CLOEXEC) failed: " + errno_text(err));
  return Fd(high);
}

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return fail(ErrorCode::Sandbox, "pipe2 failed: " + errno_text(errno));
  auto read_end = above_stdio(fds[0]);
  auto write_end = above_stdio(fds[1]);
  if (!read_end) return std::unexpected(read_end.error());
  if (!write_end) return std::unexpected(write_end.error());
  return Pipe{std::move(*read_end), std::move(*write_end)};
}

void set_nonblocking(const Fd& fd) { ::fcntl(fd.get(), F_SETFL, O_NONBLOCK); }

}  // namespace kernex::sandbox::detail
