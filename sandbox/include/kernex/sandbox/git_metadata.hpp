// The names in a gitdir that git trusts to name programs or where its configuration comes from.
// One list for the sandbox, which keeps them read-only under git_writes (src/git_guard.cpp), and
// for `workspace accept`, which treats them as kernel paths in an overlay's layer.
#pragma once

namespace kernex::sandbox {

// Files that name programs or where configuration comes from: made empty when missing, then kept
// read-only.
inline constexpr const char* kGitGuardedFiles[] = {"config", "config.worktree"};
// Files that redirect a gitdir and have no neutral empty form (an empty `commondir` breaks git):
// kept read-only when they exist.
inline constexpr const char* kGitGuardedIfPresent[] = {"commondir", "gitdir"};
// Directories whose whole content git trusts (hooks, attributes and excludes, alternates, the
// gitdirs of linked worktrees and of submodules): made when missing, then kept read-only.
inline constexpr const char* kGitGuardedDirs[] = {"hooks", "info", "objects/info", "worktrees",
                                                  "modules"};

}  // namespace kernex::sandbox
