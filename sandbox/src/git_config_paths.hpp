// Files and directories outside `.git` that a gitdir makes git trust: what its config names
// (`core.hooksPath`, `include.path` and `includeIf.*.path`, `core.fsmonitor`, `core.excludesFile`,
// `core.attributesFile`, and the program of a command-valued key such as a filter or diff driver
// when it is a path), and the targets of symlinked hooks. A tool that rewrites one of them in the
// workspace runs on the person's next git command, so Build() keeps those inside a writable grant
// read-only (see sandbox/README.md, "What git's config names").
#pragma once

#include <filesystem>
#include <vector>

namespace kernex::sandbox {

// Existing paths (canonical) that `gitdir`'s config (and what it includes, to a few levels) and
// its hooks/ symlinks name; `worktree` anchors relative program paths. Not filtered by grant.
std::vector<std::filesystem::path> git_trusted_paths(const std::filesystem::path& gitdir,
                                                     const std::filesystem::path& worktree);

}  // namespace kernex::sandbox
