// Files the kernel owns. Every file a sandboxed process can write is hostile the next time the kernel
// reads it, so the kernel registers what it reads or keeps as it learns of it: the config in use and
// every file it names (rules, profiles, pricing), plugin dirs, skill folders, project files (ReadOnly),
// and the data dir (Hidden: memory, trajectories, locks and trust records hold history). Every sandbox
// policy built afterwards in this process keeps them out of reach, wherever they sit: inside a
// writable grant through its private mount namespace (read-only binds, masks), or by refusing to run
// with an error naming the overlap. Process-wide, so no entry point (a plugin, `kernex sandbox exec`,
// an MCP server) can forget one.
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

// Registers `path` (made absolute against the working directory). Registering a path again keeps the
// stricter access. Thread-safe; never fails (an empty path is ignored).
void register_kernel_file(const std::filesystem::path& path, KernelFileAccess access, std::string why);

// A snapshot of everything registered so far, in registration order.
std::vector<KernelFile> kernel_files();

// Counts changes to the registry (a new path, or one made Hidden). A cached sandbox policy remembers
// the generation it was built at and is rebuilt when it moved, so a skill registered mid-run (or a
// data dir named late) reaches policies built before it.
std::uint64_t kernel_files_generation();

}  // namespace kernex
