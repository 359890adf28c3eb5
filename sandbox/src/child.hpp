// The code that runs in the clone(CLONE_VM|CLONE_VFORK) child between clone and execve. It shares
// the parent's memory, so everything it reads is prepared by the parent and it only makes raw
// syscalls: no allocation, no locks, no libc state.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>

namespace kernex::sandbox::detail {

enum class ChildStage : int {
  None = 0,
  Signals,
  Session,
  Cgroup,
  Mounts,
  DeathSignal,
  Stdio,
  CloseFds,
  Chdir,
  Rlimit,
  NoNewPrivs,
  Capabilities,
  Landlock,
  Seccomp,
  Exec,
};
const char* to_string(ChildStage stage) noexcept;

struct ChildLimit {
  int resource;
  std::uint64_t value;
};

// See ProtectedMount (policy_state.hpp): kind 0 binds `source` (or `path`) onto `path`, kind 1
// mounts an empty mode-0 read-only tmpfs there; a nonzero remount_flags is applied after the bind.
struct ChildMount {
  const char* path;
  const char* source;  // nullptr: the path itself
  int kind;  // 0 bind, 1 tmpfs mask over a directory, 2 overlay, 3 bind from below the overlay
             // (lower_binds.hpp; see ProtectedMount)
  unsigned long remount_flags;
  const char* const* keep = nullptr;  // kind 1: directories below `path` moved back over the mask
  int keep_count = 0;
  const char* data = nullptr;         // kind 2: overlayfs options
  const char* data_userns = nullptr;  // kind 2: the same inside a user namespace
};

struct ChildSpec {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
  int stdio[3] = {-1, -1, -1};
  ChildLimit limits[8] = {};
  int limit_count = 0;
  bool sandboxed = true;  // false: process hygiene only (enforce: false)
  bool is_root = false;   // a failing capability-bounding drop is fatal only for root
  // The cloning thread checked that its own bounding set, which the child inherits, is empty.
  bool bounding_set_empty = false;
  // Joined before anything else touches the filesystem (see mount_template_main).
  int mntns_fd = -1;
  int userns_fd = -1;
  int cgroup_fd = -1;  // cgroup.procs of the spawn's pids cgroup, or -1
  int landlock_fd = -1;
  const sock_fprog* seccomp = nullptr;
  // Set by a clone thread that carries the seccomp filter (clone_thread.cpp): the child inherits it
  // instead of loading `seccomp`, and as the filter refuses setsid it drops the controlling
  // terminal and waits for the cloning side to make it a process-group leader: group_state turns 1
  // once done, or -errno if that failed.
  bool filter_inherited = false;
  volatile int group_state = 0;
  // Nonzero until the child has exec'd or exited: cleared by the kernel (CLONE_CHILD_CLEARTID).
  volatile pid_t child_tid = 0;
  pid_t parent = 0;
  // Born in the clone thread's PID namespace (clone_thread.cpp), whose init dies with the kernel,
  // taking every process of the namespace with it. The parent is then outside the child's namespace
  // and getppid() is 0, so whether the kernel died before PDEATHSIG was set is asked of
  // `parent_pidfd`.
  bool new_pid_ns = false;
  int parent_pidfd = -1;
  // Written by the child when it fails before execve; read by the parent after clone returns.
  volatile int failed_stage = 0;
  volatile int failed_errno = 0;
};

// clone() entry point; `arg` is a ChildSpec*. Returns only through exit_group.
int child_main(void* arg);

// The init of a clone thread's PID namespace: cloned right after the thread unshared CLONE_NEWPID,
// it reaps the orphans of the commands for as long as the kernel lives, and dies with it
// (PDEATHSIG), upon which Linux kills every process left in the namespace. `arg` is the kernel's
// pidfd (an int*).
int reaper_main(void* arg);

// Builds a policy's mount namespace once: a private mount namespace (inside a new user namespace
// mapping only our ids when unprivileged) with the protective bind mounts. Run with
// CLONE_VM|CLONE_VFORK|CLONE_FILES so the namespace fds it opens land in the parent's table; the
// policy keeps them, and spawns join with setns() instead of paying for a namespace per spawn.
struct MountTemplateSpec {
  const ChildMount* mounts = nullptr;
  int mount_count = 0;
  const char* uid_map = nullptr;
  const char* gid_map = nullptr;
  // Every mount made read-only (recursively, before the binds) so that chmod, chown and utimensat,
  // which Landlock does not mediate, fail with EROFS outside the writable binds.
  int read_only_root = 0;
  volatile int read_only_errno = 0;  // out: why read_only_root could not be done (0: done)
  volatile int mntns_fd = -1;        // out
  volatile int userns_fd = -1;       // out: only when a user namespace was needed
  volatile int failed_errno = 0;
  // Opened O_PATH once the mounts are made (shared fd table): -1 where an open failed.
  const char* const* open_paths = nullptr;
  int open_count = 0;
  int* opened_fds = nullptr;  // out, open_count entries
  // >= 0: the namespace (and its user namespace, or -1) where the workspace overlay is mounted
  // (OverlayBase): joined and copied instead of a fresh copy of ours, its overlay mounts kept.
  int base_mntns = -1;
  int base_userns = -1;
  // Kind 3 (lower_binds.hpp): mount_count slots, -1 but where a detached clone of a kind-3 path's
  // real tree lands (the caller closes what is left open); the index of the mount that failed.
  int* lower_fds = nullptr;
  volatile int failed_mount = -1;
};
int mount_template_main(void* arg);

}  // namespace kernex::sandbox::detail
