// Filesystem access below a directory descriptor that never follows a symlink: every component
// of a relative path is opened with O_NOFOLLOW, so neither a symlink planted in the upper layer
// nor one in the real tree can lead a read or a write elsewhere. Files are opened without
// blocking (O_NONBLOCK) and checked to be regular on the descriptor itself, so a FIFO or device
// is never read. Errors name the path through the caller's label ("upper layer", "real tree").
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::workspace::detail {

// An owned descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// A place for messages: "<what> \"<root>/<rel>\"" (JSON-quoted, so control characters in a
// hostile name never reach a terminal raw).
std::string label(std::string_view what, std::string_view root, std::string_view rel);

// "a/b/c" -> {"a", "b", "c"}; false for "", absolute paths, empty, "." or ".." components, NUL.
bool split_relative(std::string_view rel, std::vector<std::string_view>& parts);
std::string join(std::string_view dir, std::string_view name);     // "" + "a" = "a"
std::string_view parent_of(std::string_view rel);                  // "a/b" -> "a", "a" -> ""
std::string_view name_of(std::string_view rel);                    // "a/b" -> "b"
bool at_or_below(std::string_view path, std::string_view prefix);  // "a/b" is below "a" and ""

// Opens a directory the caller names (the real tree, the layer dir): symlinks in it are the
// caller's own choice and are followed.
Result<Fd> open_root(const std::string& path, std::string_view what);

// Opens directory `rel` ("" = root itself) below `root` without following any symlink. A missing
// component is ErrorCode::Io with errno_out = ENOENT; a symlink or non-directory component is
// refused naming it.
Result<Fd> open_dir_beneath(int root, std::string_view rel, const std::string& where,
                            int* errno_out = nullptr);

// The last directory opened below a root, kept open, so consecutive paths in one directory (as
// a sorted walk visits them) open it once. Only for a tree nothing else changes meanwhile.
class DirCache {
 public:
  // Like open_dir_beneath; the descriptor stays owned by the cache.
  Result<int> open(int root, std::string_view dir, const std::string& where);
  void clear() { fd_ = Fd(); }

 private:
  int root_ = -1;
  std::string path_;
  Fd fd_;
};

// lstat of `rel` below `root` (no symlink followed on the way): nullopt when it does not exist.
Result<std::optional<struct stat>> lstat_beneath(int root, std::string_view rel,
                                                 const std::string& where);

// Opens `name` in `dir` for reading when it is a regular file, else refuses naming what it is.
Result<Fd> open_regular_at(int dir, const std::string& name, const std::string& where,
                           struct stat* st);
// open_dir_beneath(parent) + open_regular_at(name).
Result<Fd> open_regular_beneath(int root, std::string_view rel, const std::string& where,
                                struct stat* st);

// The whole of `fd`, at most `cap` bytes (ErrorCode::Limit past it).
Result<std::string> read_all(int fd, std::uint64_t cap, const std::string& where);
// The target of the symlink `name` in `dir` (at most PATH_MAX bytes).
Result<std::string> read_link_at(int dir, const std::string& name, const std::string& where);

// read_link_at of `rel` below `root`.
Result<std::string> read_link_beneath(int root, std::string_view rel, const std::string& where);

// An xattr of `name` in `dir` without following it (through /proc/self/fd, so no path is
// resolved again), or of an open descriptor. nullopt when absent or unreadable.
std::optional<std::string> xattr_at(int dir, const std::string& name, const std::string& attr);
std::optional<std::string> xattr_fd(int fd, const std::string& attr);

struct DirEntry {
  std::string name;
  struct stat st;
};
// Every entry of the open directory `dir` (not "." or ".."), lstat'ed, sorted by name. More than
// `*budget` entries (decremented as they are read) is ErrorCode::Limit.
Result<std::vector<DirEntry>> list_dir(int dir, const std::string& where, std::size_t* budget);

// A name no one else picks: ".<base>.kernex-<16 hex>".
std::string temp_name(std::string_view base);

std::string errno_text(int err);

}  // namespace kernex::workspace::detail
