// Multi-call attack program for the escape battery: `attack <case> [args...]` tries one thing and
// prints one line: "OK ..." when the attempt worked, otherwise the errno name (e.g. "EPERM") of the
// step that failed. The battery decides what counts as blocked; this program only reports.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/openat2.h>
#include <linux/perf_event.h>
#include <linux/vm_sockets.h>
#include <mqueue.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/quota.h>
#include <sys/xattr.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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
  if (step != nullptr)
    std::printf("%s:%s\n", step, name != nullptr ? name : "?");
  else
    std::printf("%s\n", name != nullptr ? name : "?");
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
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] == '\0' || buf[i] == '\n') buf[i] = ' ';
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
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return report_errno("connect");
  const char req[] = "GET / HTTP/1.0\r\n\r\n";
  if (write(fd, req, sizeof(req) - 1) < 0) return report_errno("write");
  char buf[256] = {};
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] == '\r' || buf[i] == '\n') buf[i] = ' ';
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
  socklen_t size =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (abstract ? 1 : 0));
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
              data[0].effective, data[1].permitted, data[0].permitted, data[1].inheritable,
              data[0].inheritable, bounding, ambient, prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
  return 0;
}

// Cases of the syscall-class battery (battery2_syscalls_test.cpp), defined below run().
constexpr int kNotMine = -1000;
int syscall_case(const std::vector<std::string>& a);

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
  if (c == "socket")
    return report(socket(family_of(arg(1)), type_of(arg(2)), static_cast<int>(num(3))));
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
  if (c == "ptrace")
    return report(ptrace(PTRACE_ATTACH, static_cast<pid_t>(num(1)), nullptr, nullptr));
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
  if (c == "keyctl")
    return report(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
  if (c == "add_key")
    return report(syscall(SYS_add_key, "user", "kernex", "x", 1, KEY_SPEC_PROCESS_KEYRING));
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
  if (c == "chown")
    return report(chown(arg(1), static_cast<uid_t>(num(2)), static_cast<gid_t>(num(2))));
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
  if (int rc = syscall_case(a); rc != kNotMine) return rc;
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

// ---- syscall classes: network serving and fast open, SysV/POSIX IPC, anonymous code, watches
// -------

constexpr unsigned kMfdNoexecSeal = 0x0008U;  // linux/memfd.h of kernels >= 6.3

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// TCP fast open: the SYN leaves from sendto/sendmsg/sendmmsg (MSG_FASTOPEN) or from the first write
// after connect (TCP_FASTOPEN_CONNECT). Prints OK when the data was handed to the kernel.
int fastopen(const std::string& how, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return report_errno("socket");
  sockaddr_in addr = loopback(port);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  char data[] = "GET / HTTP/1.0\r\n\r\n";
  iovec iov{data, sizeof(data) - 1};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = sizeof(addr);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  long rc = -1;
  if (how == "sendto") {
    rc = sendto(fd, data, sizeof(data) - 1, MSG_FASTOPEN, sa, sizeof(addr));
  } else if (how == "sendmsg") {
    rc = sendmsg(fd, &msg, MSG_FASTOPEN);
  } else if (how == "sendmmsg") {
    mmsghdr one{msg, 0};
    rc = sendmmsg(fd, &one, 1, MSG_FASTOPEN);
  } else if (how == "sendmsg_hdr" || how == "sendmmsg_hdr") {
    // The flag in the message header instead of the flags argument (the kernel ignores it there).
    msg.msg_flags = MSG_FASTOPEN;
    mmsghdr one{msg, 0};
    rc = how == "sendmsg_hdr" ? sendmsg(fd, &msg, MSG_NOSIGNAL)
                              : sendmmsg(fd, &one, 1, MSG_NOSIGNAL);
  } else if (how == "connect") {
    int on = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &on, sizeof(on)) != 0)
      return report_errno("setsockopt");
    if (connect(fd, sa, sizeof(addr)) != 0) return report_errno("connect");
    rc = write(fd, data, sizeof(data) - 1);
  }
  if (rc < 0) return report_errno("send");
  char buf[64] = {};
  (void)!read(fd, buf, sizeof(buf) - 1);  // wait for the server's reply so the connection completes
  std::printf("OK\n");
  return 0;
}

// listen() on an unbound socket: TCP autobinds an ephemeral port without any bind() (so without
// Landlock's bind hook); a unix socket is bound to `path` first.
int listen_on(const std::string& family, const char* path) {
  const bool unix_socket = family == "unix";
  int fd = socket(unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return report_errno("socket");
  if (unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      return report_errno("bind");
  }
  if (listen(fd, 1) != 0) return report_errno("listen");
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  std::printf("OK port=%d\n", unix_socket ? 0 : ntohs(bound.sin_port));
  return 0;
}

int tcp_sockopt(int option) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return report_errno("socket");
  int value = 1;
  return report(setsockopt(fd, IPPROTO_TCP, option, &value, sizeof(value)), "setsockopt");
}

// SysV IPC objects named by key; the test process created them.
int sysv(const std::string& what, key_t key) {
  char text[128] = {};
  if (what == "shm_read" || what == "shm_remove") {
    int id = shmget(key, 0, 0);
    if (id < 0) return report_errno("shmget");
    if (what == "shm_remove") return report(shmctl(id, IPC_RMID, nullptr), "shmctl");
    void* p = shmat(id, nullptr, SHM_RDONLY);
    if (p == reinterpret_cast<void*>(-1)) return report_errno("shmat");
    std::strncpy(text, static_cast<const char*>(p), sizeof(text) - 1);
    std::printf("OK %s\n", text);
    return 0;
  }
  if (what == "shm_create") return report(shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0600), "shmget");
  if (what == "msg_read" || what == "msg_remove") {
    int id = msgget(key, 0);
    if (id < 0) return report_errno("msgget");
    if (what == "msg_remove") return report(msgctl(id, IPC_RMID, nullptr), "msgctl");
    struct {
      long type;
      char text[128];
    } m{};
    if (msgrcv(id, &m, sizeof(m.text) - 1, 0, IPC_NOWAIT) < 0) return report_errno("msgrcv");
    std::printf("OK %s\n", m.text);
    return 0;
  }
  if (what == "msg_create") return report(msgget(key, IPC_CREAT | IPC_EXCL | 0600), "msgget");
  if (what == "sem_op" || what == "sem_remove") {
    int id = semget(key, 0, 0);
    if (id < 0) return report_errno("semget");
    if (what == "sem_remove") return report(semctl(id, 0, IPC_RMID), "semctl");
    sembuf op{0, 1, 0};
    return report(semop(id, &op, 1), "semop");
  }
  if (what == "sem_create") return report(semget(key, 1, IPC_CREAT | IPC_EXCL | 0600), "semget");
  return kNotMine;
}

// Enumerates the segments of the IPC namespace without knowing a key (what `ipcs` does).
int shm_list() {
  shm_info info{};
  int max = shmctl(0, SHM_INFO, reinterpret_cast<shmid_ds*>(&info));
  if (max < 0) return report_errno("shmctl");
  int seen = 0;
  for (int i = 0; i <= max; ++i) {
    shmid_ds ds{};
    if (shmctl(i, SHM_STAT, &ds) >= 0) ++seen;
  }
  std::printf("OK %d\n", seen);
  return 0;
}

int posix_mq(const std::string& what, const char* name) {
  // The raw call: glibc's mq_unlink reports EPERM as EACCES.
  if (what == "mq_unlink") return report(syscall(SYS_mq_unlink, name + 1), "mq_unlink");
  if (what == "mq_create")
    return report(mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, nullptr), "mq_open");
  mqd_t q = mq_open(name, O_RDONLY | O_NONBLOCK);
  if (q == static_cast<mqd_t>(-1)) return report_errno("mq_open");
  char buf[8192] = {};
  if (mq_receive(q, buf, sizeof(buf), nullptr) < 0) return report_errno("mq_receive");
  std::printf("OK %s\n", buf);
  return 0;
}

// Copies `src` into `fd`; false (errno set) on failure.
bool copy_into(int fd, const char* src) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(in, buf, sizeof(buf));
    if (n < 0) return false;
    if (n == 0) break;
    if (write(fd, buf, static_cast<std::size_t>(n)) != n) return false;
  }
  close(in);
  return true;
}

// Runs the copy held by `fd` with argv {src, "hello"}: the attack program prints "OK hello" when it
// runs, any other program does whatever it does with that argument.
int exec_fd(int fd, const char* src, const std::string& how) {
  char hello[] = "hello";
  char* argv[] = {const_cast<char*>(src), hello, nullptr};
  char* envp[] = {nullptr};
  if (how == "proc") {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    execve(path.c_str(), argv, envp);
  } else {
    syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
  }
  return report_errno("exec");
}

// memfd_create with `flags`, a copy of `src`, then exec by `how` (execveat AT_EMPTY_PATH or /proc).
int memfd_exec(const char* src, unsigned flags, const std::string& how) {
  int fd = static_cast<int>(syscall(SYS_memfd_create, "kernex-attack", flags));
  if (fd < 0) return report_errno("memfd_create");
  if (!copy_into(fd, src)) return report_errno("copy");
  if (fchmod(fd, 0755) != 0) return report_errno("fchmod");
  return exec_fd(fd, src, how);
}

// An unnamed file in `dir` (O_TMPFILE), a copy of `src`, exec through the fd; with `link`, linked
// to dir/linked-copy and exec'd by that name.
int tmpfile_exec(const char* dir, const char* src, bool link_first) {
  int fd = open(dir, O_TMPFILE | O_RDWR, 0755);
  if (fd < 0) return report_errno("open");
  if (!copy_into(fd, src)) return report_errno("copy");
  if (!link_first) return exec_fd(fd, src, "execveat");
  const std::string target = std::string(dir) + "/linked-copy";
  const std::string from = "/proc/self/fd/" + std::to_string(fd);
  if (linkat(fd, "", AT_FDCWD, target.c_str(), AT_EMPTY_PATH) != 0 &&
      linkat(AT_FDCWD, from.c_str(), AT_FDCWD, target.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    return report_errno("linkat");
  }
  close(fd);
  char hello[] = "hello";
  char* argv[] = {const_cast<char*>(target.c_str()), hello, nullptr};
  execv(target.c_str(), argv);
  return report_errno("exec");
}

// A copy of `src` at `dst`, mode 0755, exec'd.
int copy_exec(const char* src, const char* dst) {
  int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (fd < 0) return report_errno("open");
  if (!copy_into(fd, src)) return report_errno("copy");
  close(fd);
  char hello[] = "hello";
  char* argv[] = {const_cast<char*>(dst), hello, nullptr};
  execv(dst, argv);
  return report_errno("exec");
}

int inotify_watch(const char* path, bool legacy) {
  int fd = legacy ? static_cast<int>(syscall(SYS_inotify_init)) : inotify_init1(IN_CLOEXEC);
  if (fd < 0) return report_errno("inotify_init");
  return report(inotify_add_watch(fd, path, IN_ALL_EVENTS), "inotify_add_watch");
}

// Calls on another process (the kernel) that Landlock's ptrace and signal scoping may not cover.
// Each sets the target's current value back on it, so a success changes nothing but shows the
// permission.
int other_process(const std::string& what, pid_t pid) {
  if (what == "setpriority") {
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
    if (errno != 0) return report_errno("getpriority");
    return report(setpriority(PRIO_PROCESS, static_cast<id_t>(pid), nice), "setpriority");
  }
  if (what == "setpriority_user") {
    errno = 0;
    int nice = getpriority(PRIO_USER, 0);
    if (errno != 0) return report_errno("getpriority");
    return report(setpriority(PRIO_USER, 0, nice), "setpriority");
  }
  if (what == "affinity") {
    cpu_set_t set;
    if (sched_getaffinity(pid, sizeof(set), &set) != 0) return report_errno("sched_getaffinity");
    return report(sched_setaffinity(pid, sizeof(set), &set), "sched_setaffinity");
  }
  if (what == "scheduler") {
    int policy = sched_getscheduler(pid);
    sched_param param{};
    if (policy < 0 || sched_getparam(pid, &param) != 0) return report_errno("sched_getscheduler");
    return report(sched_setscheduler(pid, policy, &param), "sched_setscheduler");
  }
  if (what == "ioprio") {
    long prio = syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, pid);
    if (prio < 0) return report_errno("ioprio_get");
    return report(syscall(SYS_ioprio_set, 1, pid, prio), "ioprio_set");
  }
  if (what == "kcmp")
    return report(syscall(SYS_kcmp, getpid(), pid, 0 /* KCMP_FILE */, 0, 0), "kcmp");
  if (what == "pidfd_signal") {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return report_errno("pidfd_open");
    return report(syscall(SYS_pidfd_send_signal, fd, SIGURG, nullptr, 0), "pidfd_send_signal");
  }
  if (what == "process_madvise") {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return report_errno("pidfd_open");
    static char page[4096];
    iovec iov{page, sizeof(page)};
    return report(syscall(SYS_process_madvise, fd, &iov, 1, 20 /* MADV_COLD */, 0),
                  "process_madvise");
  }
  return kNotMine;
}

// ---- tenants: one serve session's tools against another's (battery2_tenants_test.cpp)
// ---------------

// A listener for another tenant's tools to reach: a socket file at `where`, or the abstract name
// `where` when `abstract`. Prints READY once listening, then `ACCEPTED <c>` for each connection,
// <c> the first byte it sent ('-' for none): the test's own probe sends one, an attacker's connect
// none.
int serve_unix(const char* where, bool abstract) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return report_errno("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::size_t len = std::strlen(where);
  std::memcpy(addr.sun_path + (abstract ? 1 : 0), where, len);
  socklen_t size =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (abstract ? 1 : 0));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), size) != 0) return report_errno("bind");
  if (listen(fd, 4) != 0) return report_errno("listen");
  std::printf("READY\n");
  std::fflush(stdout);
  for (;;) {
    int c = accept(fd, nullptr, nullptr);
    if (c < 0) return report_errno("accept");
    char byte = '-';
    if (read(c, &byte, 1) != 1) byte = '-';
    std::printf("ACCEPTED %c\n", byte);
    std::fflush(stdout);
    close(c);
  }
}

int tenant_case(const std::vector<std::string>& a) {
  const std::string& c = a[0];
  auto arg = [&](std::size_t i) { return i < a.size() ? a[i].c_str() : ""; };
  if (c == "via_dirfd") {
    // A handle on a directory outside the grants (O_PATH opens are not checked), then a file below
    // it.
    int dir = open(arg(1), O_PATH | O_DIRECTORY);
    if (dir < 0) return report_errno("open_dir");
    int fd = openat(dir, arg(2), O_RDONLY);
    if (fd < 0) return report_errno("openat");
    char buf[128] = {};
    if (read(fd, buf, sizeof(buf) - 1) < 0) return report_errno("read");
    std::printf("OK %s\n", buf);
    return 0;
  }
  if (c == "serve_unix") return serve_unix(arg(1), false);
  if (c == "serve_abstract") return serve_unix(arg(1), true);
  if (c == "kill_scan") {
    // Every pid this process may signal (SIGURG, ignored by default) but its own. Not kill(-1): it
    // reports success when every signal it tried was refused.
    std::string hits;
    for (pid_t pid = 1; pid < 65536; ++pid) {
      if (pid != getpid() && kill(pid, SIGURG) == 0) hits += " " + std::to_string(pid);
    }
    std::printf("%s%s\n", hits.empty() ? "NONE" : "OK", hits.c_str());
    return 0;
  }
  if (c == "stat") {
    struct stat st {};
    if (lstat(arg(1), &st) != 0) return report_errno("stat");
    std::printf("OK size=%lld\n", static_cast<long long>(st.st_size));
    return 0;
  }
  if (c == "victim") {
    // Another tenant's long-lived tool: reports its pid, then waits for stdin to close.
    std::printf("READY %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    char buf[16];
    while (read(0, buf, sizeof(buf)) > 0) {
    }
    return 0;
  }
  return kNotMine;
}

int syscall_case(const std::vector<std::string>& a) {
  const std::string& c = a[0];
  if (int rc = tenant_case(a); rc != kNotMine) return rc;
  auto arg = [&](std::size_t i) { return i < a.size() ? a[i].c_str() : ""; };
  auto num = [&](std::size_t i) { return std::atol(arg(i)); };

  if (c == "hello") {
    std::printf("OK hello\n");
    return 0;
  }
  if (c == "fastopen") return fastopen(arg(1), static_cast<int>(num(2)));
  if (c == "listen") return listen_on(arg(1), arg(2));
  if (c == "listen_stdin") return report(listen(0, 1), "listen");
  if (c == "tcp_sockopt") return tcp_sockopt(static_cast<int>(num(1)));
  if (c.starts_with("shm_") || c.starts_with("msg_") || c.starts_with("sem_")) {
    if (c == "shm_list") return shm_list();
    return sysv(c, static_cast<key_t>(num(1)));
  }
  if (c.starts_with("mq_")) return posix_mq(c, arg(1));
  if (c == "memfd_exec")
    return memfd_exec(arg(1), static_cast<unsigned>(std::strtoul(arg(2), nullptr, 0)), arg(3));
  if (c == "memfd_flags") {
    return report(syscall(SYS_memfd_create, "kernex-attack", std::strtoul(arg(1), nullptr, 0)),
                  "memfd_create");
  }
  if (c == "memfd_sealed_chmod") {
    int fd = static_cast<int>(syscall(SYS_memfd_create, "kernex-attack", kMfdNoexecSeal));
    if (fd < 0) return report_errno("memfd_create");
    return report(fchmod(fd, 0755), "fchmod");
  }
  if (c == "memfd_secret") return report(syscall(SYS_memfd_secret, 0), "memfd_secret");
  if (c == "tmpfile_exec") return tmpfile_exec(arg(1), arg(2), false);
  if (c == "tmpfile_link_exec") return tmpfile_exec(arg(1), arg(2), true);
  if (c == "copy_exec") return copy_exec(arg(1), arg(2));
  if (c == "inotify") return inotify_watch(arg(1), false);
  if (c == "inotify_legacy") return inotify_watch(arg(1), true);
  if (c == "fanotify") return report(syscall(SYS_fanotify_init, 0, O_RDONLY), "fanotify_init");
  if (int rc = other_process(c, static_cast<pid_t>(num(1))); rc != kNotMine) return rc;
  if (c == "chmod")
    return report(chmod(arg(1), static_cast<mode_t>(std::strtoul(arg(2), nullptr, 8))), "chmod");
  if (c == "setxattr") return report(setxattr(arg(1), "user.kernex", "x", 1, 0), "setxattr");
  if (c == "removexattr") return report(removexattr(arg(1), arg(2)), "removexattr");
  if (c == "quotactl_fd") {
    int fd = open(arg(1), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return report_errno("open");
    char buf[128];
    return report(syscall(SYS_quotactl_fd, fd, QCMD(Q_GETFMT, USRQUOTA), 0, buf), "quotactl_fd");
  }
  if (c == "create_mode") {
    return report(open(arg(1), O_WRONLY | O_CREAT | O_CLOEXEC,
                       static_cast<mode_t>(std::strtoul(arg(2), nullptr, 8))),
                  "open");
  }
  if (c == "mknod_mode") {
    return report(mknod(arg(1), S_IFREG | static_cast<mode_t>(std::strtoul(arg(2), nullptr, 8)), 0),
                  "mknod");
  }
  if (c == "fchmod") {
    int fd = open(arg(1), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return report_errno("open");
    return report(fchmod(fd, static_cast<mode_t>(std::strtoul(arg(2), nullptr, 8))), "fchmod");
  }
  if (c == "fchmodat2") {
    return report(
        syscall(452 /* fchmodat2 */, AT_FDCWD, arg(1), std::strtoul(arg(2), nullptr, 8), 0),
        "fchmodat2");
  }
  if (c == "openat2") {
    open_how how{};
    how.flags = O_RDONLY;
    return report(syscall(SYS_openat2, AT_FDCWD, arg(1), &how, sizeof(how)), "openat2");
  }
  if (c == "listmount") {
    // struct mnt_id_req {u32 size, spare; u64 mnt_id, param, mnt_ns_id}: list the root's children.
    std::uint64_t req[4] = {32, 0xffffffffffffffffULL /* LSMT_ROOT */, 0, 0};
    std::uint64_t ids[256];
    long n = syscall(458 /* listmount */, req, ids, 256, 0);
    if (n < 0) return report_errno("listmount");
    std::printf("OK %ld\n", n);
    return 0;
  }
  if (c == "acl_grant" || c == "acl_grant_fd") {
    // A minimal access ACL (owner rw, group r, other r): the kernel applies it as mode 0644.
    struct Entry {
      std::uint16_t tag, perm;
      std::uint32_t id;
    };
    struct {
      std::uint32_t version = 2;
      Entry e[3] = {{0x01, 6, 0xffffffff}, {0x04, 4, 0xffffffff}, {0x20, 4, 0xffffffff}};
    } acl;
    if (c == "acl_grant")
      return report(setxattr(arg(1), "system.posix_acl_access", &acl, sizeof(acl), 0), "setxattr");
    int fd = open(arg(1), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return report_errno("open");
    return report(fsetxattr(fd, "system.posix_acl_access", &acl, sizeof(acl), 0), "fsetxattr");
  }
  if (c == "opath_link") {
    // An O_PATH fd (Landlock checks no O_PATH open) linked into a writable place, then read there.
    int fd = open(arg(1), O_PATH | O_CLOEXEC);
    if (fd < 0) return report_errno("open");
    const std::string from = "/proc/self/fd/" + std::to_string(fd);
    if (linkat(fd, "", AT_FDCWD, arg(2), AT_EMPTY_PATH) != 0 &&
        linkat(AT_FDCWD, from.c_str(), AT_FDCWD, arg(2), AT_SYMLINK_FOLLOW) != 0) {
      return report_errno("linkat");
    }
    return open_read(arg(2));
  }
  if (c == "syslog") {
    char buf[4096];
    long n = syscall(SYS_syslog, 3 /* SYSLOG_ACTION_READ_ALL */, buf, sizeof(buf));
    if (n < 0) return report_errno("syslog");
    std::printf("OK %ld bytes\n", n);
    return 0;
  }
  if (c == "sigio") {
    // Asks for SIGURG to go to `pid` (the kernel) whenever a socket pair end becomes readable.
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return report_errno("socketpair");
    if (fcntl(sv[0], F_SETOWN, static_cast<int>(num(1))) != 0) return report_errno("F_SETOWN");
    if (fcntl(sv[0], F_SETSIG, SIGURG) != 0) return report_errno("F_SETSIG");
    if (fcntl(sv[0], F_SETFL, O_ASYNC) != 0) return report_errno("F_SETFL");
    if (write(sv[1], "x", 1) != 1) return report_errno("write");
    std::printf("OK\n");
    return 0;
  }
  if (c == "mknod") return report(mknod(arg(1), S_IFCHR | 0600, makedev(1, 3)), "mknod");
  // overlayfs's own marks, forged: a whiteout (a 0/0 character device) and a named xattr such as
  // trusted.overlay.opaque.
  if (c == "whiteout") return report(mknod(arg(1), S_IFCHR | 0600, makedev(0, 0)), "mknod");
  if (c == "setxattr_named") {
    return report(setxattr(arg(1), arg(2), arg(3), std::strlen(arg(3)), 0), "setxattr");
  }
  if (c == "memfd_secret_exec") {
    int fd = static_cast<int>(syscall(SYS_memfd_secret, 0));
    if (fd < 0) return report_errno("memfd_secret");
    int in = open(arg(1), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (in < 0 || fstat(in, &st) != 0) return report_errno("open");
    if (ftruncate(fd, st.st_size) != 0) return report_errno("ftruncate");
    void* p = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return report_errno("mmap");
    if (read(in, p, static_cast<std::size_t>(st.st_size)) != st.st_size)
      return report_errno("copy");
    munmap(p, static_cast<std::size_t>(st.st_size));
    if (fchmod(fd, 0755) != 0) return report_errno("fchmod");
    return exec_fd(fd, arg(1), "execveat");
  }
  return kNotMine;
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
