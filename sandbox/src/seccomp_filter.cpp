// The seccomp program: default allow, listed calls fail with EPERM. Built with libseccomp in the
// parent and exported as raw BPF so the child only has to call seccomp(2).
#include <fcntl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <sys/mman.h>
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
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "pivot_root", "chroot", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "quotactl", "acct", "swapon", "swapoff",
    "reboot", "uselib", "lookup_dcookie",
    // Leaving the spawner's process group would let a child outlive the group kill.
    "setsid", "setpgid",
};

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
    // Allowed families: AF_INET, AF_INET6 (+ AF_UNIX). Everything else (netlink, packet, vsock, ...)
    // is refused by enumerating the gaps, since one libseccomp rule can't compare an argument twice.
    for (int family = 0; family <= AF_INET6; ++family) {
      if (family == AF_INET || family == AF_INET6 || (family == AF_UNIX && net.unix_sockets)) continue;
      scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family));
      rc |= rule(ctx, socket_nr, 1, &cmp);
    }
    scmp_arg_cmp above = SCMP_A0(SCMP_CMP_GT, AF_INET6);
    rc |= rule(ctx, socket_nr, 1, &above);
    // For IP only stream sockets with protocol 0/TCP: Landlock's port rules cover TCP, not UDP,
    // raw, SCTP or MPTCP.
    for (int family : {AF_INET, AF_INET6}) {
      for (int type : {SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_DCCP, SOCK_PACKET}) {
        std::array<scmp_arg_cmp, 2> cmps = {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
                                            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, static_cast<scmp_datum_t>(type))};
        rc |= rule(ctx, socket_nr, 2, cmps.data());
      }
      std::array<scmp_arg_cmp, 2> proto_high = {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
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

}  // namespace

Result<std::vector<sock_filter>> build_seccomp_filter(const NetworkPolicy& net) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return fail(ErrorCode::Sandbox, "seccomp_init failed");
  // Non-native syscall ABIs (i386 int 0x80, x32) kill the process: their numbers and socketcall()
  // multiplexing would slip past every rule below.
  if (seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0) != 0) {
    return fail(ErrorCode::Sandbox, "seccomp: cannot set filter attributes");
  }
  for (const char* name : kAlwaysDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a syscall on this architecture
    if (rule(ctx.get(), nr, 0, nullptr) != 0) {
      return fail(ErrorCode::Sandbox, std::string("seccomp: cannot add a rule for ") + name);
    }
  }
  // clone3 passes its flags in memory where BPF can't look: ENOSYS makes libc fall back to clone(2),
  // whose namespace flags are refused below.
  if (seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0) {
    return fail(ErrorCode::Sandbox, "seccomp: cannot add the clone3 rule");
  }
  for (scmp_datum_t flag : std::initializer_list<scmp_datum_t>{CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID,
                                                               CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP, CLONE_NEWTIME}) {
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    if (rule(ctx.get(), SCMP_SYS(clone), 1, &cmp) != 0) {
      return fail(ErrorCode::Sandbox, "seccomp: cannot add the clone namespace rules");
    }
  }
  // Another process's resource limits: Landlock has no hook for prlimit, and a command of the kernel's
  // uid could lower the kernel's own (RLIMIT_NOFILE, RLIMIT_CPU, ...). Its own stay reachable as pid 0,
  // which is what getrlimit/setrlimit pass.
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
  if (auto r = add_socket_rules(ctx.get(), net); !r) return std::unexpected(r.error());

  // libseccomp 2.5 exports only to an fd.
  int fd = memfd_create("kernex-seccomp", MFD_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::Sandbox, std::string("memfd_create failed: ") + std::strerror(errno));
  std::vector<sock_filter> program;
  int rc = seccomp_export_bpf(ctx.get(), fd);
  struct stat st {};
  if (rc == 0 && ::fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size % sizeof(sock_filter) == 0) {
    program.resize(static_cast<std::size_t>(st.st_size) / sizeof(sock_filter));
    if (::pread(fd, program.data(), static_cast<std::size_t>(st.st_size), 0) != st.st_size) program.clear();
  }
  ::close(fd);
  if (program.empty()) return fail(ErrorCode::Sandbox, "seccomp: cannot export the BPF program");
  return program;
}

}  // namespace kernex::sandbox
