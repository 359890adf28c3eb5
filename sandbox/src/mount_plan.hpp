// The mounts of a policy's private namespace, collected while Build() decides them and ordered so
// that an inner mount is never covered by an outer one. Also the `.git` discovery they need.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "kernex/error.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {

// `inner` is `outer` or lies below it (lexically; both canonical or both lexical).
bool is_within(const std::filesystem::path& inner, const std::filesystem::path& outer);

class MountPlan {
 public:
  // A writable directory or file: bound onto itself noexec and nosuid (devices are left alone).
  Result<void> writable(const std::filesystem::path& path);
  // The workspace as an overlay mount (lowerdir: `path` itself), in place of its writable bind.
  // Every read-only bind below it becomes a LowerBind (finish()): taken from the real tree.
  void overlay(const std::filesystem::path& path, std::string data, std::string data_userns);
  // Kept read-only; noexec unless `exec` (an executable grant lies at or below it, or contains it).
  Result<void> read_only(const std::filesystem::path& path, bool exec);
  // Neither readable nor writable: an empty tmpfs over a directory, /dev/null (nodev) over a file.
  Result<void> mask(const std::filesystem::path& path);
  // A directory masked like mask(), but for the directories `keep` below it, which stay as they are
  // (their own mounts, deeper, still apply). Nested entries of `keep` are kept through the
  // outermost.
  Result<void> mask_keeping(const std::filesystem::path& dir,
                            const std::vector<std::filesystem::path>& keep);
  // Made a mount point so it can't be renamed or removed.
  void pin(const std::filesystem::path& path);
  // Every directory strictly between `root` and `path`.
  void pin_between(const std::filesystem::path& root, const std::filesystem::path& path);

  // Where a read-only bind or a mask keeps `path` from being written.
  bool kept_read_only(const std::filesystem::path& path) const;
  // Paths kept read-only or masked (for PolicyStatus).
  std::vector<std::filesystem::path> kept_paths() const;
  // Shallowest first; one mount per path (mask over read-only over writable over pin).
  std::vector<ProtectedMount> finish() const;

 private:
  enum Strength { kPin = 0, kWritable = 1, kReadOnly = 2, kMask = 3 };
  void put(const std::filesystem::path& path, Strength strength, ProtectedMount mount);
  // A writable bind lies strictly below `dir`.
  bool holds_writable(const std::filesystem::path& dir) const;
  std::map<std::filesystem::path, std::pair<Strength, ProtectedMount>> mounts_;
  std::optional<std::filesystem::path> overlay_;  // the overlaid workspace, when there is one
};

// `.git` entries below a writable directory, without following symlinks and without descending into
// a `.git`. Bounded (kGitScanDepth levels, kGitScanEntries directory entries per root): a deeper or
// larger tree is only partly scanned and `truncated` says so.
inline constexpr int kGitScanDepth = 8;
inline constexpr std::size_t kGitScanEntries = 50'000;
struct GitEntries {
  std::vector<std::filesystem::path> dirs;   // .git directories
  std::vector<std::filesystem::path> files;  // .git files ("gitdir: <path>")
  std::vector<std::filesystem::path> links;  // .git symlinks
  bool truncated = false;
};
GitEntries find_git_entries(const std::filesystem::path& root);

// The directory a `.git` file names (relative to the file's directory), canonical; nullopt if none.
std::optional<std::filesystem::path> gitfile_target(const std::filesystem::path& gitfile);
// The directory a gitdir's `commondir` file names, canonical; nullopt if there is none.
std::optional<std::filesystem::path> git_commondir(const std::filesystem::path& gitdir);

}  // namespace kernex::sandbox
