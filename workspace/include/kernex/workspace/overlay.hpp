// An overlay workspace's review side: the layers on disk of one session, read the way overlayfs
// wrote them, compared with the real tree (the lower layer) and applied to it or dropped.
//
// A session's layer directory holds
//   upper/                 what the session wrote (overlayfs' upper layer)
//   work/                  overlayfs' work directory
//   manifest               every entry of the real tree at session start (see manifest.hpp)
//   .kernex-overlay.json   {"version", "lower", "session", "created_ms", "xattr"}
// Whoever mounts the overlay uses upper/ and work/ with the real tree as lowerdir. Reviewing and
// accepting are meant for a layer that is not mounted at that moment (overlayfs leaves changes to
// its layers while mounted undefined).
//
// What is read from upper/ (overlayfs' on-disk format, one xattr namespace per layer: "trusted"
// when mounted by root, "user" with the userxattr option in a user namespace):
//   - whiteouts: a character device 0/0, or a zero-size file with <ns>.overlay.whiteout;
//   - opaque directories: <ns>.overlay.opaque = "y" ("x" only says the directory may hold xattr
//     whiteouts: not opaque);
//   - redirect_dir: a directory with <ns>.overlay.redirect (an absolute path from the layer root or
//     a name in the same parent) merges the lower directory it names (a renamed directory);
//     without redirect_dir (overlayfs' default) a renamed directory is a new directory plus a
//     whiteout, which is read as such;
//   - metacopy (off by default) is not supported: a file carrying <ns>.overlay.metacopy makes
//     status fail with an Unsupported error naming it.
// Every file under the layer directory is hostile (a sandboxed tool wrote it): nothing there is
// followed if it is a symlink, opened if it is not a regular file, or read past a cap; anything
// malformed is an error naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::workspace {

enum class EntryType { None, File, Symlink, Dir, Other };

enum class ChangeKind {
  Added,        // nothing was at `path` in the real tree
  Deleted,      // the real tree's entry at `path` is gone
  Modified,     // same type, other content (a file's bytes, a symlink's target); maybe mode too
  ModeChanged,  // same type and content, other permission bits
  TypeChanged,  // file <-> symlink <-> directory
  Renamed,      // a regular file deleted at `from` and added with the same bytes at `path`
};

struct Change {
  ChangeKind kind = ChangeKind::Added;
  std::string path;  // relative to the tree, '/'-separated
  std::string from;  // Renamed: the old path
  EntryType old_type = EntryType::None;
  EntryType new_type = EntryType::None;
  std::uint32_t old_mode = 0;  // permission bits (07777), 0 when there is no entry
  std::uint32_t new_mode = 0;
};

// Sorted by path.
struct Status {
  std::vector<Change> changes;
};

struct PathIssue {
  std::string path;
  std::string reason;
};

struct AcceptResult {
  std::vector<std::string> applied;  // paths now as the overlay had them (a rename: its new path)
  std::vector<PathIssue> conflicts;  // the real tree changed there since the manifest; not applied
  std::vector<PathIssue> refused;    // never applied: escaping symlinks, devices, errors
  // Applied changes that wrote over a kernel path (KernelGuard), forced by the person: whoever
  // vouched for what was there (the trust store) must vouch again.
  std::vector<std::string> kernel_landed;
};

// Paths the kernel reads, keeps or trusts (kernel files, trusted skill folders), relative to the
// real tree. An overlay run that did not know one could write over it in its layer; such a change
// (at, below or above a kernel path: a file written over it, a rename into it, a whiteout, an
// opaque or redirected directory) is refused by accept unless `forced` names it explicitly: an
// entry at or below that kernel path, or the change's own path (never "" for everything).
struct KernelGuard {
  std::vector<std::string> kernel_paths;
  std::vector<std::string> forced;
};

enum class XattrNamespace { Trusted, User };

struct OverlayLimits {
  std::size_t max_entries = 200'000;                 // real tree (manifest) and upper layer each
  std::size_t max_depth = 256;                       // directory levels walked
  std::uint64_t max_diff_bytes = 8 << 20;            // larger files are named, not diffed
  std::uint64_t max_accept_file_bytes = 1ULL << 30;  // larger files are refused by accept
};

struct CreateOptions {
  std::string session_id;
  // The namespace the overlay will be mounted with; by default "trusted" for root and "user" for
  // anyone else (who can only mount it in a user namespace, with userxattr).
  std::optional<XattrNamespace> xattr;
  OverlayLimits limits;
};

class Overlay {
 public:
  // Makes `layer_dir` (which must not exist or be empty) with upper/ and work/ (mode 0700), records
  // every entry of `lower` in the manifest (atomically: temp + rename) and writes the meta file.
  static Result<Overlay> create(const std::filesystem::path& lower,
                                const std::filesystem::path& layer_dir,
                                const CreateOptions& options = {});
  // The overlay of an existing layer directory (after a crash, from another process).
  static Result<Overlay> open(const std::filesystem::path& layer_dir, OverlayLimits limits = {});

  Overlay(Overlay&&) noexcept;
  Overlay& operator=(Overlay&&) noexcept;
  ~Overlay();

  const std::filesystem::path& lower() const;
  const std::filesystem::path& layer_dir() const;
  std::filesystem::path upper() const { return layer_dir() / "upper"; }
  std::filesystem::path work() const { return layer_dir() / "work"; }
  const std::string& session_id() const;
  XattrNamespace xattr_namespace() const;

  // What the session changed, compared with the real tree as the manifest recorded it (content
  // is read from the real tree as it is now).
  Result<Status> status() const;
  // A unified diff (git's format, without index lines) of the changes at or below `paths` (all
  // when empty): text files hunk by hunk, binary or too large files named only.
  Result<std::string> diff(const std::vector<std::string>& paths = {}) const;
  // Applies the changes at or below `paths` (all when empty) to the real tree. A path whose real
  // entry differs from the manifest (type, size, mtime, inode; appeared or disappeared) is a
  // conflict and is skipped unless `force`. Applied changes leave the upper layer and the manifest
  // records their new state, so status shrinks and a later accept starts from there.
  // Changes over a kernel path of `guard` are refused unless forced there (KernelGuard).
  Result<AcceptResult> accept(const std::vector<std::string>& paths = {}, bool force = false,
                              const KernelGuard& guard = {});
  // Removes the whole layer directory (never following a symlink in it).
  Result<void> reject();

  struct State;

 private:
  explicit Overlay(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

std::string_view to_string(ChangeKind kind);
std::string_view to_string(EntryType type);
Json to_json(const Change& change);
Json to_json(const Status& status);
Json to_json(const AcceptResult& result);

}  // namespace kernex::workspace
