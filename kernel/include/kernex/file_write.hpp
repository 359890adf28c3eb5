// Writing a buffer to a descriptor in full. write(2) may write less than asked (a signal, a pipe,
// a disk filling up) and every caller must loop until all of it is written: this is that loop,
// once, for the kernel and every layer above it.
#pragma once

#include <string_view>

#include "kernex/error.hpp"

namespace kernex {

// Writes all of `data` to `fd`, going on after a short write or EINTR. A failure is ErrorCode::Io,
// "cannot write <what>: <strerror>"; whatever was written before it stays written.
Result<void> write_all(int fd, std::string_view data, std::string_view what);

}  // namespace kernex
