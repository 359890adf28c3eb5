// The one way a sandboxed child starts, for spawn() and SandboxedProcess::start() alike: prepare
// checks a Command against its Policy and builds everything the clone child reads (argv, envp,
// cwd, the sandbox half of its ChildSpec); start makes its pids cgroup and rlimits, clones it on a
// clone thread (child_main: PID namespace, session, cgroup, PDEATHSIG, stdio, close_range, mount
// namespace, rlimits, no_new_privs, capabilities, Landlock, seccomp, execve) and turns a failed
// stage into an error. What the parent does with the child afterwards is the caller's.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "child.hpp"
#include "fd.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"
#include "pids_cgroup.hpp"

namespace kernex::sandbox::detail {

// A started child. The cgroup must outlive the child: keep it until the child is reaped.
struct LaunchedChild {
  pid_t pid = -1;  // also its process group and session id
  Fd pidfd;
  std::optional<SpawnCgroup> cgroup;
};

class Launch {
 public:
  // Refuses an empty argv, NUL bytes, a working directory that is not one, a command that can't be
  // resolved or isn't allowed, and hijacking or malformed env names. `who` prefixes the refusals
  // ("spawn", "start"). Wakes the clone thread that will clone the child, so that its wake-up
  // overlaps the rest of the preparation.
  static Result<Launch> prepare(const Policy& policy, const Command& command, std::string_view who);

  // Clones the child with `stdio` as its fds 0-2; they are closed here, whatever happens. Returns
  // once the child has exec'd; a child that failed before (a sandbox stage, or execve itself) has
  // been reaped and is an ErrorCode::Sandbox error naming the stage.
  Result<LaunchedChild> start(std::array<Fd, 3> stdio);

  const std::string& executable() const { return executable_; }
  bool sandboxed() const { return sandboxed_; }

 private:
  explicit Launch(const Policy& policy) : policy_(&policy) {}
  ChildSpec sandbox_spec() const;
  Result<std::optional<SpawnCgroup>> limit(ChildSpec& spec) const;
  Error failure(const ChildSpec& spec) const;

  const Policy* policy_;
  bool sandboxed_ = true;
  std::string executable_;
  std::string cwd_;
  std::vector<std::string> argv_;
  std::vector<std::string> envp_;  // NAME=value
  sock_fprog seccomp_{};
};

}  // namespace kernex::sandbox::detail
