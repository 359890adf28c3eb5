// With `git_writes`, what of a writable gitdir stays read-only in the policy's mount namespace,
// including the paths that don't exist yet: a mount needs an existing target, so the directories
// git keeps configuration, hooks and other gitdirs in are made (empty, as `git init` or git itself
// would make them) and bound read-only as a whole, and `config` / `config.worktree` are made empty
// (git reads a missing and an empty config file alike). Nothing can then be created below them,
// by any name: see sandbox/README.md ("`.git` with git_writes").
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/sandbox/git_metadata.hpp"
#include "mount_plan.hpp"

namespace kernex::sandbox {

// The guarded names: kernex/sandbox/git_metadata.hpp.

// Adds the read-only binds (and the pins that keep them in place) of the writable gitdir `gitdir`
// to `plan`. Returns the submodule gitdirs found below `modules/` (a name may hold slashes:
// modules/a/b/), read-only with the rest of modules/ unless the caller binds one writable again and
// guards it like `gitdir` itself. A guarded
// name that is a symlink is refused (a mount can't pin a link, and the link itself could be
// replaced).
Result<std::vector<std::filesystem::path>> guard_writable_gitdir(
    MountPlan& plan, const std::filesystem::path& gitdir);

// The submodules the index of `gitdir` records under `worktree` that are not checked out (no
// `.git` there): their directories are kept read-only, made empty first where missing (as
// checkout makes them), so no `.git` can be planted in one (see git_index.hpp). At most
// kMaxGitlinks; an index that can't be read, or more gitlinks, add a warning.
inline constexpr std::size_t kMaxGitlinks = 256;
Result<void> guard_gitlinks(MountPlan& plan, const std::filesystem::path& worktree,
                            const std::filesystem::path& gitdir,
                            std::vector<std::string>& warnings);

}  // namespace kernex::sandbox
