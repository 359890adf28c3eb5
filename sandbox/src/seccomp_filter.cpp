// The seccomp program: default allow, listed calls fail with EPERM. Built with libseccomp in the
// parent and exported as raw BPF so the child only has to call seccomp(2).
#include <fcntl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <initializer_list>
#include <cerrno>
#include <cstring>
#include <memory>

#include "policy_state.hpp"

namespace kernex::sandbox {
namespace {

struct CtxDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

// Calls no sandboxed tool needs and that reach past Landlock: other processes' memory, kernel
// attack surface with its own file access path (io_uring), namespaces, keyrings, modules.
constexpr std::array kAlwaysDenied = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "mount",
    "umount2",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "quotactl",
    "quotactl_fd",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "uselib",
    "lookup_dcookie",
    // The kernel log (what /dev/kmsg, never granted, holds) where kernel.dmesg_restrict is 0.
    "syslog",
    // Leaving the spawner's process group would let a child outlive the group kill.
    "setsid",
    "setpgid",
    // SysV IPC and POSIX message queues live in the IPC namespace, shared with the host and every
    // other sandbox, and outlive the process that made them; Landlock sees only mq_open's open, not
    // the queue it creates first nor mq_unlink.
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    // Another anonymous-file source (see add_memfd_rules); nothing a tool needs.
    "memfd_secret",
    // Extended attributes: Landlock has no hook for them, and system.posix_acl_access is a chmod
    // (an ACL on ~/.ssh/id_rsa, or on /etc/shadow for a root kernel, opens it to every user) on any
    // file the command owns and can name, granted or not. Copy tools ignore EPERM here.
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
};

// Denied like the list above, but newer than libseccomp 2.5 knows: by number where the name doesn't
// resolve (numbers from 424 on are the same on every architecture). listmount/statmount read the
// mount table that /proc/self/mountinfo (never granted) would show; setxattrat/removexattrat and
// file_setattr (fs flags, project id) write metadata like setxattr; open_tree_attr is open_tree.
struct NewSyscall {
  const char* name;
  int nr;
};
constexpr std::array kAlwaysDeniedNew = {
    NewSyscall{"statmount", 457},      NewSyscall{"listmount", 458},
    NewSyscall{"setxattrat", 463},     NewSyscall{"removexattrat", 466},
    NewSyscall{"open_tree_attr", 467}, NewSyscall{"file_setattr", 469}};

constexpr scmp_datum_t kMfdNoexecSeal = 0x0008;  // linux/memfd.h of kernels >= 6.3
constexpr scmp_datum_t kMfdExec = 0x0010;
constexpr scmp_datum_t kInt =
    0xffffffff;  // the kernel reads int arguments from the low 32 bits only

int rule(scmp_filter_ctx ctx, int nr, unsigned count, const scmp_arg_cmp* cmps) {
  return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), nr, count, cmps);
}

Result<void> add_socket_rules(scmp_filter_ctx ctx, const NetworkPolicy& net) {
  const int socket_nr = SCMP_SYS(socket);
  int rc = 0;
  if (net.tcp_connect_ports.empty()) {
    if (!net.unix_sockets) {
      rc |= rule(ctx, socket_nr, 0, nullptr);
    } else {
      scmp_arg_cmp not_unix = SCMP_A0(SCMP_CMP_NE, AF_UNIX);
      rc |= rule(ctx, socket_nr, 1, &not_unix);
    }
  } else {
    // Allowed families: AF_INET, AF_INET6 (+ AF_UNIX). Everything else (netlink, packet, vsock,
    // ...) is refused by enumerating the gaps, since one libseccomp rule can't compare an argument
    // twice.
    for (int family = 0; family <= AF_INET6; ++family) {
      if (family == AF_INET || family == AF_INET6 || (family == AF_UNIX && net.unix_sockets))
        continue;
      scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family));
      rc |= rule(ctx, socket_nr, 1, &cmp);
    }
    scmp_arg_cmp above = SCMP_A0(SCMP_CMP_GT, AF_INET6);
    rc |= rule(ctx, socket_nr, 1, &above);
    // For IP only stream sockets with protocol 0/TCP: Landlock's port rules cover TCP, not UDP,
    // raw, SCTP or MPTCP.
    for (int family : {AF_INET, AF_INET6}) {
      for (int type : {SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_DCCP, SOCK_PACKET}) {
        std::array<scmp_arg_cmp, 2> cmps = {
            SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, static_cast<scmp_datum_t>(type))};
        rc |= rule(ctx, socket_nr, 2, cmps.data());
      }
      std::array<scmp_arg_cmp, 2> proto_high = {
          SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
          SCMP_A2(SCMP_CMP_GT, IPPROTO_TCP)};
      rc |= rule(ctx, socket_nr, 2, proto_high.data());
      for (int proto = 1; proto < IPPROTO_TCP; ++proto) {
        std::array<scmp_arg_cmp, 2> cmps = {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
                                            SCMP_A2(SCMP_CMP_EQ, static_cast<scmp_datum_t>(proto))};
        rc |= rule(ctx, socket_nr, 2, cmps.data());
      }
    }
  }
  if (rc != 0) return fail(ErrorCode::Sandbox, "seccomp: cannot add the socket rules");
  return {};
}

Result<void> add_always_denied(scmp_filter_ctx ctx) {
  for (const char* name : kAlwaysDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a syscall on this architecture
    if (rule(ctx, nr, 0, nullptr) != 0) {
      return fail(ErrorCode::Sandbox, std::string("seccomp: cannot add a rule for ") + name);
    }
  }
  for (const NewSyscall& call : kAlwaysDeniedNew) {
    int nr = seccomp_syscall_resolve_name(call.name);
    if (rule(ctx, nr == __NR_SCMP_ERROR ? call.nr : nr, 0, nullptr) != 0) {
      return fail(ErrorCode::Sandbox, std::string("seccomp: cannot add a rule for ") + call.name);
    }
  }
  return {};
}

// Serving and TCP fast open. listen() on an unbound TCP socket autobinds an ephemeral port without
// bind(), so Landlock's bind rules never see it. A fast-open SYN (MSG_FASTOPEN on sendto/sendmsg/
// sendmmsg, whose flags argument applies to every message; TCP_FASTOPEN_CONNECT) is sent by the TCP
// stack, not connect(), so Landlock's connect rules never see its port. Applied whatever the
// network policy: a socket can also arrive over a unix socket.
Result<void> add_serving_rules(scmp_filter_ctx ctx, const NetworkPolicy& net) {
  int rc = 0;
  if (!net.listen) rc |= rule(ctx, SCMP_SYS(listen), 0, nullptr);
  const scmp_datum_t fastopen = MSG_FASTOPEN;
  for (auto [nr, arg] :
       {std::pair{SCMP_SYS(sendto), 3u}, {SCMP_SYS(sendmsg), 2u}, {SCMP_SYS(sendmmsg), 3u}}) {
    scmp_arg_cmp flag = {arg, SCMP_CMP_MASKED_EQ, fastopen, fastopen};
    rc |= rule(ctx, nr, 1, &flag);
  }
  for (scmp_datum_t option : {TCP_FASTOPEN, TCP_FASTOPEN_CONNECT}) {
    std::array<scmp_arg_cmp, 2> cmps = {SCMP_A1(SCMP_CMP_MASKED_EQ, kInt, IPPROTO_TCP),
                                        SCMP_A2(SCMP_CMP_MASKED_EQ, kInt, option)};
    rc |= rule(ctx, SCMP_SYS(setsockopt), 2, cmps.data());
  }
  if (rc != 0)
    return fail(ErrorCode::Sandbox, "seccomp: cannot add the listen and fast-open rules");
  return {};
}

// Scheduling of other processes: Landlock has no hook for it and commoncap lets a process without
// capabilities change any process of its uid that has none either (the kernel run by an ordinary
// user, the user's shell): pin it to one CPU, make it SCHED_IDLE, nice 19, idle I/O class. Like
// prlimit64, only the caller's own (pid 0) stays reachable; pthread calls that name a thread id
// fail.
Result<void> add_scheduling_rules(scmp_filter_ctx ctx) {
  int rc = 0;
  scmp_arg_cmp other_a0 = SCMP_A0(SCMP_CMP_NE, 0);
  for (int nr : {SCMP_SYS(sched_setaffinity), SCMP_SYS(sched_setscheduler),
                 SCMP_SYS(sched_setparam), SCMP_SYS(sched_setattr)}) {
    rc |= rule(ctx, nr, 1, &other_a0);
  }
  // setpriority/ioprio_set(which, who, ...): a process group or a whole uid, or another pid.
  scmp_arg_cmp other_a1 = SCMP_A1(SCMP_CMP_NE, 0);
  scmp_arg_cmp not_prio_process = SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS);
  scmp_arg_cmp not_ioprio_process = SCMP_A0(SCMP_CMP_NE, 1);  // IOPRIO_WHO_PROCESS
  rc |= rule(ctx, SCMP_SYS(setpriority), 1, &not_prio_process);
  rc |= rule(ctx, SCMP_SYS(setpriority), 1, &other_a1);
  rc |= rule(ctx, SCMP_SYS(ioprio_set), 1, &not_ioprio_process);
  rc |= rule(ctx, SCMP_SYS(ioprio_set), 1, &other_a1);
  if (rc != 0) return fail(ErrorCode::Sandbox, "seccomp: cannot add the scheduling rules");
  return {};
}

// Set-user/group-ID modes. Landlock has no hook for a file's mode, and a command run by a root
// kernel owns every file it creates (and every system file it can name): one created or chmod'ed
// with S_ISUID in the workspace is a root shell for whoever runs it next, outside the sandbox. Mode
// arguments with S_ISUID or S_ISGID are refused on every call that takes one; openat2 carries its
// mode in memory BPF can't read, so it gets ENOSYS and libc callers fall back to openat.
Result<void> add_setid_mode_rules(scmp_filter_ctx ctx) {
  int rc = 0;
  for (auto [name, arg] : {std::pair{"open", 2u},
                           {"openat", 3u},
                           {"creat", 1u},
                           {"mknod", 1u},
                           {"mknodat", 2u},
                           {"chmod", 1u},
                           {"fchmod", 1u},
                           {"fchmodat", 2u},
                           {"fchmodat2", 2u}}) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a syscall on this architecture
    for (scmp_datum_t bit : {S_ISUID, S_ISGID}) {
      scmp_arg_cmp cmp = {arg, SCMP_CMP_MASKED_EQ, bit, bit};
      rc |= rule(ctx, nr, 1, &cmp);
    }
  }
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0);
  if (rc != 0) return fail(ErrorCode::Sandbox, "seccomp: cannot add the set-id mode rules");
  return {};
}

// A memfd lives on the kernel's internal shmem mount, which Landlock's path checks let through, so
// a copy of any readable program in one runs by execveat(AT_EMPTY_PATH) or /proc/self/fd/N, past
// the allow-list. memfd_create is allowed only with MFD_NOEXEC_SEAL (no exec bits, F_SEAL_EXEC
// keeps them off). A kernel older than 6.3 doesn't know the flag and fails it with EINVAL:
// memfd_create is then unusable, which fails closed.
Result<void> add_memfd_rules(scmp_filter_ctx ctx) {
  const int nr = SCMP_SYS(memfd_create);
  scmp_arg_cmp unsealed = SCMP_A1(SCMP_CMP_MASKED_EQ, kMfdNoexecSeal, 0);
  scmp_arg_cmp exec = SCMP_A1(SCMP_CMP_MASKED_EQ, kMfdExec, kMfdExec);
  if (rule(ctx, nr, 1, &unsealed) != 0 || rule(ctx, nr, 1, &exec) != 0) {
    return fail(ErrorCode::Sandbox, "seccomp: cannot add the memfd_create rules");
  }
  return {};
}

// inotify: Landlock has no hook for watches, which need only lookup and read permission, so a watch
// would report activity in ~/.ssh or the kernel's data dir. Refused unless the profile opts in.
Result<void> add_watch_rules(scmp_filter_ctx ctx, bool allowed) {
  if (allowed) return {};
  if (rule(ctx, SCMP_SYS(inotify_init), 0, nullptr) != 0 ||
      rule(ctx, SCMP_SYS(inotify_init1), 0, nullptr) != 0) {
    return fail(ErrorCode::Sandbox, "seccomp: cannot add the inotify rules");
  }
  return {};
}

// Whether this kernel knows MFD_NOEXEC_SEAL (>= 6.3), i.e. whether sandboxed programs can use
// memfds.
bool kernel_seals_memfds() {
  int fd = memfd_create("kernex-probe", MFD_CLOEXEC | static_cast<unsigned>(kMfdNoexecSeal));
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

Result<std::vector<sock_filter>> build_seccomp_filter(const SandboxProfile& profile,
                                                      PolicyStatus& status) {
  const NetworkPolicy& net = profile.network;
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return fail(ErrorCode::Sandbox, "seccomp_init failed");
  // Non-native syscall ABIs (i386 int 0x80, x32) kill the process: their numbers and socketcall()
  // multiplexing would slip past every rule below.
  if (seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0) != 0) {
    return fail(ErrorCode::Sandbox, "seccomp: cannot set filter attributes");
  }
  KERNEX_RETURN_IF_ERROR(add_always_denied(ctx.get()));
  // clone3 passes its flags in memory where BPF can't look: ENOSYS makes libc fall back to
  // clone(2), whose namespace flags are refused below.
  if (seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0) {
    return fail(ErrorCode::Sandbox, "seccomp: cannot add the clone3 rule");
  }
  for (scmp_datum_t flag : std::initializer_list<scmp_datum_t>{
           CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS,
           CLONE_NEWCGROUP, CLONE_NEWTIME}) {
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    if (rule(ctx.get(), SCMP_SYS(clone), 1, &cmp) != 0) {
      return fail(ErrorCode::Sandbox, "seccomp: cannot add the clone namespace rules");
    }
  }
  // Another process's resource limits: Landlock has no hook for prlimit, and a command of the
  // kernel's uid could lower the kernel's own (RLIMIT_NOFILE, RLIMIT_CPU, ...). Its own stay
  // reachable as pid 0, which is what getrlimit/setrlimit pass.
  {
    scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, 0);
    if (rule(ctx.get(), SCMP_SYS(prlimit64), 1, &other) != 0) {
      return fail(ErrorCode::Sandbox, "seccomp: cannot add the prlimit64 rule");
    }
  }
  // Terminal input injection (TIOCSTI) and console control (TIOCLINUX).
  for (scmp_datum_t request : std::initializer_list<scmp_datum_t>{TIOCSTI, TIOCLINUX}) {
    scmp_arg_cmp cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, request);
    if (rule(ctx.get(), SCMP_SYS(ioctl), 1, &cmp) != 0) {
      return fail(ErrorCode::Sandbox, "seccomp: cannot add the ioctl rules");
    }
  }
  KERNEX_RETURN_IF_ERROR(add_socket_rules(ctx.get(), net));
  KERNEX_RETURN_IF_ERROR(add_serving_rules(ctx.get(), net));
  KERNEX_RETURN_IF_ERROR(add_memfd_rules(ctx.get()));
  KERNEX_RETURN_IF_ERROR(add_scheduling_rules(ctx.get()));
  KERNEX_RETURN_IF_ERROR(add_setid_mode_rules(ctx.get()));
  KERNEX_RETURN_IF_ERROR(add_watch_rules(ctx.get(), profile.watch_files));
  status.listen_allowed = net.listen;
  status.file_watches_allowed = profile.watch_files;
  status.memfd_sealed = kernel_seals_memfds();

  // libseccomp 2.5 exports only to an fd.
  int fd = memfd_create("kernex-seccomp", MFD_CLOEXEC);
  if (fd < 0)
    return fail(ErrorCode::Sandbox, std::string("memfd_create failed: ") + std::strerror(errno));
  std::vector<sock_filter> program;
  int rc = seccomp_export_bpf(ctx.get(), fd);
  struct stat st {};
  if (rc == 0 && ::fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size % sizeof(sock_filter) == 0) {
    program.resize(static_cast<std::size_t>(st.st_size) / sizeof(sock_filter));
    if (::pread(fd, program.data(), static_cast<std::size_t>(st.st_size), 0) != st.st_size)
      program.clear();
  }
  ::close(fd);
  if (program.empty()) return fail(ErrorCode::Sandbox, "seccomp: cannot export the BPF program");
  return program;
}

}  // namespace kernex::sandbox
