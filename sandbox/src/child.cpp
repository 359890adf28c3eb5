#include "child.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "landlock_abi.hpp"
#include "lower_binds.hpp"
#include "mount_syscalls.hpp"

// Code of the CLONE_VM children: never instrumented (they share the kernel's memory and stack).
#define NOSAN __attribute__((no_sanitize("address", "undefined")))

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

namespace kernex::sandbox::detail {

const char* to_string(ChildStage stage) noexcept {
  switch (stage) {
    case ChildStage::None:
      return "none";
    case ChildStage::Signals:
      return "resetting signal handlers";
    case ChildStage::Session:
      return "starting a session or process group";
    case ChildStage::Cgroup:
      return "joining the pids cgroup";
    case ChildStage::Mounts:
      return "making protected workspace files read-only (mount namespace)";
    case ChildStage::DeathSignal:
      return "PR_SET_PDEATHSIG";
    case ChildStage::Stdio:
      return "redirecting stdio";
    case ChildStage::CloseFds:
      return "closing inherited file descriptors";
    case ChildStage::Chdir:
      return "changing to the working directory";
    case ChildStage::Rlimit:
      return "setting resource limits";
    case ChildStage::NoNewPrivs:
      return "PR_SET_NO_NEW_PRIVS";
    case ChildStage::Capabilities:
      return "dropping capabilities";
    case ChildStage::Landlock:
      return "landlock_restrict_self";
    case ChildStage::Seccomp:
      return "loading the seccomp filter";
    case ChildStage::Exec:
      return "execve";
  }
  return "unknown";
}

namespace {

// The kernel's struct sigaction for rt_sigaction (not glibc's).
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  unsigned long mask;
};

// struct mount_attr of linux/mount.h (Linux 5.12), spelled out for older headers.
struct MountAttr {
  std::uint64_t attr_set;
  std::uint64_t attr_clr;
  std::uint64_t propagation;
  std::uint64_t userns_fd;
};

constexpr int kMaxKept = 16;  // kMaxKeptInMask of policy_state.hpp

struct KernelRlimit {
  std::uint64_t cur;
  std::uint64_t max;
};

[[noreturn]] __attribute__((no_sanitize("address", "undefined"))) void die(ChildSpec* spec,
                                                                           ChildStage stage) {
  spec->failed_errno = errno;
  spec->failed_stage = static_cast<int>(stage);
  for (;;) syscall(SYS_exit_group, 127);
}

__attribute__((no_sanitize("address", "undefined"))) bool drop_capabilities(ChildSpec* spec) {
  // Read before dropping: a drop costs a credential copy even when the capability is gone. Usually
  // there is nothing to read: the clone thread emptied its set, which only it can change.
  for (long cap = 0; cap < 64 && !spec->bounding_set_empty; ++cap) {
    long has = syscall(SYS_prctl, PR_CAPBSET_READ, cap, 0, 0, 0);
    if (has < 0) break;  // past CAP_LAST_CAP
    if (has == 1 && syscall(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      // Without CAP_SETPCAP a non-root process can't drop the bounding set, but it also can't gain
      // anything from it: no_new_privs blocks file capabilities and setuid.
      if (spec->is_root || errno != EPERM) return false;
    }
  }
  if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return false;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  return syscall(SYS_capset, &header, data) == 0;
}

__attribute__((no_sanitize("address", "undefined"))) bool write_proc_file(const char* path,
                                                                          const char* text) {
  long fd = syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::size_t len = 0;
  while (text[len] != '\0') ++len;
  long n = syscall(SYS_write, fd, text, len);
  syscall(SYS_close, fd);
  return n == static_cast<long>(len);
}

// Asked after PR_SET_PDEATHSIG: a kernel that died before it was set would not have signalled us.
__attribute__((no_sanitize("address", "undefined"))) bool kernel_alive(const ChildSpec* spec) {
  if (!spec->new_pid_ns) return syscall(SYS_getppid) == spec->parent;
  // The kernel's pidfd turns readable once its last thread has exited.
  pollfd kernel{spec->parent_pidfd, POLLIN, 0};
  timespec now{0, 0};
  return syscall(SYS_ppoll, &kernel, 1, &now, nullptr, 0) == 0;
}

}  // namespace

__attribute__((no_sanitize("address", "undefined"))) int reaper_main(void* arg) {
  const int kernel_pidfd = *static_cast<const int*>(arg);
  // Every signal stays blocked (the kernel's handlers, copied with its memory, must never run
  // here); SIGCHLD back to its default so that a child's exit is queued for rt_sigtimedwait below.
  KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
  syscall(SYS_rt_sigaction, SIGCHLD, &dfl, nullptr, sizeof(unsigned long));
  if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) syscall(SYS_exit_group, 1);
  pollfd kernel{kernel_pidfd, POLLIN, 0};
  timespec now{0, 0};
  if (syscall(SYS_ppoll, &kernel, 1, &now, nullptr, 0) != 0)
    syscall(SYS_exit_group, 1);  // the kernel is gone
  syscall(SYS_close_range, 0U, ~0U,
          0U);  // copies of the kernel's fds (other spawns' pipes among them)
  unsigned long chld = 1UL << (SIGCHLD - 1);
  for (;;) {
    while (syscall(SYS_wait4, -1, nullptr, __WALL | WNOHANG, nullptr) > 0) {
    }
    syscall(SYS_rt_sigtimedwait, &chld, nullptr, nullptr, sizeof(chld));
  }
}

namespace {

// Every signal is blocked on the cloning side (clone_thread.cpp, process.cpp); restore default
// dispositions (ignored ones survive execve, e.g. SIGPIPE) before unblocking.
NOSAN void reset_signals(ChildSpec* spec) {
  for (int sig = 1; sig < 65; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
    syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(unsigned long));
  }
  unsigned long empty_mask = 0;
  if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty_mask, nullptr, sizeof(empty_mask)) != 0) {
    die(spec, ChildStage::Signals);
  }
}

// Into the cgroup, killed with the kernel (which must still be alive), and a session of its own.
NOSAN void tie_to_kernel(ChildSpec* spec) {
  if (spec->cgroup_fd >= 0 && syscall(SYS_write, spec->cgroup_fd, "0", 1) != 1)
    die(spec, ChildStage::Cgroup);
  if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    die(spec, ChildStage::DeathSignal);
  if (!kernel_alive(spec)) {
    errno = ESRCH;
    die(spec, ChildStage::DeathSignal);
  }
  if (!spec->filter_inherited) {
    if (syscall(SYS_setsid) < 0) die(spec, ChildStage::Session);
    return;
  }
  // No setsid (the inherited filter refuses it), so the kernel's controlling terminal, if it has
  // one, would still be ours: a command granted a pts device could make itself the foreground
  // group. TIOCNOTTY drops it for this process only; ENXIO means there is none.
  long tty = syscall(SYS_openat, AT_FDCWD, "/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (tty >= 0) {
    const long detached = syscall(SYS_ioctl, tty, TIOCNOTTY, 0);
    syscall(SYS_close, tty);
    if (detached != 0) die(spec, ChildStage::Session);
  }
}

// Stdio from the spec; every other fd close-on-exec.
NOSAN void set_stdio(ChildSpec* spec) {
  for (int target = 0; target < 3; ++target) {
    int fd = spec->stdio[target];
    if (fd == target) {
      if (syscall(SYS_fcntl, fd, F_SETFD, 0) != 0) die(spec, ChildStage::Stdio);
    } else if (syscall(SYS_dup3, fd, target, 0) < 0) {
      die(spec, ChildStage::Stdio);
    }
  }
  // Marked close-on-exec rather than closed: the Landlock ruleset fd is still needed below.
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) die(spec, ChildStage::CloseFds);
}

// The policy's mount namespace (and its user namespace), the working directory, the rlimits.
NOSAN void enter_tree(ChildSpec* spec) {
  if (spec->mntns_fd >= 0) {
    if (spec->userns_fd >= 0 && syscall(SYS_setns, spec->userns_fd, CLONE_NEWUSER) != 0)
      die(spec, ChildStage::Mounts);
    if (syscall(SYS_setns, spec->mntns_fd, CLONE_NEWNS) != 0) die(spec, ChildStage::Mounts);
  }
  if (syscall(SYS_chdir, spec->cwd) != 0) die(spec, ChildStage::Chdir);
  for (int i = 0; i < spec->limit_count; ++i) {
    KernelRlimit lim{spec->limits[i].value, spec->limits[i].value};
    if (syscall(SYS_prlimit64, 0, spec->limits[i].resource, &lim, nullptr) != 0)
      die(spec, ChildStage::Rlimit);
  }
}

// No new privileges, no capabilities, Landlock, then seccomp (unless inherited).
NOSAN void confine(ChildSpec* spec) {
  if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(spec, ChildStage::NoNewPrivs);
  if (!drop_capabilities(spec)) die(spec, ChildStage::Capabilities);
  if (syscall(SYS_landlock_restrict_self, spec->landlock_fd, 0) != 0)
    die(spec, ChildStage::Landlock);
  if (!spec->filter_inherited &&
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, spec->seccomp) != 0) {
    die(spec, ChildStage::Seccomp);
  }
}

// Our seccomp filter came with the clone thread and refuses setsid/setpgid, so the spawning
// thread makes us a group leader meanwhile; the command must not start before that is done.
NOSAN void await_group(ChildSpec* spec) {
  int state;
  while ((state = spec->group_state) == 0) {
    syscall(SYS_futex, &spec->group_state, FUTEX_WAIT, 0, nullptr, nullptr, 0);
  }
  if (state < 0) {
    errno = -state;
    die(spec, ChildStage::Session);
  }
}

}  // namespace

// Signals reset -> tied to the kernel -> stdio -> mount namespace, cwd, rlimits -> confined ->
// (an inherited filter: made a group leader by the spawner) -> execve. Raw syscalls only: this
// runs in a CLONE_VM child.
NOSAN int child_main(void* arg) {
  auto* spec = static_cast<ChildSpec*>(arg);
  reset_signals(spec);
  tie_to_kernel(spec);
  set_stdio(spec);
  enter_tree(spec);
  if (spec->sandboxed) confine(spec);
  if (spec->filter_inherited) await_group(spec);
  syscall(SYS_execve, spec->path, spec->argv, spec->envp);
  die(spec, ChildStage::Exec);
}

// A tmpfs over m.path with only m.keep left of what was there: each kept directory is cloned (with
// the mounts below it) before the tmpfs covers it, then moved onto a chain of traverse-only
// directories made in the tmpfs, which ends read-only. Raw syscalls only: this runs in a CLONE_VM
// child.
static __attribute__((no_sanitize("address", "undefined"))) bool mask_keeping(const ChildMount& m) {
  int trees[kMaxKept];
  if (m.keep_count > kMaxKept) {
    errno = E2BIG;
    return false;
  }
  for (int k = 0; k < m.keep_count; ++k) {
    long fd =
        syscall(SYS_open_tree, AT_FDCWD, m.keep[k], kOpenTreeClone | O_CLOEXEC | AT_RECURSIVE);
    if (fd < 0) return false;
    trees[k] = static_cast<int>(fd);
  }
  constexpr unsigned long kFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (syscall(SYS_mount, "tmpfs", m.path, "tmpfs", kFlags, "mode=0111,size=64k") != 0) return false;
  std::size_t base = 0;
  while (m.path[base] != '\0') ++base;
  char dir[4096];
  for (int k = 0; k < m.keep_count; ++k) {
    // Every directory from below m.path down to the kept one, made as it comes ('/' by '/').
    const char* keep = m.keep[k];
    std::size_t len = 0;
    while (keep[len] != '\0') ++len;
    if (len >= sizeof(dir)) {
      errno = ENAMETOOLONG;
      return false;
    }
    for (std::size_t j = 0; j <= len; ++j) {
      dir[j] = keep[j];
      if (j > base && (keep[j] == '/' || keep[j] == '\0')) {
        dir[j] = '\0';
        if (syscall(SYS_mkdirat, AT_FDCWD, dir, 0111) != 0 && errno != EEXIST) return false;
        dir[j] = keep[j];
      }
    }
    if (syscall(SYS_move_mount, trees[k], "", AT_FDCWD, keep, kMoveMountFEmptyPath) != 0)
      return false;
    syscall(SYS_close, trees[k]);
  }
  return syscall(SYS_mount, nullptr, m.path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | kFlags,
                 nullptr) == 0;
}

namespace {

// A namespace of the template's own: a copy of the overlay's base namespace, else a new one (in a
// new user namespace where an unprivileged kernel needs one). `user_ns`: one was entered or made.
NOSAN bool enter_template_ns(MountTemplateSpec* spec, bool from_base, bool& user_ns) {
  if (from_base) {
    // A copy of the overlay's base namespace: its overlay mount is the same superblock as every
    // other policy's over those layers, so each sees the others' writes at once (two overlay
    // mounts of one upper layer keep stale lookups of each other's changes).
    if (spec->base_userns >= 0) {
      if (syscall(SYS_setns, spec->base_userns, CLONE_NEWUSER) != 0) return false;
      user_ns = true;
    }
    return syscall(SYS_setns, spec->base_mntns, CLONE_NEWNS) == 0 &&
           syscall(SYS_unshare, CLONE_NEWNS) == 0;
  }
  if (syscall(SYS_unshare, CLONE_NEWNS) == 0) return true;
  if (errno != EPERM) return false;
  if (syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
  user_ns = true;
  return write_proc_file("/proc/self/setgroups", "deny") &&
         write_proc_file("/proc/self/uid_map", spec->uid_map) &&
         write_proc_file("/proc/self/gid_map", spec->gid_map);
}

// Overlays first: overlayfs needs its upper layer's mount writable when it is made (it keeps a
// private clone of it), and the read-only step below is undone for the overlay alone. The real
// directory is both the lower layer and the mount point: looked up before the overlay covers it.
NOSAN bool mount_overlays(const MountTemplateSpec* spec, bool user_ns) {
  for (int i = 0; i < spec->mount_count; ++i) {
    const ChildMount& m = spec->mounts[i];
    if (m.kind != 2) continue;
    if (syscall(SYS_mount, "overlay", m.path, "overlay", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                user_ns ? m.data_userns : m.data) != 0) {
      return false;
    }
  }
  return true;
}

// Before any bind: a bind copies its source's flags, so the writable binds below start read-only
// and their remount (flags without MS_RDONLY) makes exactly that one mount writable again, while
// the read-only binds and masks made after them, deeper, stay read-only.
NOSAN bool make_root_read_only(MountTemplateSpec* spec) {
  MountAttr attr{MOUNT_ATTR_RDONLY, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
    spec->read_only_errno = errno;  // e.g. ENOSYS before Linux 5.12: reported as a warning
  }
  for (int i = 0; i < spec->mount_count; ++i) {
    if (spec->mounts[i].kind != 2) continue;
    MountAttr writable{0, MOUNT_ATTR_RDONLY, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, spec->mounts[i].path, 0, &writable,
                sizeof(writable)) != 0 &&
        spec->read_only_errno == 0) {
      return false;
    }
  }
  return true;
}

// Mount i of the policy (overlays are already mounted): a real tree, a mask (keeping some
// directories, or empty), or a bind remounted with its flags.
NOSAN bool mount_one(MountTemplateSpec* spec, int i) {
  const ChildMount& m = spec->mounts[i];
  if (m.kind == 2) return true;  // mounted above
  if (m.kind == 3) return attach_lower(spec, i);
  if (m.kind == 1 && m.keep_count > 0) return mask_keeping(m);
  if (m.kind == 1) {
    return syscall(SYS_mount, "tmpfs", m.path, "tmpfs",
                   MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=000,size=4k") == 0;
  }
  const char* source = m.source != nullptr ? m.source : m.path;
  if (syscall(SYS_mount, source, m.path, nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
  return m.remount_flags == 0 ||
         syscall(SYS_mount, nullptr, m.path, nullptr, m.remount_flags, nullptr) == 0;
}

// What the kernel takes from the finished template: the paths it asked for (O_PATH, -1 where
// missing) and the namespaces, to enter for every command.
NOSAN bool open_results(MountTemplateSpec* spec, bool user_ns) {
  for (int i = 0; i < spec->open_count; ++i) {
    long fd = syscall(SYS_openat, AT_FDCWD, spec->open_paths[i], O_PATH | O_CLOEXEC);
    spec->opened_fds[i] = fd < 0 ? -1 : static_cast<int>(fd);
  }
  long mnt = syscall(SYS_openat, AT_FDCWD, "/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (mnt < 0) return false;
  spec->mntns_fd = static_cast<int>(mnt);
  if (!user_ns) return true;
  long user = syscall(SYS_openat, AT_FDCWD, "/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
  if (user < 0) return false;
  spec->userns_fd = static_cast<int>(user);
  return true;
}

NOSAN bool build_template(MountTemplateSpec* spec) {
  const bool from_base = spec->base_mntns >= 0;
  bool user_ns = false;
  if (!enter_template_ns(spec, from_base, user_ns)) return false;
  // Nothing done here may propagate back to the kernel's own mount namespace.
  if (syscall(SYS_mount, nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return false;
  // The real tree of every kind-3 path, cloned while it can still be seen.
  if (!clone_lowers(spec, from_base)) return false;
  if (!from_base && !mount_overlays(spec, user_ns)) return false;
  if (spec->read_only_root != 0 && !make_root_read_only(spec)) return false;
  for (int i = 0; i < spec->mount_count; ++i) {
    spec->failed_mount = i;  // named in the error if this one fails
    if (!mount_one(spec, i)) return false;
  }
  spec->failed_mount = -1;
  return open_results(spec, user_ns);
}

}  // namespace

// A namespace of its own -> no propagation back -> real trees cloned -> overlays -> read-only
// root -> every mount in order -> the fds the kernel keeps. Raw syscalls only: this runs in a
// CLONE_VM child, which exits 1 with failed_errno (and failed_mount) set on a failure.
NOSAN int mount_template_main(void* arg) {
  auto* spec = static_cast<MountTemplateSpec*>(arg);
  if (build_template(spec)) {
    for (;;) syscall(SYS_exit_group, 0);
  }
  spec->failed_errno = errno;
  for (;;) syscall(SYS_exit_group, 1);
}

}  // namespace kernex::sandbox::detail
