// The manifest: every entry of the real tree when the session started, so accept can tell which
// paths changed there since (type, size, mtime, inode). One line per entry after a header:
//   kernex-overlay-manifest 1
//   <f|l|d|o> <mode octal> <size> <mtime ns> <inode> <path>
// with '\\', control bytes and DEL in the path written as \\ and \xHH. Written atomically.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/workspace/overlay.hpp"

namespace kernex::workspace::detail {

struct ManifestEntry {
  EntryType type = EntryType::None;
  std::uint32_t mode = 0;  // 07777 bits
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t ino = 0;
  bool operator==(const ManifestEntry&) const = default;
};

using Manifest = std::map<std::string, ManifestEntry>;

EntryType type_of(mode_t mode);
ManifestEntry entry_of(const struct stat& st);

// Every file, symlink, directory and other entry below `root` (the root itself excluded), without
// following symlinks or entering other filesystems (overlayfs shows neither).
Result<Manifest> scan_tree(const std::string& root, const OverlayLimits& limits);

// The manifest as text, and back (errors name `where` and the line).
std::string format_manifest(const Manifest& manifest);
Result<Manifest> parse_manifest(std::string_view text, const std::string& where,
                                const OverlayLimits& limits);

// Writes `content` to `name` in `dir`: a temp file in the same directory, fsync, rename, fsync of
// the directory, so a reader sees the old file or the new one, whole.
Result<void> write_file_atomic(int dir, const std::string& name, std::string_view content,
                               const std::string& where);

}  // namespace kernex::workspace::detail
