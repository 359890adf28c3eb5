// An exclusive flock(2) on a lock file beside the thing it guards, for work several processes may
// start at once on one file (creating a store, a read-modify-write of a keys file). The kernel
// releases it on destruction, the system when the process dies, so a kill -9 never leaves it held.
#pragma once

#include <filesystem>
#include <utility>

#include "kernex/error.hpp"

namespace kernex {

class FileLock {
 public:
  // Creates `lock_file` (0600, never through a symlink; its directory must exist) and waits for
  // the exclusive lock.
  static Result<FileLock> take(const std::filesystem::path& lock_file);

  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace kernex
