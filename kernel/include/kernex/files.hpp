// Reading a file that comes from outside (config, rules, manifests, locks, scripts, profiles). Any
// path a user, a skill folder or a tool names may be a FIFO (whose open or read blocks forever), a
// device (endless, like /dev/zero), a directory (read as empty) or a socket. The one way in is
// here: the open never blocks, the open descriptor itself is checked to be a regular file (no
// check-then-open race), and the size is capped before and while reading.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "kernex/error.hpp"

namespace kernex {

// Default caps: small structured files (manifests, locks, rules, profiles, mcp.json) and scripts
// or data files (replay scripts, imports, pricing).
inline constexpr std::size_t kMaxManifestFileBytes = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t kMaxScriptFileBytes = std::size_t{16} << 20;   // 16 MiB

// An open regular file (close-on-exec), closed on destruction. Move-only.
class RegularFile {
 public:
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  // The size fstat() reported at open time.
  std::uint64_t size() const { return size_; }
  // Up to `count` bytes into `buffer`; 0 at end of file. Retries EINTR.
  Result<std::size_t> read_some(char* buffer, std::size_t count);

 private:
  friend Result<RegularFile> open_regular_file(const std::filesystem::path&, std::string_view);
  RegularFile(int fd, std::uint64_t size, std::string label)
      : fd_(fd), size_(size), label_(std::move(label)) {}
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string label_;  // "<what> '<path>'" for read errors
};

// What a file of st_mode `mode` is, for errors: "a regular file", "a FIFO", "a directory",
// "a character device", "a block device", "a socket", "a symbolic link".
std::string_view file_kind(std::uint32_t mode) noexcept;

// Opens `path` read-only without blocking and refuses anything but a regular file. Errors
// (ErrorCode::Io) name `what` (e.g. "replay script"), the path and, for a wrong kind, what it is:
// "replay script \"/tmp/s\" is a FIFO, not a regular file"; a missing file "... does not exist".
Result<RegularFile> open_regular_file(const std::filesystem::path& path, std::string_view what);

// The whole content of the regular file at `path`. A file larger than `max_bytes` (by its size or
// by what a read returns) is an ErrorCode::Limit error naming the file and the cap.
Result<std::string> read_regular_file(const std::filesystem::path& path, std::string_view what,
                                      std::size_t max_bytes = kMaxManifestFileBytes);

// At most the first `max_bytes` of the regular file at `path` (a "#!" line, a header): a longer
// file is not an error.
Result<std::string> read_regular_file_head(const std::filesystem::path& path, std::string_view what,
                                           std::size_t max_bytes);

}  // namespace kernex
