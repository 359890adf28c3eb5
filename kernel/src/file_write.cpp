// kernex/file_write.hpp: write(2) until all of it is written.
#include "kernex/file_write.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kernex {

Result<void> write_all(int fd, std::string_view data, std::string_view what) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // write(2) returning 0 for a non-empty buffer sets no errno: say so rather than a stale one.
      const std::string why = n == 0 ? "nothing written" : std::strerror(errno);
      return fail(ErrorCode::Io, "cannot write " + std::string(what) + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace kernex
