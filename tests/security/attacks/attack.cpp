// Multi-call attack program for the escape battery: `attack <case> [args...]` tries one thing and prints
// one line: "OK ..." when the attempt worked, otherwise the errno name (e.g. "EPERM") of the step that
// failed. The battery decides what counts as blocked; this program only reports.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/vm_sockets.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int report_errno(const char* step = nullptr) {
  const char* name = strerrorname_np(errno);
  if (step != nullptr) std::printf("%s:%s\n", step, name != nullptr ? name : "?");
  else std::printf("%s\n", name != nullptr ? name : "?");
  return 0;
}
int report(long rc, const char* step = nullptr) {
  if (rc < 0) return report_errno(step);
  std::printf("OK\n");
  return 0;
}

int family_of(const std::string& s) {
  if (s == "unix") return AF_UNIX;
  if (s == "inet") return AF_INET;
  if (s == "inet6") return AF_INET6;
  if (s == "netlink") return AF_NETLINK;
  if (s == "packet") return AF_PACKET;
  if (s == "vsock") return AF_VSOCK;
  return -1;
}
int type_of(const std::string& s) {
  if (s == "stream") return SOCK_STREAM;
  if (s == "dgram") return SOCK_DGRAM;
  if (s == "raw") return SOCK_RAW;
  if (s == "seqpacket") return SOCK_SEQPACKET;
  return -1;
}

int open_read(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return report_errno();
  char buf[256] = {};
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  if (n < 0) return report_errno("read");
  for (ssize_t i = 0; i < n; ++i) if (buf[i] == '\0' || buf[i] == '\n') buf[i] = ' ';
  std::printf("OK %s\n", buf);
  return 0;
}

int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return report_errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return report_errno("connect");
  const char req[] = "GET / HTTP/1.0\r\n\r\n";
  if (write(fd, req, sizeof(req) - 1) < 0) return report_errno("write");
  char buf[256] = {};
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  for (ssize_t i = 0; i < n; ++i) if (buf[i] == '\r' || buf[i] == '\n') buf[i] = ' ';
  std::printf("OK %s\n", buf);
  return 0;
}

int udp_send(int port) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return report_errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return report(sendto(fd, "x", 1, 0, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), "sendto");
}

int unix_connect(const char* path, bool abstract) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return report_errno("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::size_t len = std::strlen(path);
  std::memcpy(addr.sun_path + (abstract ? 1 : 0), path, len);
  socklen_t size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (abstract ? 1 : 0));
  return report(connect(fd, reinterpret_cast<sockaddr*>(&addr), size), "connect");
}

int caps() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return report_errno();
  int bounding = 0;
  for (int cap = 0; cap < 64; ++cap) {
    int r = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (r < 0) break;
    bounding += r;
  }
  int ambient = 0;
  for (int cap = 0; cap < 64; ++cap) {
    int r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0);
    if (r < 0) break;
    ambient += r;
  }
  std::printf("eff=%x%08x prm=%x%08x inh=%x%08x bounding=%d ambient=%d nnp=%d\n", data[1].effective,
              data[0].effective, data[1].permitted, data[0].permitted, data[1].inheritable, data[0].inheritable,
              bounding, ambient, prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
  return 0;
}

int run(const std::vector<std::string>& a) {
  const std::string& c = a[0];
  auto arg = [&](std::size_t i) { return i < a.size() ? a[i].c_str() : ""; };
  auto num = [&](std::size_t i) { return std::atol(arg(i)); };

  if (c == "read") return open_read(arg(1));
  if (c == "write") return report(open(arg(1), O_WRONLY | O_CREAT | O_APPEND, 0644));
  if (c == "list") return report(open(arg(1), O_RDONLY | O_DIRECTORY));
  if (c == "symlink") return report(symlink(arg(1), arg(2)));
  if (c == "link") return report(link(arg(1), arg(2)));
  if (c == "rename") return report(rename(arg(1), arg(2)));
  if (c == "exec") {
    char* argv[] = {const_cast<char*>(arg(1)), nullptr};
    execv(arg(1), argv);
    return report_errno();
  }
  if (c == "socket") return report(socket(family_of(arg(1)), type_of(arg(2)), static_cast<int>(num(3))));
  if (c == "socketpair") {
    int sv[2];
    return report(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
  }
  if (c == "tcp") return tcp_connect(static_cast<int>(num(1)));
  if (c == "udp") return udp_send(static_cast<int>(num(1)));
  if (c == "dns") {
    addrinfo* res = nullptr;
    int rc = getaddrinfo(arg(1), "80", nullptr, &res);
    if (rc != 0) {
      std::printf("EAI %s\n", gai_strerror(rc));
      return 0;
    }
    std::printf("OK\n");
    return 0;
  }
  if (c == "unix") return unix_connect(arg(1), false);
  if (c == "abstract") return unix_connect(arg(1), true);
  if (c == "io_uring") {
    io_uring_params params{};
    return report(syscall(SYS_io_uring_setup, 4, &params));
  }
  if (c == "ptrace") return report(ptrace(PTRACE_ATTACH, static_cast<pid_t>(num(1)), nullptr, nullptr));
  if (c == "vm_readv") {
    char buf[8];
    iovec local{buf, sizeof(buf)};
    iovec remote{reinterpret_cast<void*>(std::strtoul(arg(2), nullptr, 0)), sizeof(buf)};
    return report(process_vm_readv(static_cast<pid_t>(num(1)), &local, 1, &remote, 1, 0));
  }
  if (c == "kill") return report(kill(static_cast<pid_t>(num(1)), SIGURG));
  if (c == "prlimit") {
    // Sets the target's RLIMIT_CORE to our own: harmless if it works, but it must not.
    struct rlimit64 mine {};
    if (prlimit64(0, RLIMIT_CORE, nullptr, &mine) != 0) return report_errno("self");
    return report(prlimit64(static_cast<pid_t>(num(1)), RLIMIT_CORE, &mine, nullptr));
  }

  if (c == "mount") return report(mount("none", arg(1), "tmpfs", 0, nullptr));
  if (c == "unshare") return report(unshare(CLONE_NEWUSER | CLONE_NEWNS));
  if (c == "unshare_net") return report(unshare(CLONE_NEWNET));
  if (c == "clone_newuser") {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (pid == 0) _exit(0);
    return report(pid);
  }
  if (c == "setns") return report(setns(0, CLONE_NEWNET));
  if (c == "keyctl") return report(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
  if (c == "add_key") return report(syscall(SYS_add_key, "user", "kernex", "x", 1, KEY_SPEC_PROCESS_KEYRING));
  if (c == "bpf") {
    bpf_attr attr{};
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    return report(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
  }
  if (c == "perf") {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    return report(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
  }
  if (c == "userfaultfd") return report(syscall(SYS_userfaultfd, 0));
  if (c == "finit_module") return report(syscall(SYS_finit_module, 0, "", 0));
  if (c == "setsid") return report(setsid());
  if (c == "setpgid") return report(setpgid(0, 0));
  if (c == "caps") return caps();
  if (c == "setuid") return report(setuid(static_cast<uid_t>(num(1))));
  if (c == "chown") return report(chown(arg(1), static_cast<uid_t>(num(2)), static_cast<gid_t>(num(2))));
  if (c == "euid") {
    std::printf("euid=%d uid=%d\n", static_cast<int>(geteuid()), static_cast<int>(getuid()));
    return 0;
  }
  if (c == "tiocsti") {
    char ch = 'x';
    return report(ioctl(0, TIOCSTI, &ch));
  }
  if (c == "int80") {
#if defined(__x86_64__)
    long ret = 0;
    asm volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");  // i386 getpid
    std::printf("OK %ld\n", ret);
#else
    std::printf("UNSUPPORTED\n");
#endif
    return 0;
  }
  if (c == "memory") {
    const long mb = num(1);
    std::vector<char*> blocks;
    for (long i = 0; i < mb; ++i) {
      char* p = static_cast<char*>(std::malloc(1 << 20));
      if (p == nullptr) {
        std::printf("ENOMEM after %ld MiB\n", i);
        return 0;
      }
      std::memset(p, 1, 1 << 20);
      blocks.push_back(p);
    }
    std::printf("OK %ld MiB\n", mb);
    return 0;
  }
  if (c == "fds") {
    int count = 0;
    while (open("/dev/null", O_RDONLY) >= 0) {
      if (++count > 1000000) break;
    }
    std::printf("%s after %d\n", strerrorname_np(errno), count);
    return 0;
  }
  if (c == "fork_bomb") {
    int failures = 0;
    for (;;) {
      if (fork() < 0 && ++failures == 1) {
        std::printf("%s\n", strerrorname_np(errno));
        std::fflush(stdout);
      }
    }
  }
  if (c == "daemon") {
    // The classic double-fork daemon: the child leaves the session, the parent exits at once.
    int report_pipe[2];
    if (pipe(report_pipe) != 0) return report_errno("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      int rc = setsid();
      const char* outcome = rc < 0 ? strerrorname_np(errno) : "OK";
      (void)!write(report_pipe[1], outcome, std::strlen(outcome));
      close(report_pipe[1]);
      close(1);
      close(2);
      for (;;) pause();
    }
    if (pid < 0) return report_errno("fork");
    close(report_pipe[1]);
    char buf[32] = {};
    (void)!read(report_pipe[0], buf, sizeof(buf) - 1);
    std::printf("setsid=%s child=%d\n", buf, static_cast<int>(pid));
    return 0;
  }
  if (c == "fill") {
    int fd = open(arg(1), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return report_errno("open");
    signal(SIGXFSZ, SIG_IGN);
    static char block[1 << 16];
    long total = 0;
    const long limit = num(2);
    while (total < limit) {
      ssize_t n = write(fd, block, sizeof(block));
      if (n < 0) {
        std::printf("%s after %ld\n", strerrorname_np(errno), total);
        return 0;
      }
      total += n;
    }
    std::printf("OK %ld\n", total);
    return 0;
  }
  // battery2_files: code from a written file, and removing what a mount pins.
  if (c == "mmap_exec" || c == "mprotect_exec") {
    int fd = open(arg(1), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return report_errno("open");
    const bool direct = c == "mmap_exec";
    void* m = mmap(nullptr, 4096, direct ? PROT_READ | PROT_EXEC : PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return report_errno("mmap");
    return report(direct ? 0 : mprotect(m, 4096, PROT_READ | PROT_EXEC), "mprotect");
  }
  if (c == "unlink") return report(unlink(arg(1)));
  if (c == "rmdir") return report(rmdir(arg(1)));
  std::printf("unknown case %s\n", c.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: attack <case> [args...]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return run(std::vector<std::string>(argv + 1, argv + argc));
}
