#include "mount_plan.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

#include "kernex/files.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto o = outer.begin();
  auto i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

namespace {

// A remount must keep the flags the mount already has (in a user namespace they are locked), and
// can only add to them.
Result<unsigned long> kept_flags(const fs::path& path) {
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) {
    return fail(ErrorCode::Sandbox,
                "cannot inspect the mount of '" + path.string() + "': " + std::strerror(errno));
  }
  return vfs.f_flag &
         (ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_NOATIME | ST_NODIRATIME | ST_RELATIME | ST_RDONLY);
}

constexpr unsigned long kRemount = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;

}  // namespace

void MountPlan::put(const fs::path& path, Strength strength, ProtectedMount mount) {
  auto it = mounts_.find(path);
  if (it != mounts_.end() && it->second.first >= strength) return;
  mounts_[path] = {strength, std::move(mount)};
}

Result<void> MountPlan::writable(const fs::path& path) {
  std::error_code ec;
  const auto type = fs::status(path, ec).type();
  if (type != fs::file_type::directory && type != fs::file_type::regular)
    return {};  // a device such as /dev/tty
  KERNEX_ASSIGN_OR_RETURN(auto kept, kept_flags(path));
  put(path, kWritable,
      {path.string(), MountKind::Bind, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC | kept});
  return {};
}

void MountPlan::overlay(const fs::path& path, std::string data, std::string data_userns) {
  auto it = mounts_.find(path);
  if (it != mounts_.end() && it->second.first > kWritable) return;  // masked or read-only whole
  ProtectedMount mount{path.string(), MountKind::Overlay, 0};
  mount.data = std::move(data);
  mount.data_userns = std::move(data_userns);
  mounts_[path] = {kWritable, std::move(mount)};
  overlay_ = path;
}

Result<void> MountPlan::read_only(const fs::path& path, bool exec) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode))
    return {};  // a bind would follow the link out
  KERNEX_ASSIGN_OR_RETURN(auto kept, kept_flags(path));
  put(path, kReadOnly,
      {path.string(), MountKind::Bind, kRemount | MS_RDONLY | (exec ? 0 : MS_NOEXEC) | kept});
  return {};
}

Result<void> MountPlan::mask(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  if (S_ISDIR(st.st_mode)) {
    put(path, kMask, {path.string(), MountKind::MaskDir, 0});
    return {};
  }
  KERNEX_ASSIGN_OR_RETURN(auto kept, kept_flags("/dev/null"));
  put(path, kMask, {path.string(), MountKind::MaskFile, kRemount | MS_RDONLY | MS_NOEXEC | kept});
  return {};
}

Result<void> MountPlan::mask_keeping(const fs::path& dir, const std::vector<fs::path>& keep) {
  ProtectedMount mount{dir.string(), MountKind::MaskDir, 0};
  for (const auto& k : keep) {
    if (k == dir || !is_within(k, dir)) {
      return fail(ErrorCode::Sandbox,
                  "cannot keep '" + k.string() + "' inside the mask of '" + dir.string() + "'");
    }
    const bool nested = std::any_of(keep.begin(), keep.end(),
                                    [&](const fs::path& o) { return o != k && is_within(k, o); });
    if (nested || std::find(mount.keep.begin(), mount.keep.end(), k.string()) != mount.keep.end())
      continue;
    mount.keep.push_back(k.string());
  }
  if (mount.keep.size() > kMaxKeptInMask) {
    return fail(ErrorCode::Sandbox, "more than " + std::to_string(kMaxKeptInMask) +
                                        " grants inside '" + dir.string() +
                                        "', which is masked around them");
  }
  put(dir, kMask, std::move(mount));
  return {};
}

void MountPlan::pin(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(path, ec))) return;
  put(path, kPin, {path.string(), MountKind::Bind, 0});
}

void MountPlan::pin_between(const fs::path& root, const fs::path& path) {
  if (!is_within(path, root)) return;
  fs::path dir = root;
  const fs::path rel = path.lexically_relative(root);
  for (auto it = rel.begin(); it != rel.end(); ++it) {
    if (std::next(it) == rel.end()) break;  // `path` itself is mounted by its caller
    dir /= *it;
    pin(dir);
  }
}

bool MountPlan::kept_read_only(const fs::path& path) const {
  return std::any_of(mounts_.begin(), mounts_.end(), [&](const auto& kv) {
    return kv.second.first >= kReadOnly && is_within(path, kv.first);
  });
}

std::vector<fs::path> MountPlan::kept_paths() const {
  std::vector<fs::path> out;
  for (const auto& [path, entry] : mounts_) {
    if (entry.first >= kReadOnly) out.push_back(path);
  }
  return out;
}

bool MountPlan::holds_writable(const fs::path& dir) const {
  return std::any_of(mounts_.begin(), mounts_.end(), [&](const auto& kv) {
    return kv.second.first == kWritable && kv.first != dir && is_within(kv.first, dir);
  });
}

std::vector<ProtectedMount> MountPlan::finish() const {
  std::vector<std::pair<std::size_t, ProtectedMount>> ordered;
  for (const auto& [path, entry] : mounts_) {
    ordered.emplace_back(static_cast<std::size_t>(std::distance(path.begin(), path.end())),
                         entry.second);
    // Inside an overlay, what is kept read-only is the real tree's: the kernel read and trusted
    // those bytes, and whatever an earlier run left in the upper layer over them stays unseen.
    // Not a directory with a writable bind below it (git_writes' submodule gitdirs in modules/):
    // that bind must reach the overlay, not the real tree, so its parents are the overlay's too.
    if (overlay_ && entry.first == kReadOnly && path != *overlay_ && is_within(path, *overlay_) &&
        !holds_writable(path))
      ordered.back().second.kind = MountKind::LowerBind;
  }
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ProtectedMount> out;
  for (auto& [depth, mount] : ordered) out.push_back(std::move(mount));
  return out;
}

GitEntries find_git_entries(const fs::path& root) {
  GitEntries out;
  std::deque<std::pair<fs::path, int>> queue{{root, 0}};
  std::size_t seen = 0;
  while (!queue.empty()) {
    auto [dir, depth] = queue.front();
    queue.pop_front();
    std::error_code ec;
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (++seen > kGitScanEntries) {
        out.truncated = true;
        return out;
      }
      const fs::path& p = it->path();
      std::error_code sec;
      const auto st = it->symlink_status(sec);
      if (sec) continue;
      if (p.filename() == ".git") {
        if (fs::is_symlink(st))
          out.links.push_back(p);
        else if (fs::is_directory(st))
          out.dirs.push_back(p);
        else
          out.files.push_back(p);
        continue;
      }
      if (fs::is_directory(st)) {
        if (depth + 1 < kGitScanDepth)
          queue.emplace_back(p, depth + 1);
        else
          out.truncated = true;
      }
    }
  }
  return out;
}

namespace {

std::optional<fs::path> read_dir_reference(const fs::path& file, std::string_view prefix) {
  // A workspace's .git file is the workspace owner's: a FIFO there must not hang the plan.
  auto head = read_regular_file_head(file, "git reference", 4096);
  if (!head || head->empty()) return std::nullopt;
  std::string line = head->substr(0, head->find('\n'));
  if (!line.starts_with(prefix)) return std::nullopt;
  line.erase(0, prefix.size());
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  while (!line.empty() && line.front() == ' ') line.erase(0, 1);
  if (line.empty()) return std::nullopt;
  fs::path target = fs::path(line).is_absolute() ? fs::path(line) : file.parent_path() / line;
  std::error_code ec;
  fs::path canonical = fs::canonical(target, ec);
  if (ec || !fs::is_directory(canonical, ec)) return std::nullopt;
  return canonical;
}

}  // namespace

std::optional<fs::path> gitfile_target(const fs::path& gitfile) {
  return read_dir_reference(gitfile, "gitdir:");
}

std::optional<fs::path> git_commondir(const fs::path& gitdir) {
  return read_dir_reference(gitdir / "commondir", "");
}

}  // namespace kernex::sandbox
