// kernex/file_lock.hpp: a blocking flock on a sibling lock file.
#include "kernex/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kernex {

Result<FileLock> FileLock::take(const std::filesystem::path& lock_file) {
  // O_NONBLOCK: a FIFO planted under the lock's name must not hang the open (flock then fails).
  const int fd =
      ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0)
    return fail(ErrorCode::Io, "cannot open " + lock_file.string() + ": " + std::strerror(errno));
  FileLock lock(fd);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR)
      return fail(ErrorCode::Io, "cannot lock " + lock_file.string() + ": " + std::strerror(errno));
  }
  return lock;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace kernex
