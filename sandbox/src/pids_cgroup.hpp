// A per-spawn pids cgroup: the only process-count limit Linux applies to uid 0 (RLIMIT_NPROC exempts
// root, and for other users it counts every process they own, not the sandbox's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "kernex/error.hpp"

namespace kernex::sandbox {

// The cgroup (v1 pids hierarchy, or v2 with pids in subtree_control) this process belongs to, when
// it may create children there.
std::optional<std::filesystem::path> find_pids_cgroup_base();

class SpawnCgroup {
 public:
  static Result<SpawnCgroup> create(const std::filesystem::path& base, std::uint64_t max_processes);
  SpawnCgroup(SpawnCgroup&& other) noexcept;
  SpawnCgroup& operator=(SpawnCgroup&&) = delete;
  ~SpawnCgroup();  // waits (bounded) for the killed members to exit, then removes the cgroup

  int procs_fd() const { return procs_fd_; }  // the child writes "0" here to join

 private:
  SpawnCgroup(std::filesystem::path dir, int fd) : dir_(std::move(dir)), procs_fd_(fd) {}
  std::filesystem::path dir_;
  int procs_fd_ = -1;
};

}  // namespace kernex::sandbox
