// A per-spawn pids cgroup: the only process-count limit Linux applies to uid 0 (RLIMIT_NPROC
// exempts root, and for other users it counts every process they own, not the sandbox's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <utility>

#include "kernex/error.hpp"

namespace kernex::sandbox {

// The cgroup (v1 pids hierarchy, or v2 with pids in subtree_control) this process belongs to, when
// it may create children there.
std::optional<std::filesystem::path> find_pids_cgroup_base();

// The pids cgroup of one spawn (or SandboxedProcess). pids.max counts tasks, so threads count too.
// Making one costs a mkdir and removing it an rmdir (~35 µs together); a released cgroup whose
// members are all gone goes back to a process-wide pool instead, so a spawn usually only pays for
// its child joining it (~5 µs). Names carry the owner's tag (owner_tag.hpp): the first acquire
// under a base removes the cgroups that a dead kernel left there.
class SpawnCgroup {
 public:
  struct Slot;
  static Result<SpawnCgroup> create(const std::filesystem::path& base, std::uint64_t max_processes);
  SpawnCgroup(SpawnCgroup&& other) noexcept : slot_(std::exchange(other.slot_, nullptr)) {}
  SpawnCgroup& operator=(SpawnCgroup&&) = delete;
  // Back to the pool when empty; otherwise waits (bounded) for the killed members to exit and
  // removes it.
  ~SpawnCgroup();

  int procs_fd() const;  // the child writes "0" here to join

 private:
  explicit SpawnCgroup(Slot* slot) : slot_(slot) {}
  Slot* slot_ = nullptr;
};

}  // namespace kernex::sandbox
