// File descriptors of a sandboxed child's stdio, owned one way (RAII) by spawn() and
// SandboxedProcess alike.
#pragma once

#include <unistd.h>

#include <string>
#include <utility>

#include "kernex/error.hpp"

namespace kernex::sandbox::detail {

std::string errno_text(int err);

// Owns one fd; closes it when reset or destroyed.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Takes `fd` (closing it on failure) and keeps it clear of 0-2, so the child's dup3 onto stdio
// can't clobber another one of its stdio fds.
Result<Fd> above_stdio(int fd);

// A close-on-exec pipe (or socket pair) with both ends above stdio; blocking until a side says
// otherwise with set_nonblocking.
struct Pipe {
  Fd read;
  Fd write;
};
Result<Pipe> make_pipe();
void set_nonblocking(const Fd& fd);

}  // namespace kernex::sandbox::detail
