// No-follow, non-blocking access below a directory descriptor.
#include "beneath.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "kernex/files.hpp"
#include "kernex/json.hpp"

namespace kernex::workspace::detail {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string label(std::string_view what, std::string_view root, std::string_view rel) {
  std::string path(root);
  if (!rel.empty()) path = join(path, rel);
  return std::string(what) + " " + Json(path).dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool split_relative(std::string_view rel, std::vector<std::string_view>& parts) {
  parts.clear();
  if (rel.empty() || rel.front() == '/' || rel.find('\0') != std::string_view::npos) return false;
  std::size_t start = 0;
  while (start <= rel.size()) {
    const std::size_t slash = rel.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? rel.size() : slash;
    const std::string_view part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    parts.push_back(part);
    start = end + 1;
  }
  return true;
}

std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

std::string_view parent_of(std::string_view rel) {
  const std::size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
}

std::string_view name_of(std::string_view rel) {
  const std::size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? rel : rel.substr(slash + 1);
}

bool at_or_below(std::string_view path, std::string_view prefix) {
  if (prefix.empty()) return true;
  return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

std::string errno_text(int err) { return std::strerror(err); }

Result<Fd> open_root(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(ErrorCode::Io, label(what, path, "") + ": cannot open: " + errno_text(err));
  }
  return Fd(fd);
}

Result<Fd> open_dir_beneath(int root, std::string_view rel, const std::string& where,
                            int* errno_out) {
  Fd current(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (current.get() < 0) return fail(ErrorCode::Io, where + ": dup: " + errno_text(errno));
  if (rel.empty()) return current;
  std::vector<std::string_view> parts;
  if (!split_relative(rel, parts))
    return fail(ErrorCode::Parse, where + ": not a plain relative path");
  std::string walked;
  for (const std::string_view part : parts) {
    const std::string name(part);
    walked = join(walked, part);
    const int fd =
        ::openat(current.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (errno_out) *errno_out = err;
      if (err == ELOOP || err == ENOTDIR) {
        struct stat st {};
        const bool known = ::fstatat(current.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
        return fail(ErrorCode::Io,
                    where + ": component \"" + walked + "\" is " +
                        std::string(known ? file_kind(st.st_mode) : "not a directory") +
                        ", not a directory (never followed)");
      }
      return fail(ErrorCode::Io,
                  where + ": cannot open directory \"" + walked + "\": " + errno_text(err));
    }
    current = Fd(fd);
  }
  return current;
}

Result<int> DirCache::open(int root, std::string_view dir, const std::string& where) {
  if (fd_.get() < 0 || root_ != root || path_ != dir) {
    fd_ = Fd();
    KERNEX_ASSIGN_OR_RETURN(fd_, open_dir_beneath(root, dir, where));
    root_ = root;
    path_ = std::string(dir);
  }
  return fd_.get();
}

Result<std::optional<struct stat>> lstat_beneath(int root, std::string_view rel,
                                                 const std::string& where) {
  int err = 0;
  auto dir = open_dir_beneath(root, parent_of(rel), where, &err);
  if (!dir) {
    if (err == ENOENT || err == ENOTDIR || err == ELOOP) return std::optional<struct stat>();
    return std::unexpected(dir.error());
  }
  struct stat st {};
  const std::string name(name_of(rel));
  if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<struct stat>();
    return fail(ErrorCode::Io, where + ": lstat: " + errno_text(errno));
  }
  return std::optional<struct stat>(st);
}

Result<Fd> open_regular_at(int dir, const std::string& name, const std::string& where,
                           struct stat* st) {
  Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ELOOP) return fail(ErrorCode::Io, where + " is a symbolic link (never followed)");
    return fail(ErrorCode::Io, where + ": cannot open: " + errno_text(err));
  }
  struct stat local {};
  struct stat& s = st ? *st : local;
  if (::fstat(fd.get(), &s) != 0)
    return fail(ErrorCode::Io, where + ": fstat: " + errno_text(errno));
  if (!S_ISREG(s.st_mode))
    return fail(ErrorCode::Io,
                where + " is " + std::string(file_kind(s.st_mode)) + ", not a regular file");
  return fd;
}

Result<Fd> open_regular_beneath(int root, std::string_view rel, const std::string& where,
                                struct stat* st) {
  KERNEX_ASSIGN_OR_RETURN(Fd dir, open_dir_beneath(root, parent_of(rel), where));
  return open_regular_at(dir.get(), std::string(name_of(rel)), where, st);
}

Result<std::string> read_all(int fd, std::uint64_t cap, const std::string& where) {
  std::string out;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::Io, where + ": read: " + errno_text(errno));
    }
    if (n == 0) return out;
    if (out.size() + static_cast<std::uint64_t>(n) > cap)
      return fail(ErrorCode::Limit,
                  where + " is larger than " + std::to_string(cap) + " bytes (the cap)");
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

Result<std::string> read_link_at(int dir, const std::string& name, const std::string& where) {
  std::string target(PATH_MAX, '\0');
  const ssize_t n = ::readlinkat(dir, name.c_str(), target.data(), target.size());
  if (n < 0) return fail(ErrorCode::Io, where + ": readlink: " + errno_text(errno));
  if (static_cast<std::size_t>(n) >= target.size())
    return fail(ErrorCode::Limit, where + ": symlink target longer than PATH_MAX");
  target.resize(static_cast<std::size_t>(n));
  return target;
}

Result<std::string> read_link_beneath(int root, std::string_view rel, const std::string& where) {
  KERNEX_ASSIGN_OR_RETURN(Fd dir, open_dir_beneath(root, parent_of(rel), where));
  return read_link_at(dir.get(), std::string(name_of(rel)), where);
}

namespace {

std::optional<std::string> xattr_value(auto&& get) {
  char buffer[4096];
  const ssize_t n = get(buffer, sizeof buffer);
  if (n < 0) return std::nullopt;
  return std::string(buffer, static_cast<std::size_t>(n));
}

}  // namespace

std::optional<std::string> xattr_at(int dir, const std::string& name, const std::string& attr) {
  const std::string path = "/proc/self/fd/" + std::to_string(dir) + "/" + name;
  return xattr_value([&](char* buf, std::size_t size) {
    return ::lgetxattr(path.c_str(), attr.c_str(), buf, size);
  });
}

std::optional<std::string> xattr_fd(int fd, const std::string& attr) {
  return xattr_value(
      [&](char* buf, std::size_t size) { return ::fgetxattr(fd, attr.c_str(), buf, size); });
}

Result<std::vector<DirEntry>> list_dir(int dir, const std::string& where, std::size_t* budget) {
  const int copy = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return fail(ErrorCode::Io, where + ": cannot list: " + errno_text(errno));
  DIR* stream = ::fdopendir(copy);
  if (!stream) {
    ::close(copy);
    return fail(ErrorCode::Io, where + ": cannot list: " + errno_text(errno));
  }
  std::vector<DirEntry> out;
  errno = 0;
  while (const dirent* e = ::readdir(stream)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (*budget == 0) {
      ::closedir(stream);
      return fail(ErrorCode::Limit, where + ": more entries than the cap allows");
    }
    --*budget;
    DirEntry entry{std::string(name), {}};
    if (::fstatat(dir, entry.name.c_str(), &entry.st, AT_SYMLINK_NOFOLLOW) != 0) {
      const int err = errno;
      ::closedir(stream);
      return fail(ErrorCode::Io, where + ": lstat \"" + entry.name + "\": " + errno_text(err));
    }
    out.push_back(std::move(entry));
  }
  ::closedir(stream);
  std::sort(out.begin(), out.end(),
            [](const DirEntry& x, const DirEntry& y) { return x.name < y.name; });
  return out;
}

std::string temp_name(std::string_view base) {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    // Never fails for 8 bytes once the pool is up; the pid and a counter keep names distinct.
    static unsigned counter = 0;
    const unsigned v = static_cast<unsigned>(::getpid()) * 2654435761u + ++counter;
    std::memcpy(bytes, &v, sizeof v);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = ".";
  out += base.substr(0, 200);
  out += ".kernex-";
  for (const unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace kernex::workspace::detail
