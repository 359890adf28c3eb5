// Files the kernel owns. Every file a sandboxed process can write is hostile the next time the
// kernel reads it, so the kernel registers what it reads or keeps as it learns of it: the config in
// use and every file it names (rules, profiles, pricing), plugin dirs, skill folders, project files
// (ReadOnly), and the data dir (Hidden: memory, trajectories, locks and trust records hold
// history). Every sandbox policy built afterwards in this process keeps them out of reach, wherever
// they sit: inside a writable grant through its private mount namespace (read-only binds, masks),
// or by refusing to run with an error naming the overlap. Process-wide, so no entry point (a
// plugin, `kernex sandbox exec`, an MCP server) can forget one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kernex {

enum class KernelFileAccess {
  ReadOnly,  // readable where a grant covers it, never writable
  Hidden,    // neither readable nor writable
};

struct KernelFile {
  std::filesystem::path path;  // absolute, lexically normal (may not exist yet)
  KernelFileAccess access = KernelFileAccess::ReadOnly;
  std::string why;  // "config", "data dir", "skill", ... for error messages and `kernex doctor`
};

// Registers `path` (made absolute against the working directory). Registering a path again keeps
// the stricter access. Thread-safe; never fails (an empty path is ignored).
void register_kernel_file(const std::filesystem::path& path, KernelFileAccess access,
                          std::string why);

// A snapshot of everything registered so far, in registration order.
std::vector<KernelFile> kernel_files();

// Tool areas: directories below a kernel file (typically the hidden data dir) that the kernel hands
// out to tools, such as `kernex serve`'s `<data_dir>/workspaces`, where each session's tools get
// `<tenant>/<session>` as their workspace. A sandbox policy may grant a path inside a registered
// tool area although the area lies inside a kernel file, provided
//   - the area lies strictly below the kernel file (the data dir itself is never granted), and the
//     grant inside the area, both as resolved (canonical: a workspace that is a symlink pointing
//     out of the area, back into the data dir say, is refused like any other grant inside a kernel
//     file);
//   - the grant contains no kernel file (no registered path lies at or below it): a grant of the
//   area
//     itself, or of `<tenant>`, is fine on those terms;
//   - no other grant of the policy covers that kernel file: it would be masked (or kept read-only)
//     whole in the policy's mount namespace and the granted directory with it, so Build() refuses
//     that combination.
// Landlock keeps everything of the kernel file outside the grant unreadable (no rule covers it):
// the memory db, trajectories, keys, and the other workspaces of the area. Landlock doesn't mediate
// lstat, readlink, inotify or connect() to a socket file, so a hidden kernel dir is also masked in
// the policy's mount namespace with only the grants inside it moved back: nothing else of it is
// there. Registering is for the whole process, like kernel files; an area that lies in no kernel
// file changes nothing.
struct ToolArea {
  std::filesystem::path path;  // absolute, lexically normal
  std::string why;             // "serve workspaces", for error messages
};

// Registers `path` (made absolute against the working directory). Thread-safe; never fails (an
// empty path is ignored; registering a path again keeps the first reason).
void register_tool_area(const std::filesystem::path& path, std::string why);

// A snapshot of the registered tool areas, in registration order.
std::vector<ToolArea> tool_areas();

// Counts changes to the registry (a new path, one made Hidden, or a new tool area). A cached
// sandbox policy remembers the generation it was built at and is rebuilt when it moved, so a skill
// registered mid-run (or a data dir named late) reaches policies built before it.
std::uint64_t kernel_files_generation();

}  // namespace kernex
