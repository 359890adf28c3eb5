// The submodule paths (gitlinks, mode 160000) a git index records. A submodule that is not checked
// out is an empty directory in the worktree: a `.git` a tool plants there makes the person's next
// `git status` in the superproject run a git inside it, with the planted config. Build() keeps
// those directories read-only (see sandbox/README.md, "gitlinks").
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace kernex::sandbox {

// An index larger than this is not read (a warning says so).
inline constexpr std::size_t kMaxGitIndexBytes = 64u << 20;

struct Gitlinks {
  std::vector<std::string> paths;  // relative to the worktree, '/'-separated, as git stores them
  bool unreadable = false;         // there was an index but it could not be read or parsed
};

// The gitlinks of `gitdir`'s index (versions 2, 3 and 4, SHA-1 or SHA-256, a split index's shared
// part included). No index: none, not unreadable.
Gitlinks read_gitlinks(const std::filesystem::path& gitdir);

}  // namespace kernex::sandbox
