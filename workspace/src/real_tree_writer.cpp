// No-follow, staged, batched-durable writes into the real tree.
#include "real_tree_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kernex::workspace::detail {

namespace {

// Set-user-ID and set-group-ID bits written by a sandboxed tool never reach the real tree.
constexpr std::uint32_t kModeMask = 01777;

Error io_error(const std::string& where, const std::string& what, int err) {
  return Error(ErrorCode::Io, where + ": " + what + ": " + errno_text(err));
}

}  // namespace

std::optional<std::string> symlink_escape(std::string_view link_path, std::string_view target) {
  if (target.empty()) return "its target is empty";
  if (target.front() == '/')
    return "its target is absolute, so it points outside the workspace (never followed)";
  std::size_t depth = 0;
  for (std::string_view dir = parent_of(link_path); !dir.empty(); dir = parent_of(dir)) ++depth;
  std::size_t start = 0;
  while (start <= target.size()) {
    const std::size_t slash = target.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? target.size() : slash;
    const std::string_view part = target.substr(start, end - start);
    if (part == "..") {
      if (depth == 0) return "its target climbs out of the workspace (never followed)";
      --depth;
    } else if (!part.empty() && part != ".") {
      ++depth;
    }
    start = end + 1;
  }
  return std::nullopt;
}

RealTreeWriter::RealTreeWriter(const Layers& layers, Trash& trash)
    : layers_(layers), trash_(trash) {}

RealTreeWriter::~RealTreeWriter() {
  for (const Staged& s : staged_) {
    if (auto dir = dir_fd(s.parent); dir && !s.temp.empty()) ::unlinkat(*dir, s.temp.c_str(), 0);
  }
}

Result<int> RealTreeWriter::dir_fd(std::string_view dir) {
  if (cached_.get() < 0 || cached_path_ != dir) {
    cached_ = Fd();
    KERNEX_ASSIGN_OR_RETURN(cached_, open_dir_beneath(layers_.lower, dir, layers_.in_lower(dir)));
    cached_path_ = std::string(dir);
  }
  return cached_.get();
}

Result<int> RealTreeWriter::parent(std::string_view path) { return dir_fd(parent_of(path)); }

// As root, a new entry takes its parent's owner and a replaced one keeps its owner, so accepting
// as root does not hand a user's files to root.
void RealTreeWriter::own_like(int dir, const std::string& name, bool replacing, int fd) {
  if (::geteuid() != 0) return;
  struct stat st {};
  if (!replacing || ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (::fstat(dir, &st) != 0) return;
  }
  if (fd >= 0)
    (void)::fchown(fd, st.st_uid, st.st_gid);
  else
    (void)::fchownat(dir, name.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
}

// Moves the file or symlink `name` in `dir` into the trash: false when it cannot go there. A
// directory that took its place meanwhile is put back and refused, as unlink would refuse it.
Result<bool> RealTreeWriter::trash_entry(int dir, const std::string& name,
                                         const std::string& where) {
  struct stat before = {};
  if (::fstatat(dir, name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(before.st_mode) ||
      !trash_.take(dir, name))
    return false;  // unlink says what is wrong
  const std::string taken = trash_.last();
  struct stat st = {};
  if (::fstatat(trash_.fd(), taken.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    ::renameat2(trash_.fd(), taken.c_str(), dir, name.c_str(), RENAME_NOREPLACE);
    return fail(ErrorCode::Io, where + " is a directory now; not removed");
  }
  return true;
}

Result<void> RealTreeWriter::remove(const std::string& path, EntryType type) {
  KERNEX_ASSIGN_OR_RETURN(int dir, parent(path));
  const std::string name(name_of(path));
  if (type != EntryType::Dir) {
    KERNEX_ASSIGN_OR_RETURN(const bool trashed, trash_entry(dir, name, layers_.in_lower(path)));
    if (trashed) {
      changed_dirs_.insert(std::string(parent_of(path)));
      return {};
    }
  }
  if (::unlinkat(dir, name.c_str(), type == EntryType::Dir ? AT_REMOVEDIR : 0) != 0 &&
      errno != ENOENT) {
    const int err = errno;
    if (err == ENOTEMPTY || err == EEXIST)
      return fail(ErrorCode::Io, layers_.in_lower(path) +
                                     " holds entries the overlay did not record; not removed");
    return std::unexpected(io_error(layers_.in_lower(path), "cannot remove", err));
  }
  changed_dirs_.insert(std::string(parent_of(path)));
  return {};
}

Result<void> RealTreeWriter::make_dir(const std::string& path, std::uint32_t mode) {
  KERNEX_ASSIGN_OR_RETURN(int dir, parent(path));
  const std::string name(name_of(path));
  if (::mkdirat(dir, name.c_str(), 0700) == 0) {
    own_like(dir, name, false, -1);
    changed_dirs_.insert(std::string(parent_of(path)));
  } else if (errno != EEXIST) {
    return std::unexpected(io_error(layers_.in_lower(path), "cannot create directory", errno));
  }
  return set_mode(path, mode);
}

Result<void> RealTreeWriter::set_mode(const std::string& path, std::uint32_t mode) {
  KERNEX_ASSIGN_OR_RETURN(int dir, parent(path));
  const std::string name(name_of(path));
  const Fd fd(::openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0)
    return std::unexpected(io_error(layers_.in_lower(path), "cannot open", errno));
  if (S_ISLNK(st.st_mode)) return {};  // a symlink's mode means nothing
  // chmod through /proc on the O_PATH descriptor: the inode opened, never a path again.
  const std::string proc = "/proc/self/fd/" + std::to_string(fd.get());
  if (::chmod(proc.c_str(), mode & kModeMask) != 0)
    return std::unexpected(io_error(layers_.in_lower(path), "cannot chmod", errno));
  return {};
}

Result<void> RealTreeWriter::copy_file(const NewEntry& next, int dir, const std::string& temp,
                                       const std::string& name, const std::string& where) {
  const int root = next.from_lower ? layers_.lower : layers_.upper;
  const std::string src_where =
      next.from_lower ? layers_.in_lower(next.source) : layers_.in_upper(next.source);
  (void)root;
  struct stat st = {};
  KERNEX_ASSIGN_OR_RETURN(Fd in, open_source(layers_, next, &st));
  KERNEX_RETURN_IF_ERROR(check_size(st, src_where));
  const Fd out(
      ::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (out.get() < 0) return std::unexpected(io_error(where, "cannot create a temp file", errno));
  std::uint64_t total = 0;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(in.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(io_error(src_where, "read", errno));
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    if (total > layers_.limits->max_accept_file_bytes)
      return fail(ErrorCode::Limit, src_where + " grew past the accept cap while read");
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out.get(), buffer + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return std::unexpected(io_error(where, "write", errno));
      done += w;
    }
  }
  if (::fchmod(out.get(), next.mode & kModeMask) != 0)
    return std::unexpected(io_error(where, "chmod", errno));
  own_like(dir, name, true, out.get());
  return {};
}

Result<void> RealTreeWriter::stage(const std::string& path, const NewEntry& next, std::size_t id) {
  KERNEX_ASSIGN_OR_RETURN(int dir, parent(path));
  Staged staged{std::string(parent_of(path)),
                temp_name(name_of(path)),
                std::string(name_of(path)),
                id,
                next,
                0,
                0};
  const std::string where = layers_.in_lower(path);
  if (next.type == EntryType::Symlink) {
    auto target = new_link_target(layers_, next);
    if (!target) return std::unexpected(target.error());
    if (::symlinkat(target->c_str(), dir, staged.temp.c_str()) != 0)
      return std::unexpected(io_error(where, "cannot create symlink", errno));
    staged_.push_back(std::move(staged));
    return {};
  }
  if (!next.from_lower) {
    KERNEX_ASSIGN_OR_RETURN(const bool movable, vet_for_move(staged, dir));
    if (movable) {
      staged.temp.clear();
      staged_.push_back(std::move(staged));
      return {};
    }
  }
  if (auto made = copy_file(next, dir, staged.temp, staged.name, where); !made) {
    ::unlinkat(dir, staged.temp.c_str(), 0);
    return made;
  }
  staged_.push_back(std::move(staged));
  return {};
}

Result<void> RealTreeWriter::check_size(const struct stat& st, const std::string& where) const {
  if (static_cast<std::uint64_t>(st.st_size) <= layers_.limits->max_accept_file_bytes) return {};
  return fail(ErrorCode::Limit, where + " is larger than " +
                                    std::to_string(layers_.limits->max_accept_file_bytes) +
                                    " bytes (the accept cap)");
}

// The fast way, when upper/ and the real tree share a filesystem: the upper file itself lands
// (see land_moved), so nothing is copied and nothing is left in upper/ to delete. Here it gets
// its mode and owner and loses its xattrs (overlayfs' own, and anything the tool set). A file
// with other hard links is copied instead (it must not stay shared with upper/), and so is one
// on another filesystem. `s` remembers the inode vetted, as upper/ is hostile.
Result<bool> RealTreeWriter::vet_for_move(Staged& s, int dir) {
  const std::string where = layers_.in_upper(s.next.source);
  struct stat st = {}, dir_st = {};
  KERNEX_ASSIGN_OR_RETURN(Fd in, open_source(layers_, s.next, &st));
  KERNEX_RETURN_IF_ERROR(check_size(st, where));
  if (st.st_nlink != 1 || ::fstat(dir, &dir_st) != 0 || dir_st.st_dev != st.st_dev) return false;
  if (::fchmod(in.get(), s.next.mode & kModeMask) != 0 || !drop_xattrs(in.get())) return false;
  own_like(dir, s.name, true, in.get());
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  return true;
}

// Extended attributes stay behind in upper/. False when one cannot be removed (the file is then
// copied, which takes none).
bool RealTreeWriter::drop_xattrs(int fd) {
  char names[4096];
  const ssize_t n = ::flistxattr(fd, names, sizeof names);
  if (n < 0) return errno == ENOTSUP;
  for (ssize_t at = 0; at < n;) {
    const char* attr = names + at;
    if (::fremovexattr(fd, attr) != 0 && errno != ENODATA) return false;
    at += static_cast<ssize_t>(std::strlen(attr)) + 1;
  }
  return true;
}

// Renames the vetted upper file over its target in one step: RENAME_EXCHANGE when there is one
// (the old file, now in upper/, then goes to the trash), RENAME_NOREPLACE when not. If what arrived
// is not the inode vetted, the exchange is undone (or the stranger removed) and the path refused.
// Filesystems without these flags, or a mount boundary between the two, fall back to a copy.
Result<void> RealTreeWriter::land_moved(int dir, const Staged& s) {
  const std::string where = layers_.in_upper(s.next.source);
  const std::string path = join(s.parent, s.name);
  KERNEX_ASSIGN_OR_RETURN(int up,
                          layers_.upper_dirs.open(layers_.upper, parent_of(s.next.source), where));
  const std::string src(name_of(s.next.source));
  struct stat old = {};
  const bool exists = ::fstatat(dir, s.name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && S_ISDIR(old.st_mode))
    return fail(ErrorCode::Io, layers_.in_lower(path) + " is a directory; not replaced");
  const unsigned flags = exists ? RENAME_EXCHANGE : RENAME_NOREPLACE;
  if (::renameat2(up, src.c_str(), dir, s.name.c_str(), flags) != 0) {
    if (errno != EXDEV && errno != EINVAL)
      return std::unexpected(io_error(layers_.in_lower(path), "cannot move into place", errno));
    return copy_and_land(dir, s);
  }
  struct stat now = {};
  if (::fstatat(dir, s.name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != s.dev ||
      now.st_ino != s.ino || !S_ISREG(now.st_mode) || now.st_nlink != 1) {
    if (exists)
      ::renameat2(up, src.c_str(), dir, s.name.c_str(), RENAME_EXCHANGE);
    else
      ::unlinkat(dir, s.name.c_str(), 0);
    return fail(ErrorCode::Io, where + " was replaced while it was being accepted");
  }
  if (exists && !trash_.take(up, src)) ::unlinkat(up, src.c_str(), 0);
  return {};
}

// The copy fallback after the batch's syncfs: this one file is fsync'ed itself.
Result<void> RealTreeWriter::copy_and_land(int dir, const Staged& s) {
  const std::string path = join(s.parent, s.name);
  KERNEX_RETURN_IF_ERROR(copy_file(s.next, dir, s.temp, s.name, layers_.in_lower(path)));
  const Fd fd(::openat(dir, s.temp.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0 ||
      ::renameat(dir, s.temp.c_str(), dir, s.name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir, s.temp.c_str(), 0);
    return std::unexpected(io_error(layers_.in_lower(path), "cannot copy into place", err));
  }
  return {};
}

std::vector<std::pair<std::size_t, Error>> RealTreeWriter::commit() {
  std::vector<std::pair<std::size_t, Error>> failed;
  if (!staged_.empty() && ::syncfs(layers_.lower) != 0) {
    const Error e(ErrorCode::Io, "syncfs of the real tree failed: " + errno_text(errno));
    for (const Staged& s : staged_) failed.emplace_back(s.id, e);
    return failed;  // the destructor removes the temp files
  }
  std::vector<Staged> staged = std::move(staged_);
  staged_.clear();
  for (const Staged& s : staged) {
    const std::string path = join(s.parent, s.name);
    auto dir = parent(path);
    if (!dir) {
      failed.emplace_back(s.id, dir.error());
      continue;
    }
    if (s.temp.empty()) {
      if (auto landed = land_moved(*dir, s); !landed) {
        failed.emplace_back(s.id, landed.error());
        continue;
      }
    } else if (::renameat(*dir, s.temp.c_str(), *dir, s.name.c_str()) != 0) {
      failed.emplace_back(s.id,
                          io_error(layers_.in_lower(path), "cannot rename into place", errno));
      ::unlinkat(*dir, s.temp.c_str(), 0);
      continue;
    }
    changed_dirs_.insert(s.parent);
  }
  for (const std::string& d : changed_dirs_) {
    if (auto fd = open_dir_beneath(layers_.lower, d, layers_.in_lower(d)); fd) ::fsync(fd->get());
  }
  changed_dirs_.clear();
  return failed;
}

}  // namespace kernex::workspace::detail
