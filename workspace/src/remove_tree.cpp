// Deleting a hostile tree: no symlink followed (unlinkat never follows; directories are opened
// O_NOFOLLOW), directories without access opened up through their own descriptor, and subtrees
// deeper than a bound moved up to the top before going on, so neither descriptors nor the stack
// grow with a tree's depth.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "overlay_state.hpp"

namespace kernex::workspace::detail {

namespace {

constexpr std::size_t kMaxDepth = 64;

struct Remover {
  int top;                           // where deep subtrees are moved to
  std::vector<std::string> pending;  // their names there
  std::string where;
};

Result<std::vector<std::string>> names_in(int dir, const std::string& where) {
  const int copy = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* stream = copy < 0 ? nullptr : ::fdopendir(copy);
  if (!stream) {
    const int err = errno;
    if (copy >= 0) ::close(copy);
    return fail(ErrorCode::Io, where + ": cannot list: " + errno_text(err));
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(stream)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(stream);
  return names;
}

// Opens directory `name` in `dir`; one this process may not enter is made 0700 first (through an
// O_PATH descriptor, so a symlink swapped in is never chmod'ed through).
Result<Fd> open_for_removal(int dir, const std::string& name, const std::string& where) {
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(dir, name.c_str(), flags);
  if (fd < 0 && errno == EACCES) {
    const Fd path(::openat(dir, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    const std::string proc = "/proc/self/fd/" + std::to_string(path.get());
    if (path.get() >= 0 && ::chmod(proc.c_str(), 0700) == 0)
      fd = ::openat(dir, name.c_str(), flags);
    else
      errno = EACCES;
  }
  if (fd < 0) return fail(ErrorCode::Io, where + ": cannot open to remove: " + errno_text(errno));
  return Fd(fd);
}

Result<void> remove_entry(Remover& r, int dir, const std::string& name, const std::string& rel,
                          std::size_t depth) {
  if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) return {};
  if (errno != EISDIR && errno != EPERM)
    return fail(ErrorCode::Io, r.where + ": cannot remove \"" + rel + "\": " + errno_text(errno));
  if (depth >= kMaxDepth) {
    const std::string moved = temp_name("deep");
    if (::renameat(dir, name.c_str(), r.top, moved.c_str()) != 0)
      return fail(ErrorCode::Io,
                  r.where + ": cannot move \"" + rel + "\" up: " + errno_text(errno));
    r.pending.push_back(moved);
    return {};
  }
  const std::string where = r.where + ": \"" + rel + "\"";
  {
    KERNEX_ASSIGN_OR_RETURN(Fd child, open_for_removal(dir, name, where));
    KERNEX_ASSIGN_OR_RETURN(auto names, names_in(child.get(), where));
    for (const std::string& n : names)
      KERNEX_RETURN_IF_ERROR(remove_entry(r, child.get(), n, join(rel, n), depth + 1));
  }
  if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    return fail(ErrorCode::Io, where + ": cannot remove: " + errno_text(errno));
  return {};
}

}  // namespace

Result<void> remove_tree(int dir, const std::string& name, const std::string& where) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return fail(ErrorCode::Io, where + ": " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir, name.c_str(), 0) != 0)
      return fail(ErrorCode::Io, where + ": cannot remove: " + errno_text(errno));
    return {};
  }
  {
    KERNEX_ASSIGN_OR_RETURN(Fd top, open_for_removal(dir, name, where));
    Remover r{top.get(), {}, where};
    KERNEX_ASSIGN_OR_RETURN(auto names, names_in(top.get(), where));
    for (const std::string& n : names) KERNEX_RETURN_IF_ERROR(remove_entry(r, top.get(), n, n, 1));
    while (!r.pending.empty()) {
      const std::string moved = r.pending.back();
      r.pending.pop_back();
      KERNEX_RETURN_IF_ERROR(remove_entry(r, top.get(), moved, moved, 1));
    }
  }
  if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0)
    return fail(ErrorCode::Io, where + ": cannot remove: " + errno_text(errno));
  return {};
}

}  // namespace kernex::workspace::detail
