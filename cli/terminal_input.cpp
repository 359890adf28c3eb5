#include "terminal_input.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <functional>

namespace kernex::cli {
namespace {

// An eventfd that becomes readable when `stop` is requested, for poll() beside the input.
class StopFd {
 public:
  explicit StopFd(std::stop_token stop)
      : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), callback_(std::move(stop), [this] {
          const std::uint64_t one = 1;
          if (fd_ >= 0) (void)!::write(fd_, &one, sizeof one);
        }) {}
  ~StopFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  StopFd(const StopFd&) = delete;
  StopFd& operator=(const StopFd&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
  std::stop_callback<std::function<void()>> callback_;
};

}  // namespace

std::optional<std::string> read_line(int fd, std::stop_token stop) {
  StopFd stopped(stop);
  std::string line;
  while (true) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stopped.fd(), POLLIN, 0}};
    const int n = ::poll(fds, stopped.fd() >= 0 ? 2 : 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || stop.stop_requested()) return std::nullopt;
    char c = 0;
    const ssize_t got = ::read(fd, &c, 1);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return line.empty() ? std::nullopt : std::optional<std::string>(line);
    if (c == '\n') return line;
    if (line.size() < 64 * 1024) line.push_back(c);
  }
}

bool stdin_is_terminal() { return ::isatty(STDIN_FILENO) == 1; }

}  // namespace kernex::cli
