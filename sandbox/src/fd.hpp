// File descriptors of a sandboxed child's stdio, owned one way (RAII) by spawn() and
// SandboxedProcess alike.
#pragma once

#include <string>

#include "kernex/error.hpp"
#include "kernex/sandbox/unique_fd.hpp"

namespace kernex::sandbox::detail {

std::string errno_text(int err);

using Fd = UniqueFd;  // kernex/sandbox/unique_fd.hpp

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
