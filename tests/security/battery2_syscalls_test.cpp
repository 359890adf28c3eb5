// The second escape battery, syscall classes (issue 15 items 5, 6, 8, 10): serving and TCP fast
// open past Landlock's connect rules, SysV and POSIX IPC objects shared with the host, code run
// from anonymous or copied files, and inotify watches on paths the command can't open. Each case
// runs a real attack through the spawner while this process plays the kernel (a throwaway $HOME
// with
// ~/.ssh/id_rsa and a data dir ~/.kernex), asserts the attack failed the expected way and that
// nothing the sandbox started is still alive. tests/security/README.md lists the cases.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "battery_support.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using namespace kernex::battery;
using namespace std::chrono_literals;

namespace {

constexpr const char* kSentinel = "HOST-IPC-SENTINEL";
constexpr unsigned kMfdNoexecSeal = 0x0008U;  // linux/memfd.h of kernels >= 6.3
constexpr unsigned kMfdExec = 0x0010U;
constexpr unsigned kMfdHugetlb = 0x0004U;
constexpr int kTcpFastopen = 23;         // netinet/tcp.h TCP_FASTOPEN (server queue)
constexpr int kTcpFastopenConnect = 30;  // TCP_FASTOPEN_CONNECT

// The loopback listener of the network cases, answering "ok".
struct Listener : LoopbackServer {
  Listener() : LoopbackServer("ok") {}
};

// Turns on the client bit of net.ipv4.tcp_fastopen for the fast-open cases (the default, 1, has it)
// so that they attack for real, and restores the previous value.
class FastOpenClient {
 public:
  FastOpenClient() {
    std::ifstream("/proc/sys/net/ipv4/tcp_fastopen") >> saved_;
    if ((saved_ & 1) == 0) changed_ = static_cast<bool>(std::ofstream(kPath) << (saved_ | 1));
  }
  ~FastOpenClient() {
    if (changed_) std::ofstream(kPath) << saved_;
  }
  bool enabled() const {
    int now = 0;
    std::ifstream(kPath) >> now;
    return (now & 1) != 0;
  }

 private:
  static constexpr const char* kPath = "/proc/sys/net/ipv4/tcp_fastopen";
  int saved_ = 0;
  bool changed_ = false;
};

class SecurityBattery2Syscalls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ASSERT_TRUE(make_scratch_root("kernex-battery2-sys", root_));
    home_ = root_ / "home";
    ws_ = root_ / "ws";
    git_ws_ = root_ / "git-ws";
    fs::create_directories(home_ / ".ssh");
    fs::create_directories(home_ / ".kernex" / "projects");
    fs::create_directories(ws_);
    fs::create_directories(git_ws_ / ".git" / "hooks");
    std::ofstream(home_ / ".ssh" / "id_rsa") << "PRIVATE-KEY\n";
    fs::permissions(home_ / ".ssh" / "id_rsa", fs::perms(0600));
    std::ofstream(git_ws_ / ".git" / "config") << "[core]\n";
    home_override_.set(home_);
  }
  static void TearDownTestSuite() {
    home_override_.restore();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // A workspace without .git: the child inherits the seccomp filter from a clone thread.
  static PolicyBuilder defaults() {
    return PolicyBuilder().workspace(ws_).executable(KERNEX_ATTACK_DIR).timeout(10s);
  }
  // A workspace with .git: protective mounts, so the child joins a mount namespace and loads the
  // filter itself (the other spawn path).
  static PolicyBuilder with_mounts() {
    return PolicyBuilder().workspace(git_ws_).executable(KERNEX_ATTACK_DIR).timeout(10s);
  }
  // TCP opted in for `port` only.
  static PolicyBuilder tcp_to(std::uint16_t port) { return defaults().allow_tcp_connect(port); }

  static Policy build(const PolicyBuilder& b) { return build_policy(b); }
  SpawnResult run(const Policy& policy, std::vector<std::string> argv) {
    return run_leaving_nothing(policy, std::move(argv));
  }
  // The first line the attack printed: "OK ..." or "<step>:<errno name>".
  std::string attack(std::vector<std::string> args, const PolicyBuilder& b = defaults()) {
    args.insert(args.begin(), kAttack);
    auto r = run(build(b), std::move(args));
    return first_line(r.stdout_data);
  }

  static bool tcp_rules() { return landlock_abi() >= 4; }
  // A key no other process uses: this test's pid in the high bits, a case number in the low ones.
  static key_t key(int n) { return static_cast<key_t>((::getpid() << 8) | n); }
  static std::string key_text(int n) { return std::to_string(key(n)); }

  static inline fs::path root_, home_, ws_, git_ws_;
  static inline HomeOverride home_override_;
};

#define SKIP_WITHOUT_TCP_RULES() \
  if (!tcp_rules())              \
  GTEST_SKIP() << "Landlock ABI " << landlock_abi() << " has no TCP rules (needs 4)"

// ---- network: serving and TCP fast open (item 5)
// --------------------------------------------------

// The SYN of sendto(MSG_FASTOPEN) is sent by tcp_sendmsg_fastopen, not connect(): Landlock's
// connect hook never sees the port.
TEST_F(SecurityBattery2Syscalls, FastOpenSendtoToAnUnlistedPort) {
  SKIP_WITHOUT_TCP_RULES();
  FastOpenClient tfo;
  Listener allowed, target;
  EXPECT_EQ(attack({"fastopen", "sendto", target.port_text()}, tcp_to(allowed.port())),
            "send:EPERM");
  EXPECT_EQ(target.accepted(), 0);
}

TEST_F(SecurityBattery2Syscalls, FastOpenSendmsgToAnUnlistedPort) {
  SKIP_WITHOUT_TCP_RULES();
  FastOpenClient tfo;
  Listener allowed, target;
  EXPECT_EQ(attack({"fastopen", "sendmsg", target.port_text()}, tcp_to(allowed.port())),
            "send:EPERM");
  EXPECT_EQ(target.accepted(), 0);
}

// sendmmsg applies its flags argument to every message (msg_flags in each header are ignored).
TEST_F(SecurityBattery2Syscalls, FastOpenSendmmsgToAnUnlistedPort) {
  SKIP_WITHOUT_TCP_RULES();
  FastOpenClient tfo;
  Listener allowed, target;
  EXPECT_EQ(attack({"fastopen", "sendmmsg", target.port_text()}, tcp_to(allowed.port())),
            "send:EPERM");
  EXPECT_EQ(target.accepted(), 0);
}

// The flag where the BPF rule doesn't look, in each message header: the kernel ignores it there too
// (sendmsg takes none of msg_flags, sendmmsg only MSG_EOR), so the send fails unconnected.
TEST_F(SecurityBattery2Syscalls, FastOpenFlagInTheMessageHeaders) {
  SKIP_WITHOUT_TCP_RULES();
  FastOpenClient tfo;
  Listener allowed, target;
  for (const char* how : {"sendmsg_hdr", "sendmmsg_hdr"}) {
    const auto r = attack({"fastopen", how, target.port_text()}, tcp_to(allowed.port()));
    EXPECT_TRUE(r == "send:EPIPE" || r == "send:ENOTCONN") << how << ": " << r;
  }
  EXPECT_EQ(target.accepted(), 0);
}

// Fast open is refused on the allowed port too: the rule can't see the address, only the flag.
TEST_F(SecurityBattery2Syscalls, FastOpenRefusedEvenToTheListedPort) {
  SKIP_WITHOUT_TCP_RULES();
  FastOpenClient tfo;
  Listener allowed;
  EXPECT_EQ(attack({"fastopen", "sendto", allowed.port_text()}, tcp_to(allowed.port())),
            "send:EPERM");
  EXPECT_EQ(allowed.accepted(), 0);
  // A plain connect to the listed port still works.
  EXPECT_EQ(attack({"tcp", allowed.port_text()}, tcp_to(allowed.port())), "OK ok");
}

TEST_F(SecurityBattery2Syscalls, FastOpenConnectOption) {
  SKIP_WITHOUT_TCP_RULES();
  FastOpenClient tfo;
  Listener allowed, target;
  EXPECT_EQ(attack({"fastopen", "connect", target.port_text()}, tcp_to(allowed.port())),
            "setsockopt:EPERM");
  EXPECT_EQ(target.accepted(), 0);
}

TEST_F(SecurityBattery2Syscalls, FastOpenServerOption) {
  SKIP_WITHOUT_TCP_RULES();
  Listener allowed;
  EXPECT_EQ(attack({"tcp_sockopt", std::to_string(kTcpFastopen)}, tcp_to(allowed.port())),
            "setsockopt:EPERM");
  EXPECT_EQ(attack({"tcp_sockopt", std::to_string(kTcpFastopenConnect)}, tcp_to(allowed.port())),
            "setsockopt:EPERM");
  // Other TCP options stay: TCP_NODELAY (1).
  EXPECT_EQ(attack({"tcp_sockopt", "1"}, tcp_to(allowed.port())), "OK");
}

// listen() on an unbound TCP socket autobinds an ephemeral port: no bind(), so no Landlock bind
// rule.
TEST_F(SecurityBattery2Syscalls, ListenOnTcpWithAPortList) {
  SKIP_WITHOUT_TCP_RULES();
  Listener allowed;
  EXPECT_EQ(attack({"listen", "inet"}, tcp_to(allowed.port())), "listen:EPERM");
}

TEST_F(SecurityBattery2Syscalls, ListenOnTcpOnTheMountNamespacePath) {
  SKIP_WITHOUT_TCP_RULES();
  Listener allowed;
  EXPECT_EQ(attack({"listen", "inet"}, with_mounts().allow_tcp_connect(allowed.port())),
            "listen:EPERM");
}

TEST_F(SecurityBattery2Syscalls, ListenOnUnixSocketInTheWorkspace) {
  const auto path = (ws_ / "serve.sock").string();
  EXPECT_EQ(attack({"listen", "unix", path}, defaults().allow_unix_sockets()), "listen:EPERM");
  fs::remove(path);
}

// A socketpair end (what network none leaves) can't be turned into a listener either.
TEST_F(SecurityBattery2Syscalls, ListenWithNetworkNone) {
  EXPECT_EQ(attack({"listen", "inet"}), "socket:EPERM");
  EXPECT_EQ(attack({"listen_stdin"}), "listen:EPERM");
}

TEST_F(SecurityBattery2Syscalls, ListenWhenServingIsOptedIn) {
  const auto path = (ws_ / "opted.sock").string();
  EXPECT_EQ(attack({"listen", "unix", path}, defaults().allow_unix_sockets().allow_listen()),
            "OK port=0");
  fs::remove(path);
  if (tcp_rules()) {
    Listener allowed;
    EXPECT_EQ(
        attack({"listen", "inet"}, tcp_to(allowed.port()).allow_listen()).rfind("OK port=", 0), 0u);
  }
}

// ---- SysV IPC and POSIX message queues (item 6)
// ---------------------------------------------------

class HostIpc {
 public:
  explicit HostIpc(key_t shm_key, key_t msg_key, key_t sem_key) {
    shm_ = ::shmget(shm_key, 4096, IPC_CREAT | 0600);
    if (shm_ >= 0) {
      void* p = ::shmat(shm_, nullptr, 0);
      std::strcpy(static_cast<char*>(p), kSentinel);
      ::shmdt(p);
    }
    msg_ = ::msgget(msg_key, IPC_CREAT | 0600);
    struct {
      long type;
      char text[32];
    } m{1, {}};
    std::strcpy(m.text, kSentinel);
    if (msg_ >= 0) ::msgsnd(msg_, &m, std::strlen(kSentinel) + 1, 0);
    sem_ = ::semget(sem_key, 1, IPC_CREAT | 0600);
  }
  ~HostIpc() {
    if (shm_ >= 0) ::shmctl(shm_, IPC_RMID, nullptr);
    if (msg_ >= 0) ::msgctl(msg_, IPC_RMID, nullptr);
    if (sem_ >= 0) ::semctl(sem_, 0, IPC_RMID);
  }
  bool ok() const { return shm_ >= 0 && msg_ >= 0 && sem_ >= 0; }
  int shm() const { return shm_; }
  int messages() const {
    msqid_ds ds{};
    return ::msgctl(msg_, IPC_STAT, &ds) == 0 ? static_cast<int>(ds.msg_qnum) : -1;
  }
  int sem_value() const { return ::semctl(sem_, 0, GETVAL); }

 private:
  int shm_ = -1, msg_ = -1, sem_ = -1;
};

class SecurityBattery2SysvIpc : public SecurityBattery2Syscalls {
 protected:
  void SetUp() override {
    host_ = std::make_unique<HostIpc>(key(1), key(2), key(3));
    if (!host_->ok()) GTEST_SKIP() << "this kernel has no SysV IPC: " << std::strerror(errno);
  }
  void TearDown() override { host_.reset(); }
  std::unique_ptr<HostIpc> host_;
};

TEST_F(SecurityBattery2SysvIpc, AttachHostSegment) {
  auto r = attack({"shm_read", key_text(1)});
  EXPECT_EQ(r, "shmget:EPERM");
  EXPECT_EQ(r.find(kSentinel), std::string::npos);
}

TEST_F(SecurityBattery2SysvIpc, AttachHostSegmentOnTheMountNamespacePath) {
  EXPECT_EQ(attack({"shm_read", key_text(1)}, with_mounts()), "shmget:EPERM");
}

TEST_F(SecurityBattery2SysvIpc, RemoveHostSegment) {
  EXPECT_EQ(attack({"shm_remove", key_text(1)}), "shmget:EPERM");
  shmid_ds ds{};
  EXPECT_EQ(::shmctl(host_->shm(), IPC_STAT, &ds), 0);
}

TEST_F(SecurityBattery2SysvIpc, ListSegmentsWithoutAKey) {
  EXPECT_EQ(attack({"shm_list"}), "shmctl:EPERM");
}

TEST_F(SecurityBattery2SysvIpc, SegmentOutlivingTheSandbox) {
  EXPECT_EQ(attack({"shm_create", key_text(4)}), "shmget:EPERM");
  int left = ::shmget(key(4), 0, 0);
  EXPECT_LT(left, 0);
  if (left >= 0) ::shmctl(left, IPC_RMID, nullptr);
}

TEST_F(SecurityBattery2SysvIpc, ReadHostMessageQueue) {
  auto r = attack({"msg_read", key_text(2)});
  EXPECT_EQ(r, "msgget:EPERM");
  EXPECT_EQ(host_->messages(), 1);
}

TEST_F(SecurityBattery2SysvIpc, RemoveHostMessageQueue) {
  EXPECT_EQ(attack({"msg_remove", key_text(2)}), "msgget:EPERM");
  EXPECT_EQ(host_->messages(), 1);
}

TEST_F(SecurityBattery2SysvIpc, MessageQueueOutlivingTheSandbox) {
  EXPECT_EQ(attack({"msg_create", key_text(5)}), "msgget:EPERM");
  int left = ::msgget(key(5), 0);
  EXPECT_LT(left, 0);
  if (left >= 0) ::msgctl(left, IPC_RMID, nullptr);
}

TEST_F(SecurityBattery2SysvIpc, OperateOnHostSemaphore) {
  EXPECT_EQ(attack({"sem_op", key_text(3)}), "semget:EPERM");
  EXPECT_EQ(host_->sem_value(), 0);
}

TEST_F(SecurityBattery2SysvIpc, RemoveHostSemaphore) {
  EXPECT_EQ(attack({"sem_remove", key_text(3)}), "semget:EPERM");
  EXPECT_EQ(host_->sem_value(), 0);
}

TEST_F(SecurityBattery2SysvIpc, SemaphoreOutlivingTheSandbox) {
  EXPECT_EQ(attack({"sem_create", key_text(6)}), "semget:EPERM");
  int left = ::semget(key(6), 0, 0);
  EXPECT_LT(left, 0);
  if (left >= 0) ::semctl(left, 0, IPC_RMID);
}

// POSIX message queues live in the IPC namespace's mqueue mount, which Landlock never sees.
class SecurityBattery2PosixQueue : public SecurityBattery2Syscalls {
 protected:
  void SetUp() override {
    name_ = "/kernex-battery2-" + std::to_string(::getpid());
    mq_attr attr{};
    attr.mq_maxmsg = 4;
    attr.mq_msgsize = 64;
    q_ = ::mq_open(name_.c_str(), O_CREAT | O_RDWR, 0600, &attr);
    if (q_ == static_cast<mqd_t>(-1))
      GTEST_SKIP() << "this kernel has no POSIX message queues: " << std::strerror(errno);
    ::mq_send(q_, kSentinel, std::strlen(kSentinel) + 1, 0);
  }
  void TearDown() override {
    if (q_ != static_cast<mqd_t>(-1)) ::mq_close(q_);
    ::mq_unlink(name_.c_str());
  }
  long queued() const {
    mq_attr attr{};
    return ::mq_getattr(q_, &attr) == 0 ? attr.mq_curmsgs : -1;
  }
  std::string name_;
  mqd_t q_ = static_cast<mqd_t>(-1);
};

TEST_F(SecurityBattery2PosixQueue, ReadHostQueue) {
  auto r = attack({"mq_read", name_});
  EXPECT_EQ(r, "mq_open:EPERM");
  EXPECT_EQ(queued(), 1);
}

TEST_F(SecurityBattery2PosixQueue, UnlinkHostQueue) {
  EXPECT_EQ(attack({"mq_unlink", name_}), "mq_unlink:EPERM");
  mqd_t again = ::mq_open(name_.c_str(), O_RDONLY);
  EXPECT_NE(again, static_cast<mqd_t>(-1));
  if (again != static_cast<mqd_t>(-1)) ::mq_close(again);
}

TEST_F(SecurityBattery2PosixQueue, QueueOutlivingTheSandbox) {
  const std::string planted = name_ + "-planted";
  EXPECT_EQ(attack({"mq_create", planted}), "mq_open:EPERM");
  mqd_t left = ::mq_open(planted.c_str(), O_RDONLY);
  EXPECT_EQ(left, static_cast<mqd_t>(-1));
  if (left != static_cast<mqd_t>(-1)) {
    ::mq_close(left);
    ::mq_unlink(planted.c_str());
  }
}

// Regression: POSIX shared memory and named semaphores are files in /dev/shm, never granted.
TEST_F(SecurityBattery2Syscalls, PosixSharedMemory) {
  const auto name = "/dev/shm/kernex-battery2-" + std::to_string(::getpid());
  const std::string planted = attack({"write", name});
  EXPECT_TRUE(planted == "EACCES" || planted == "EROFS")
      << planted;  // Landlock, or the read-only mount first
  EXPECT_FALSE(fs::exists(name));
  EXPECT_EQ(attack({"list", "/dev/shm"}), "EACCES");
}

// ---- anonymous code (item 8)
// ----------------------------------------------------------------------

// A memfd is a private inode: Landlock's path checks let it through, so only its creation flags
// decide whether it can be exec'd (memfd_create is allowed with MFD_NOEXEC_SEAL only).
TEST_F(SecurityBattery2Syscalls, MemfdExecveatEmptyPath) {
  EXPECT_EQ(attack({"memfd_exec", kAttack, "0", "execveat"}), "memfd_create:EPERM");
}

TEST_F(SecurityBattery2Syscalls, MemfdExecThroughProcSelfFd) {
  EXPECT_EQ(attack({"memfd_exec", kAttack, "0", "proc"}), "memfd_create:EPERM");
}

TEST_F(SecurityBattery2Syscalls, MemfdExecOnTheMountNamespacePath) {
  EXPECT_EQ(attack({"memfd_exec", kAttack, "0", "execveat"}, with_mounts()), "memfd_create:EPERM");
}

// The allow-list names the attack program only; a memfd copy of /bin/echo must not run.
TEST_F(SecurityBattery2Syscalls, MemfdRunsAProgramOffTheAllowList) {
  auto allow_listed = defaults().allow_command(kAttack);
  auto r = run(build(allow_listed), {kAttack, "memfd_exec", "/bin/echo", "0", "execveat"});
  EXPECT_EQ(first_line(r.stdout_data), "memfd_create:EPERM");
  EXPECT_EQ(r.stdout_data.find("hello"), std::string::npos);
  EXPECT_EQ(attack({"memfd_exec", "/bin/echo", "0", "proc"}, allow_listed), "memfd_create:EPERM");
}

TEST_F(SecurityBattery2Syscalls, MemfdWithExecFlag) {
  EXPECT_EQ(attack({"memfd_flags", std::to_string(kMfdExec)}), "memfd_create:EPERM");
  EXPECT_EQ(attack({"memfd_flags", std::to_string(kMfdExec | 1u)}), "memfd_create:EPERM");
}

TEST_F(SecurityBattery2Syscalls, MemfdHugetlbWithoutSeal) {
  EXPECT_EQ(attack({"memfd_flags", std::to_string(kMfdHugetlb)}), "memfd_create:EPERM");
}

// What stays allowed: a sealed memfd, which can't be made executable (F_SEAL_EXEC) nor exec'd.
TEST_F(SecurityBattery2Syscalls, SealedMemfdStaysUsableButNotExecutable) {
  const auto sealed = attack({"memfd_flags", std::to_string(kMfdNoexecSeal)});
  if (sealed == "memfd_create:EINVAL")
    GTEST_SKIP() << "kernel < 6.3: no MFD_NOEXEC_SEAL, memfd_create is refused";
  EXPECT_EQ(sealed, "OK");
  EXPECT_EQ(attack({"memfd_sealed_chmod"}), "fchmod:EPERM");
  EXPECT_EQ(attack({"memfd_exec", kAttack, std::to_string(kMfdNoexecSeal), "execveat"}),
            "fchmod:EPERM");
}

TEST_F(SecurityBattery2Syscalls, MemfdSecret) {
  EXPECT_EQ(attack({"memfd_secret"}), "memfd_secret:EPERM");
}

// Regression cases: copies in writable places have no Landlock EXECUTE.
TEST_F(SecurityBattery2Syscalls, CopyIntoPrivateTmpAndExec) {
  auto policy = build(defaults());
  const auto dst = (policy.private_tmp() / "copy").string();
  auto out = run(policy, {kAttack, "copy_exec", "/bin/echo", dst});
  EXPECT_EQ(first_line(out.stdout_data), "exec:EACCES");
}

TEST_F(SecurityBattery2Syscalls, CopyIntoWorkspaceAndExecveat) {
  EXPECT_EQ(attack({"tmpfile_exec", ws_.string(), "/bin/echo"}), "exec:EACCES");
}

TEST_F(SecurityBattery2Syscalls, TmpfileLinkedIntoWorkspaceAndExec) {
  EXPECT_EQ(attack({"tmpfile_link_exec", ws_.string(), "/bin/echo"}), "exec:EACCES");
  fs::remove(ws_ / "linked-copy");
}

TEST_F(SecurityBattery2Syscalls, TmpfileInPrivateTmpAndExec) {
  auto policy = build(defaults());
  auto out = run(policy, {kAttack, "tmpfile_exec", policy.private_tmp().string(), "/bin/echo"});
  EXPECT_EQ(first_line(out.stdout_data), "exec:EACCES");
}

TEST_F(SecurityBattery2Syscalls, ShellCopiesAProgramAndRunsIt) {
  auto r = run(build(defaults()),
               {"/bin/sh", "-c", "cp /bin/echo \"$TMPDIR/e\" && \"$TMPDIR/e\" planted-ran"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data.find("planted-ran"), std::string::npos);
}

// ---- watches on protected paths (item 10)
// ---------------------------------------------------------

// Landlock has no hook for inotify_add_watch: a watch needs only lookup and DAC read permission.
TEST_F(SecurityBattery2Syscalls, WatchSshDirectory) {
  EXPECT_EQ(attack({"inotify", (home_ / ".ssh").string()}), "inotify_init:EPERM");
}

TEST_F(SecurityBattery2Syscalls, WatchKernelDataDir) {
  EXPECT_EQ(attack({"inotify", (home_ / ".kernex").string()}), "inotify_init:EPERM");
}

TEST_F(SecurityBattery2Syscalls, WatchEtc) {
  EXPECT_EQ(attack({"inotify", "/etc"}), "inotify_init:EPERM");
}

TEST_F(SecurityBattery2Syscalls, WatchWithLegacyInit) {
  EXPECT_EQ(attack({"inotify_legacy", (home_ / ".ssh").string()}), "inotify_init:EPERM");
}

TEST_F(SecurityBattery2Syscalls, WatchOnTheMountNamespacePath) {
  EXPECT_EQ(attack({"inotify", (home_ / ".ssh" / "id_rsa").string()}, with_mounts()),
            "inotify_init:EPERM");
}

TEST_F(SecurityBattery2Syscalls, FanotifyStaysRefused) {
  EXPECT_EQ(attack({"fanotify"}), "fanotify_init:EPERM");
  EXPECT_EQ(attack({"fanotify"}, defaults().allow_file_watches()), "fanotify_init:EPERM");
}

TEST_F(SecurityBattery2Syscalls, WatchWhenOptedIn) {
  EXPECT_EQ(attack({"inotify", ws_.string()}, defaults().allow_file_watches()), "OK");
}

// ---- other processes (found by probing)
// ------------------------------------------------------------

// A process of this uid with no capabilities, like a kernel run by an ordinary user or that user's
// shell: commoncap lets a capability-less sandboxed process change its scheduling.
class CaplessProcess {
 public:
  CaplessProcess() {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct none[2] = {};
      const char done = ::syscall(SYS_capset, &header, none) == 0 ? '1' : '0';
      (void)!::write(ready[1], &done, 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char done = '0';
    if (pid_ > 0) (void)!::read(ready[0], &done, 1);
    ::close(ready[0]);
    EXPECT_EQ(done, '1') << "the stand-in process could not drop its capabilities";
  }
  ~CaplessProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string pid() const { return std::to_string(pid_); }
  int nice() const { return ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid_)); }

 private:
  pid_t pid_ = -1;
};

// Refused by the filter (EPERM), or out of sight: every spawn is pid 2 of a PID namespace of its
// own, so another process's pid names nothing there (ESRCH). Either way the call reached no one.
::testing::AssertionResult refused(const std::string& outcome, const std::string& call) {
  if (outcome == call + ":EPERM" || outcome.ends_with(":ESRCH"))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << call << " got: " << outcome;
}

TEST_F(SecurityBattery2Syscalls, ReniceAProcessOfTheUser) {
  CaplessProcess victim;
  EXPECT_TRUE(refused(attack({"setpriority", victim.pid()}), "setpriority"));
  EXPECT_TRUE(refused(attack({"setpriority", victim.pid()}, with_mounts()), "setpriority"));
}

// PRIO_USER reaches every process of the uid; not run before the fix (it would renice them).
TEST_F(SecurityBattery2Syscalls, ReniceEveryProcessOfTheUser) {
  EXPECT_EQ(attack({"setpriority_user"}), "setpriority:EPERM");
}

TEST_F(SecurityBattery2Syscalls, PinAProcessOfTheUserToOneCpu) {
  CaplessProcess victim;
  EXPECT_TRUE(refused(attack({"affinity", victim.pid()}), "sched_setaffinity"));
}

TEST_F(SecurityBattery2Syscalls, IdleSchedulerForAProcessOfTheUser) {
  CaplessProcess victim;
  EXPECT_TRUE(refused(attack({"scheduler", victim.pid()}), "sched_setscheduler"));
}

TEST_F(SecurityBattery2Syscalls, IdleIoClassForAProcessOfTheUser) {
  CaplessProcess victim;
  EXPECT_TRUE(refused(attack({"ioprio", victim.pid()}), "ioprio_set"));
}

// What stays: a command's own scheduling, named as pid 0 (nice(), sched_setaffinity(0, ...)).
TEST_F(SecurityBattery2Syscalls, OwnSchedulingStaysReachable) {
  for (const char* c : {"setpriority", "affinity", "scheduler", "ioprio"}) {
    EXPECT_EQ(attack({c, "0"}), "OK") << c;
  }
}

// Regression: the kernel (more capabilities than the command) is out of reach of these calls
// already (commoncap's subset rule, Landlock's ptrace and signal hooks).
TEST_F(SecurityBattery2Syscalls, KernelIsOutOfReachOfProcessCalls) {
  const auto me = std::to_string(::getpid());
  EXPECT_TRUE(refused(attack({"kcmp", me}), "kcmp"));
  const std::string madvise = attack({"process_madvise", me});
  EXPECT_TRUE(madvise == "process_madvise:EACCES" || madvise.ends_with(":ESRCH")) << madvise;
  if (landlock_abi() >= 6) {
    EXPECT_TRUE(refused(attack({"pidfd_signal", me}), "pidfd_send_signal"));
  }
  for (const char* c : {"setpriority", "affinity", "scheduler", "ioprio"}) {
    const std::string outcome = attack({c, me});
    EXPECT_TRUE(outcome.find(":EPERM") != std::string::npos || outcome.ends_with(":ESRCH"))
        << c << ": " << outcome;
  }
}

// Sets kernel.dmesg_restrict to 0 (as many distributions ship it) for the syslog case, and restores
// it.
class OpenKernelLog {
 public:
  OpenKernelLog() {
    std::ifstream(kPath) >> saved_;
    if (saved_ != 0) changed_ = static_cast<bool>(std::ofstream(kPath) << 0);
  }
  ~OpenKernelLog() {
    if (changed_) std::ofstream(kPath) << saved_;
  }
  bool open() const {
    int now = 1;
    std::ifstream(kPath) >> now;
    return now == 0;
  }

 private:
  static constexpr const char* kPath = "/proc/sys/kernel/dmesg_restrict";
  int saved_ = 1;
  bool changed_ = false;
};

// syslog(2) reads the kernel log without /dev/kmsg; with dmesg_restrict = 0 it needs no capability.
TEST_F(SecurityBattery2Syscalls, ReadTheKernelLog) {
  OpenKernelLog log;
  if (!log.open()) GTEST_SKIP() << "can't set kernel.dmesg_restrict to 0 (not root?)";
  EXPECT_EQ(attack({"syslog"}), "syslog:EPERM");
}

// Signals by SIGIO ownership (F_SETOWN to the kernel's pid or group): Landlock's signal scope
// covers them (ABI >= 6). The test counts SIGURGs that reach it.
std::atomic<int> g_sigurg{0};
TEST_F(SecurityBattery2Syscalls, SignalTheKernelThroughSigio) {
  if (landlock_abi() < 6)
    GTEST_SKIP() << "Landlock ABI " << landlock_abi() << " has no signal scoping (needs 6)";
  struct sigaction sa {};
  struct sigaction old {};
  sa.sa_handler = [](int) { ++g_sigurg; };
  ::sigaction(SIGURG, &sa, &old);
  g_sigurg = 0;
  const auto me = std::to_string(::getpid());
  const auto group = std::to_string(-::getpgrp());
  // The request itself is allowed, or the kernel's pid is out of sight of the command's PID
  // namespace.
  auto allowed_or_unseen = [](const std::string& outcome) {
    return outcome == "OK" || outcome == "F_SETOWN:ESRCH";
  };
  for (const auto& target : {me, group}) {
    EXPECT_PRED1(allowed_or_unseen, attack({"sigio", target})) << target;
    EXPECT_PRED1(allowed_or_unseen, attack({"sigio", target}, with_mounts())) << target;
  }
  ::sigaction(SIGURG, &old, nullptr);
  EXPECT_EQ(g_sigurg.load(), 0);
}

TEST_F(SecurityBattery2Syscalls, MakeADeviceNode) {
  EXPECT_EQ(attack({"mknod", (ws_ / "mem").string()}), "mknod:EACCES");
  EXPECT_FALSE(fs::exists(ws_ / "mem"));
}

// quotactl is refused; its fd form (5.14) reads the same quota state.
TEST_F(SecurityBattery2Syscalls, QuotactlThroughAnFd) {
  EXPECT_EQ(attack({"quotactl_fd", ws_.string()}), "quotactl_fd:EPERM");
}

TEST_F(SecurityBattery2Syscalls, MemfdSecretCopyExec) {
  EXPECT_EQ(attack({"memfd_secret_exec", kAttack}), "memfd_secret:EPERM");
}

// ---- set-user/group-ID files (found by probing)
// ----------------------------------------------------

// A command of a root kernel owns what it creates: a set-uid file left in the workspace is a root
// shell for whoever runs it next, outside the sandbox.
class SecurityBattery2SetIdModes : public SecurityBattery2Syscalls {
 protected:
  void TearDown() override {
    std::error_code ec;
    fs::remove(ws_ / "planted", ec);
  }
  // No file of the workspace carries a set-id bit.
  static bool workspace_has_setid() {
    for (const auto& e : fs::recursive_directory_iterator(ws_)) {
      const auto perms = fs::symlink_status(e.path()).permissions();
      if ((perms & (fs::perms::set_uid | fs::perms::set_gid)) != fs::perms::none) return true;
    }
    return false;
  }
  static std::string planted() { return (ws_ / "planted").string(); }
  static void create_planted() { std::ofstream(ws_ / "planted") << "x"; }
};

TEST_F(SecurityBattery2SetIdModes, CreateSetuidFile) {
  EXPECT_EQ(attack({"create_mode", planted(), "4755"}), "open:EPERM");
  EXPECT_FALSE(workspace_has_setid());
}

TEST_F(SecurityBattery2SetIdModes, CreateSetgidFile) {
  EXPECT_EQ(attack({"create_mode", planted(), "2755"}), "open:EPERM");
  EXPECT_FALSE(workspace_has_setid());
}

TEST_F(SecurityBattery2SetIdModes, MknodSetuidFile) {
  EXPECT_EQ(attack({"mknod_mode", planted(), "4755"}), "mknod:EPERM");
  EXPECT_FALSE(workspace_has_setid());
}

TEST_F(SecurityBattery2SetIdModes, ChmodSetuid) {
  create_planted();
  EXPECT_EQ(attack({"chmod", planted(), "4755"}), "chmod:EPERM");
  EXPECT_FALSE(workspace_has_setid());
}

TEST_F(SecurityBattery2SetIdModes, FchmodSetgid) {
  create_planted();
  EXPECT_EQ(attack({"fchmod", planted(), "2755"}), "fchmod:EPERM");
  EXPECT_FALSE(workspace_has_setid());
}

TEST_F(SecurityBattery2SetIdModes, Fchmodat2Setuid) {
  create_planted();
  const auto r = attack({"fchmodat2", planted(), "4755"});
  if (r == "fchmodat2:ENOSYS") GTEST_SKIP() << "kernel < 6.6: no fchmodat2";
  EXPECT_EQ(r, "fchmodat2:EPERM");
  EXPECT_FALSE(workspace_has_setid());
}

// A file outside the writable grants, readable to the command (a system binary stand-in the test
// owns): its mode can't gain a set-id bit either.
TEST_F(SecurityBattery2SetIdModes, SetuidOnAReadOnlyGrantedFile) {
  const fs::path tool = root_ / "tools" / "tool";
  fs::create_directories(tool.parent_path());
  std::ofstream(tool) << "#!/bin/sh\n";
  fs::permissions(tool, fs::perms(0755));
  EXPECT_EQ(attack({"chmod", tool.string(), "4755"}, defaults().read_only(tool.parent_path())),
            "chmod:EPERM");
  EXPECT_EQ(fs::status(tool).permissions() & fs::perms::set_uid, fs::perms::none);
}

TEST_F(SecurityBattery2SetIdModes, Openat2CarriesItsModeInMemory) {
  EXPECT_EQ(attack({"openat2", (ws_ / ".").string()}), "openat2:ENOSYS");
}

// What stays: ordinary modes in the workspace (git, tar, pip set them).
TEST_F(SecurityBattery2SetIdModes, OrdinaryModesStay) {
  EXPECT_EQ(attack({"create_mode", planted(), "755"}), "OK");
  EXPECT_EQ(attack({"chmod", planted(), "644"}), "OK");
  EXPECT_EQ(attack({"fchmod", planted(), "600"}), "OK");
}

// ---- extended attributes (found by probing)
// ---------------------------------------------------------

// Landlock has no hook for xattrs: an access ACL is a chmod on any file the command owns, even one
// it can't open (~/.ssh/id_rsa) or may only read.
TEST_F(SecurityBattery2Syscalls, AclOpensTheSshKeyToEveryone) {
  const auto key = home_ / ".ssh" / "id_rsa";
  EXPECT_EQ(attack({"acl_grant", key.string()}), "setxattr:EPERM");
  EXPECT_EQ(fs::status(key).permissions(), fs::perms(0600));
}

TEST_F(SecurityBattery2Syscalls, AclThroughAReadOnlyFd) {
  const fs::path file = root_ / "readable" / "config";
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "x";
  fs::permissions(file, fs::perms(0600));
  EXPECT_EQ(attack({"acl_grant_fd", file.string()}, defaults().read_only(file.parent_path())),
            "fsetxattr:EPERM");
  EXPECT_EQ(fs::status(file).permissions(), fs::perms(0600));
}

TEST_F(SecurityBattery2Syscalls, UserXattrOnAProtectedFile) {
  EXPECT_EQ(attack({"setxattr", (home_ / ".ssh" / "id_rsa").string()}), "setxattr:EPERM");
  EXPECT_EQ(attack({"setxattr", (home_ / ".kernex").string()}, with_mounts()), "setxattr:EPERM");
}

TEST_F(SecurityBattery2Syscalls, RemoveAnXattrOfAProtectedFile) {
  const auto key = (home_ / ".ssh" / "id_rsa").string();
  if (::setxattr(key.c_str(), "user.kernex-mark", "1", 1, 0) != 0) {
    GTEST_SKIP() << "this filesystem has no user xattrs: " << std::strerror(errno);
  }
  EXPECT_EQ(attack({"removexattr", key, "user.kernex-mark"}), "removexattr:EPERM");
  char value[4];
  EXPECT_EQ(::getxattr(key.c_str(), "user.kernex-mark", value, sizeof(value)), 1);
}

// Regression: Landlock checks no O_PATH open, and linkat(AT_EMPTY_PATH) of such an fd (or through
// /proc/self/fd/N) would give the key a name in the workspace, readable there; Landlock's refer
// check refuses the link (EXDEV).
TEST_F(SecurityBattery2Syscalls, LinkAnOpathFdOfTheKeyIntoTheWorkspace) {
  const auto key = (home_ / ".ssh" / "id_rsa").string();
  EXPECT_EQ(attack({"opath_link", key, (ws_ / "key").string()}), "linkat:EXDEV");
  EXPECT_FALSE(fs::exists(ws_ / "key"));
  EXPECT_EQ(attack({"opath_link", key, (git_ws_ / "key").string()}, with_mounts()), "linkat:EXDEV");
  EXPECT_FALSE(fs::exists(git_ws_ / "key"));
}

// ---- the mount table (found by probing)
// ----------------------------------------------------------

// /proc/self/mountinfo is out of reach (no /proc grant); listmount(2) lists the same mounts.
TEST_F(SecurityBattery2Syscalls, ListTheMountTable) {
  const auto r = attack({"listmount"});
  if (r == "listmount:ENOSYS") GTEST_SKIP() << "kernel < 6.8: no listmount";
  EXPECT_EQ(r, "listmount:EPERM");
}

// ---- the opt-ins in YAML
// ---------------------------------------------------------------------------

TEST(SecurityBattery2SyscallsProfile, OptInsParse) {
  auto p = SandboxProfile::from_yaml("network: {unix: true, listen: true}\nwatch_files: true\n",
                                     "t.yaml");
  ASSERT_TRUE(p.has_value()) << p.error().describe();
  EXPECT_TRUE(p->network.listen);
  EXPECT_TRUE(p->watch_files);
  auto d = SandboxProfile::from_yaml("workspace: /tmp\n", "t.yaml");
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->network.listen);
  EXPECT_FALSE(d->watch_files);
  auto bad = SandboxProfile::from_yaml("network: {listen: maybe}\n", "t.yaml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().describe().find("network.listen"), std::string::npos)
      << bad.error().describe();
}

}  // namespace
