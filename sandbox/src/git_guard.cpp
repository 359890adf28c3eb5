#include "git_guard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "git_index.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;

namespace {

constexpr int kModuleDepth = 4;  // modules/a/b/c/d: deeper submodule names stay read-only

Result<void> refuse_link(const fs::path& path) {
  return fail(ErrorCode::Sandbox,
              "git_writes: '" + path.string() +
                  "' is a symlink; git would follow it, and a sandboxed process could replace the "
                  "link itself, so it can't be kept read-only. Replace it by the file or "
                  "directory it names, or leave git_writes off");
}

// What `path` is now, without following a link: 0 when it doesn't exist.
Result<mode_t> kind_of(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return st.st_mode & S_IFMT;
  if (errno == ENOENT) return mode_t{0};
  return fail(ErrorCode::Sandbox,
              "git_writes: cannot inspect '" + path.string() + "': " + std::strerror(errno));
}

Result<void> cannot_make(const fs::path& path, int err) {
  return fail(ErrorCode::Sandbox, "git_writes: cannot make '" + path.string() +
                                      "' so that it can be kept read-only: " + std::strerror(err));
}

// An empty file where there is none (O_EXCL: never through a link a tool left there).
Result<void> ensure_file(const fs::path& path) {
  KERNEX_ASSIGN_OR_RETURN(const mode_t kind, kind_of(path));
  if (kind == S_IFLNK) return refuse_link(path);
  if (kind != 0) return {};
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno != EEXIST) return cannot_make(path, errno);
  if (fd >= 0) ::close(fd);
  KERNEX_ASSIGN_OR_RETURN(const mode_t made, kind_of(path));
  if (made == S_IFLNK) return refuse_link(path);
  return {};
}

// The directory and its missing parents below `gitdir`, none of them a link.
Result<void> ensure_dir(const fs::path& gitdir, const fs::path& rel) {
  fs::path dir = gitdir;
  for (const auto& part : rel) {
    dir /= part;
    KERNEX_ASSIGN_OR_RETURN(const mode_t kind, kind_of(dir));
    if (kind == S_IFLNK) return refuse_link(dir);
    if (kind != 0) continue;  // a directory, or a file bound read-only as it is
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return cannot_make(dir, errno);
    KERNEX_ASSIGN_OR_RETURN(const mode_t made, kind_of(dir));
    if (made == S_IFLNK) return refuse_link(dir);
  }
  return {};
}

// Submodule gitdirs below `dir` (a directory holding HEAD), not following links.
void find_module_gitdirs(const fs::path& dir, int depth, std::vector<fs::path>& out) {
  if (depth > kModuleDepth) return;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (!fs::is_directory(it->symlink_status(sec))) continue;
    if (fs::exists(fs::symlink_status(it->path() / "HEAD", sec)))
      out.push_back(it->path());
    else
      find_module_gitdirs(it->path(), depth + 1, out);
  }
}

// `rel` (an index path, hostile: the index may have been written by a tool) as the directory below
// `worktree` it names, each missing component made, none a link; nullopt when it can't be.
std::optional<fs::path> gitlink_dir(const fs::path& worktree, const std::string& rel) {
  if (rel.empty() || rel.size() > 4096 || rel.front() == '/') return std::nullopt;
  fs::path dir = worktree;
  for (const auto& part : fs::path(rel)) {
    if (part.empty() || part == "." || part == ".." || part == ".git") return std::nullopt;
    dir /= part;
    auto kind = kind_of(dir);
    if (!kind) return std::nullopt;
    if (*kind == 0 && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return std::nullopt;
    kind = kind_of(dir);
    if (!kind || *kind != S_IFDIR) return std::nullopt;
  }
  return dir;
}

}  // namespace

Result<void> guard_gitlinks(MountPlan& plan, const fs::path& worktree, const fs::path& gitdir,
                            std::vector<std::string>& warnings) {
  const Gitlinks links = read_gitlinks(gitdir);
  if (links.unreadable) {
    warnings.push_back("the git index of '" + gitdir.string() +
                       "' could not be read: the directories of submodules not checked out there "
                       "stay writable (a .git planted in one runs on the next git status)");
  }
  if (links.paths.size() > kMaxGitlinks) {
    warnings.push_back("the git index of '" + gitdir.string() + "' records " +
                       std::to_string(links.paths.size()) + " submodules; only the first " +
                       std::to_string(kMaxGitlinks) + " not checked out are kept read-only");
  }
  std::size_t kept = 0;
  for (const auto& rel : links.paths) {
    if (kept == kMaxGitlinks) break;
    const auto dir = gitlink_dir(worktree, rel);
    if (!dir) continue;
    KERNEX_ASSIGN_OR_RETURN(const mode_t dotgit, kind_of(*dir / ".git"));
    if (dotgit != 0) continue;  // checked out: its .git is found and protected by the scan
    plan.pin_between(worktree, *dir);
    KERNEX_RETURN_IF_ERROR(plan.read_only(*dir, false));
    ++kept;
  }
  return {};
}

Result<std::vector<fs::path>> guard_writable_gitdir(MountPlan& plan, const fs::path& gitdir) {
  plan.pin(gitdir);
  for (const char* name : kGitGuardedFiles) {
    KERNEX_RETURN_IF_ERROR(ensure_file(gitdir / name));
    KERNEX_RETURN_IF_ERROR(plan.read_only(gitdir / name, false));
  }
  for (const char* name : kGitGuardedIfPresent) {
    KERNEX_ASSIGN_OR_RETURN(const mode_t kind, kind_of(gitdir / name));
    if (kind == S_IFLNK) return std::unexpected(refuse_link(gitdir / name).error());
    KERNEX_RETURN_IF_ERROR(plan.read_only(gitdir / name, false));
  }
  for (const char* name : kGitGuardedDirs) {
    KERNEX_RETURN_IF_ERROR(ensure_dir(gitdir, name));
    // objects/ is pinned: renamed away, it would take the read-only objects/info with it.
    plan.pin_between(gitdir, gitdir / name);
    KERNEX_RETURN_IF_ERROR(plan.read_only(gitdir / name, false));
  }
  std::vector<fs::path> modules;
  find_module_gitdirs(gitdir / "modules", 1, modules);
  return modules;
}

}  // namespace kernex::sandbox
