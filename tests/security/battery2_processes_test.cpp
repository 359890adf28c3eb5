// The process battery (issue 15, items 7 and 9), run as root on every path (spawn through the mount
// namespace, spawn with the clone thread's inherited filter, SandboxedProcess on both, unenforced):
// nothing a command starts outlives the kernel, even one killed by SIGKILL; a dead kernel's private
// TMPDIRs and pids cgroups are reclaimed by the next one; the default profile caps the processes
// and threads of one sandbox. The "kernel" that gets killed is tests/security/stub/kernel_stub.cpp,
// a child of this test. No sleeps: every wait is on an event (a FIFO the daemon writes, a pidfd
// turning readable, a pipe's end of file) under a deadline. tests/security/README.md lists the
// cases.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "battery_support.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/process.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using namespace kernex::battery;
using namespace std::chrono_literals;

namespace {

const std::string kProcs = KERNEX_ATTACK_DIR "/procs";
const std::string kStub = KERNEX_KERNEL_STUB;
using Clock = std::chrono::steady_clock;

// "EAGAIN after 255" -> 255; -1 when the line is not of that form.
int count_after(const std::string& line, const std::string& err = "EAGAIN") {
  const std::string head = err + " after ";
  if (line.rfind(head, 0) != 0) return -1;
  return std::atoi(line.c_str() + head.size());
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// True when `fd` turns readable (a FIFO line, a pipe's EOF, a pidfd's exit) before the deadline.
bool wait_readable(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Every process whose command line holds `marker` (the attack's argv), by pidfd.
std::vector<std::pair<pid_t, int>> processes_with(const std::string& marker) {
  std::vector<std::pair<pid_t, int>> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline;
    try {
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      cmdline.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {
      continue;  // it exited between the listing and the read (ESRCH): another test's process
    }
    if (cmdline.find(marker) == std::string::npos) continue;
    const pid_t pid = std::atoi(name.c_str());
    const int fd = pidfd_open(pid);
    if (fd >= 0) found.emplace_back(pid, fd);
  }
  return found;
}

// Reaps whatever came back to this process (a subreaper) without blocking.
void reap_orphans() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// A stand-in kernel: kernel_stub with `args`, its stdout on a pipe.
struct Stub {
  pid_t pid = -1;
  int out = -1;

  explicit Stub(const std::vector<std::string>& args, const std::string& tmpdir = "") {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    std::vector<std::string> store = {kStub};
    store.insert(store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : store) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(p[1], STDOUT_FILENO);
      if (!tmpdir.empty()) ::setenv("TMPDIR", tmpdir.c_str(), 1);
      ::execv(kStub.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(p[1]);
    out = p[0];
  }
  ~Stub() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
  }
  // The next line the stub prints, or "" at EOF or after 20 s.
  std::string line() {
    std::string s;
    char c;
    while (wait_readable(out, Clock::now() + 20s) && ::read(out, &c, 1) == 1 && c != '\n')
      s.push_back(c);
    return s;
  }
  void kill_and_reap() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  int wait_exit() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

class ProcessBattery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // What outlives a killed stub comes back here, where it can be seen and reaped.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ASSERT_TRUE(make_scratch_root("kernex-battery2-procs", root_));
    git_ws_ = root_ / "git-ws";  // a .git: the policy gets a mount namespace, the child joins it
    plain_ws_ = root_ / "plain-ws";  // none: the child inherits the clone thread's filter
    fs::create_directories(git_ws_ / ".git" / "hooks");
    fs::create_directories(plain_ws_);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void TearDown() override { reap_orphans(); }

  static Policy build(const PolicyBuilder& b) { return build_policy(b); }
  static PolicyBuilder defaults(const fs::path& ws) {
    return PolicyBuilder().workspace(ws).executable(KERNEX_ATTACK_DIR).timeout(20s);
  }
  static SpawnResult run(const Policy& policy, std::vector<std::string> argv,
                         std::optional<std::chrono::milliseconds> timeout = {}) {
    return spawn_expecting(policy, std::move(argv), timeout);
  }

  // What `procs <what>` counted before EAGAIN, spawned in `ws` ("EAGAIN after N" -> N, else -1).
  static int spawned_count(const fs::path& ws, const std::string& what) {
    return count_after(first_line(run(build(defaults(ws)), {kProcs, what}).stdout_data));
  }
  // The line `procs <what>` prints through SandboxedProcess in `ws` while it still holds what it
  // made.
  static void held_count_line(const fs::path& ws, const std::string& what, std::string& line) {
    Command cmd;
    cmd.argv = {kProcs, what};
    auto proc = SandboxedProcess::start(build(defaults(ws)), cmd);
    ASSERT_TRUE(proc.has_value()) << proc.error().describe();
    auto got = proc->read_line(Clock::now() + 20s, 256);
    ASSERT_TRUE(got.has_value()) << got.error().describe();
    line = *got;
  }
  // The default cap, 256 with the command: the count reaches 255 at most, and close to it.
  static void expect_capped(int n, const std::string& line = "") {
    EXPECT_GE(n, 200) << line;
    EXPECT_LE(n, 255) << line;
  }

  // A fresh FIFO in `ws` and a unique marker for the daemon's argv.
  static std::pair<fs::path, std::string> fifo_in(const fs::path& ws) {
    static std::atomic<int> n{0};
    const std::string marker =
        "kx-daemon-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
    const fs::path fifo = ws / (marker + ".fifo");
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    return {fifo, marker};
  }

  // Opened before the daemon can write: a FIFO reader that never had a writer polls as not ready.
  static int open_fifo(const fs::path& fifo) {
    return ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  }

  // Each pidfd must turn readable (its process exited) within 10 s; survivors are killed and named.
  // Orphans that come back here are reaped meanwhile: a namespace's init finishes dying only once
  // every member has been reaped, wherever it was reparented.
  static void expect_all_gone(const std::vector<std::pair<pid_t, int>>& procs,
                              const std::string& what) {
    const auto deadline = Clock::now() + 10s;
    std::vector<pollfd> left;
    for (const auto& [pid, fd] : procs) left.push_back({fd, POLLIN, 0});
    while (!left.empty()) {
      reap_orphans();
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      const int rc = ::poll(left.data(), left.size(), static_cast<int>(std::max<long long>(ms, 0)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) break;
      std::erase_if(left, [](const pollfd& p) { return p.revents != 0; });
    }
    for (const auto& [pid, fd] : procs) {
      const bool alive =
          std::any_of(left.begin(), left.end(), [fd = fd](const pollfd& p) { return p.fd == fd; });
      if (alive) {
        ADD_FAILURE() << what << ": process " << pid << " outlived it";
        ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
      }
      ::close(fd);
    }
    reap_orphans();
  }

  // The daemon attack against a stand-in kernel killed by SIGKILL: stub `mode` runs
  // `procs orphan_stay FIFO variant MARKER` in `ws`; once the daemon is up, the stub is killed.
  static void daemon_outlives_killed_kernel(const std::string& mode, const fs::path& ws,
                                            const std::string& variant) {
    auto [fifo, marker] = fifo_in(ws);
    const int ready = open_fifo(fifo);
    ASSERT_GE(ready, 0);
    Stub stub({mode, ws.string(), KERNEX_ATTACK_DIR, "--", kProcs, "orphan_stay", fifo.string(),
               variant, marker});
    ASSERT_EQ(stub.line(), "started");
    ASSERT_TRUE(wait_readable(ready, Clock::now() + 20s)) << "the daemon never came up";
    auto procs = processes_with(marker);
    ASSERT_GE(procs.size(), 2u) << "the command and its daemon";
    stub.kill_and_reap();
    expect_all_gone(procs, "a kernel killed by SIGKILL");
    ::close(ready);
  }

  static inline fs::path root_, git_ws_, plain_ws_;
};

// ---- nothing outlives a killed kernel (item 9)
// -------------------------------------------------------

// One case: stub `mode` in `ws`, the daemon of `variant`, the stub killed
// (daemon_outlives_killed_kernel).
#define KILLED_KERNEL_CASE(name, mode, ws, variant) \
  TEST_F(ProcessBattery, name) { daemon_outlives_killed_kernel(mode, ws, variant); }

KILLED_KERNEL_CASE(DaemonDiesWithKilledKernelSpawnMountNamespacePath, "spawn", git_ws_, "plain")
KILLED_KERNEL_CASE(DaemonDiesWithKilledKernelSpawnInheritedFilterPath, "spawn", plain_ws_, "plain")
KILLED_KERNEL_CASE(DaemonDiesWithKilledKernelSandboxedProcessMountNamespacePath, "process", git_ws_,
                   "plain")
KILLED_KERNEL_CASE(DaemonDiesWithKilledKernelSandboxedProcessInheritedFilterPath, "process",
                   plain_ws_, "plain")
KILLED_KERNEL_CASE(DaemonDiesWithKilledKernelEvenUnenforced, "spawn-unenforced", plain_ws_, "plain")
KILLED_KERNEL_CASE(DaemonBlockingEverySignalDiesWithKilledKernel, "spawn", plain_ws_, "blocked")
KILLED_KERNEL_CASE(MultithreadedDaemonDiesWithKilledKernel, "process", git_ws_, "threads")

// ---- nothing outlives the spawn either
// ----------------------------------------------------------------

// The daemon keeps the FIFO's write end open for life: "ready", then end of file once it is gone.
void expect_daemon_gone(int fifo) {
  std::string got;
  const auto deadline = Clock::now() + 10s;
  while (wait_readable(fifo, deadline)) {
    char buf[64];
    const ssize_t n = ::read(fifo, buf, sizeof(buf));
    if (n == 0) break;  // no writer left
    if (n > 0) got.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(got, "ready\n") << "the daemon never came up";
  pollfd p{fifo, POLLIN, 0};
  EXPECT_TRUE(::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0)
      << "the daemon outlived the spawn";
}

TEST_F(ProcessBattery, DaemonDiesWhenTheCommandExits) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    auto [fifo, marker] = fifo_in(ws);
    const int ready = open_fifo(fifo);
    auto r = run(build(defaults(ws)), {kProcs, "orphan_exit", fifo.string(), "plain", marker});
    EXPECT_EQ(r.stdout_data, "OK orphaned\n");
    expect_daemon_gone(ready);
    ::close(ready);
  }
}

TEST_F(ProcessBattery, DaemonDiesWithTheTimeout) {
  auto [fifo, marker] = fifo_in(git_ws_);
  const int ready = open_fifo(fifo);
  auto r = run(build(defaults(git_ws_)), {kProcs, "orphan_stay", fifo.string(), "blocked", marker},
               500ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
  expect_daemon_gone(ready);
  ::close(ready);
}

TEST_F(ProcessBattery, DaemonDiesWithSandboxedProcessKill) {
  auto [fifo, marker] = fifo_in(git_ws_);
  const int ready = open_fifo(fifo);
  Command cmd;
  cmd.argv = {kProcs, "orphan_stay", fifo.string(), "plain", marker};
  auto proc = SandboxedProcess::start(build(defaults(git_ws_)), cmd);
  ASSERT_TRUE(proc.has_value()) << proc.error().describe();
  ASSERT_TRUE(wait_readable(ready, Clock::now() + 20s));
  auto procs = processes_with(marker);
  ASSERT_GE(procs.size(), 2u);
  proc->kill();
  EXPECT_EQ(proc->wait(Clock::now() + 10s).term_signal, SIGKILL);
  expect_all_gone(procs, "SandboxedProcess::kill");
  ::close(ready);
}

TEST_F(ProcessBattery, DaemonDiesWithTheSandboxedProcessObject) {
  auto [fifo, marker] = fifo_in(plain_ws_);
  const int ready = open_fifo(fifo);
  std::vector<std::pair<pid_t, int>> procs;
  {
    Command cmd;
    cmd.argv = {kProcs, "orphan_stay", fifo.string(), "threads", marker};
    auto proc = SandboxedProcess::start(build(defaults(plain_ws_)), cmd);
    ASSERT_TRUE(proc.has_value()) << proc.error().describe();
    ASSERT_TRUE(wait_readable(ready, Clock::now() + 20s));
    procs = processes_with(marker);
  }
  ASSERT_GE(procs.size(), 2u);
  expect_all_gone(procs, "~SandboxedProcess");
  ::close(ready);
}

// ---- the command's own PID namespace
// --------------------------------------------------------------------

TEST_F(ProcessBattery, CommandRunsInTheSandboxesPidNamespace) {
  // Its parent (a clone thread of the kernel) is outside the namespace: ppid 0. pid 1 is the
  // namespace's init, not the command (which, as an init, would ignore signals it sends itself).
  for (const auto& ws : {git_ws_, plain_ws_}) {
    auto r = run(build(defaults(ws)), {kProcs, "getpid"});
    int pid = 0, ppid = -1;
    ASSERT_EQ(std::sscanf(r.stdout_data.c_str(), "pid %d ppid %d", &pid, &ppid), 2)
        << r.stdout_data;
    EXPECT_GT(pid, 1) << ws;
    EXPECT_EQ(ppid, 0) << ws;
  }
}

TEST_F(ProcessBattery, NoOtherProcessIsVisible) {
  // kill(pid, 0) over the low pids: Landlock's scope answers EPERM for the host's processes, which
  // still tells that they exist; in its own namespace the command can name only its init.
  for (const auto& ws : {git_ws_, plain_ws_}) {
    auto r = run(build(defaults(ws)), {kProcs, "pid_sweep", "32768"});
    EXPECT_EQ(r.stdout_data, "visible 1 first 1\n") << ws;
  }
}

TEST_F(ProcessBattery, NestedPidNamespaceIsRefused) {
  // The clone threads' filter lets CLONE_NEWPID through for them; a command has no capability for
  // it.
  for (const auto& ws : {git_ws_, plain_ws_}) {
    EXPECT_EQ(run(build(defaults(ws)), {kProcs, "clone_newpid"}).stdout_data, "EPERM\n") << ws;
  }
}

TEST_F(ProcessBattery, NestedPidNamespaceThroughAUserNamespaceIsRefused) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    EXPECT_EQ(run(build(defaults(ws)), {kProcs, "clone_newpid_newuser"}).stdout_data, "EPERM\n")
        << ws;
  }
}

TEST_F(ProcessBattery, UnsharePidNamespaceIsRefused) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    EXPECT_EQ(run(build(defaults(ws)), {kProcs, "unshare_pid"}).stdout_data, "EPERM\n") << ws;
  }
}

TEST_F(ProcessBattery, KernelThreadsStayInTheKernelsMountNamespace) {
  // Clone threads may join a policy's mount namespace (after leaving the kernel's filesystem
  // context): every other thread, and the kernel's working directory, must be untouched by that.
  const fs::path cwd = fs::current_path();
  auto r = run(build(defaults(git_ws_)), {kProcs, "getpid"});
  ASSERT_NE(r.stdout_data.find(" ppid 0\n"), std::string::npos) << r.stdout_data;
  const auto own = fs::read_symlink("/proc/self/ns/mnt");
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm_file(task.path() / "comm");
    std::string comm;
    std::getline(comm_file, comm);
    if (comm == "kernex-clone") continue;
    std::error_code ec;
    EXPECT_EQ(fs::read_symlink(task.path() / "ns" / "mnt", ec), own) << comm;
  }
  EXPECT_EQ(fs::current_path(), cwd);
  EXPECT_TRUE(fs::exists("/proc/self/exe"));  // still the kernel's view of the filesystem
}

// ---- statuses stay right with the command as pid 1
// ------------------------------------------------------

TEST_F(ProcessBattery, ExitCodeIsReported) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    auto r = run(build(defaults(ws)), {kProcs, "exit", "42"});
    EXPECT_EQ(r.exit_code, 42) << ws;
    EXPECT_EQ(r.term_signal, 0) << ws;
  }
}

TEST_F(ProcessBattery, SelfSentSignalIsReported) {
  // An init ignores signals it sends itself without a handler; the command is not the init.
  for (const auto& ws : {git_ws_, plain_ws_}) {
    EXPECT_EQ(run(build(defaults(ws)), {kProcs, "self_kill"}).term_signal, SIGKILL) << ws;
    EXPECT_EQ(
        run(build(defaults(ws)), {"/bin/sh", "-c", "kill -TERM $$; echo survived"}).term_signal,
        SIGTERM)
        << ws;
  }
}

TEST_F(ProcessBattery, CrashIsReportedAsItsSignal) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    EXPECT_EQ(run(build(defaults(ws)), {kProcs, "segv"}).term_signal, SIGSEGV) << ws;
  }
}

TEST_F(ProcessBattery, SandboxedProcessKillIsReportedAsSigkill) {
  Command cmd;
  cmd.argv = {"/bin/cat"};
  auto proc = SandboxedProcess::start(build(defaults(git_ws_)), cmd);
  ASSERT_TRUE(proc.has_value()) << proc.error().describe();
  proc->kill();
  EXPECT_EQ(proc->wait(Clock::now() + 10s).term_signal, SIGKILL);
}

// ---- private TMPDIRs of a dead kernel (item 9)
// ----------------------------------------------------------

class PrivateTmpReclaim : public ProcessBattery {
 protected:
  void SetUp() override {
    base_ = root_ /
            ("tmp-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(base_);
  }
  // A kernel that dies by SIGKILL after making its private TMPDIR; returns it and the dead pid.
  std::pair<fs::path, pid_t> killed_kernel_tmp() {
    Stub stub({"tmp", KERNEX_ATTACK_DIR}, base_.string());
    const fs::path tmp = stub.line();
    const pid_t pid = stub.pid;
    EXPECT_TRUE(fs::is_directory(tmp)) << tmp;
    EXPECT_EQ(tmp.parent_path(), base_);
    std::ofstream(tmp / "left-behind.txt") << "x";
    stub.kill_and_reap();
    return {tmp, pid};
  }
  // The next kernel start under the same TMPDIR.
  void next_kernel() {
    Stub next({"build", KERNEX_ATTACK_DIR}, base_.string());
    EXPECT_FALSE(next.line().empty());
    EXPECT_EQ(next.wait_exit(), 0);
  }
  fs::path base_;
};

TEST_F(PrivateTmpReclaim, DeadKernelsTmpIsReclaimedAtTheNextStart) {
  auto [tmp, pid] = killed_kernel_tmp();
  EXPECT_TRUE(fs::exists(tmp / "left-behind.txt"));  // SIGKILL ran no cleanup
  next_kernel();
  EXPECT_FALSE(fs::exists(tmp)) << tmp;
}

TEST_F(PrivateTmpReclaim, LiveKernelsTmpIsKept) {
  Stub live({"tmp", KERNEX_ATTACK_DIR}, base_.string());
  const fs::path tmp = live.line();
  ASSERT_TRUE(fs::is_directory(tmp));
  next_kernel();
  EXPECT_TRUE(fs::is_directory(tmp)) << "removed while its kernel was alive";
}

TEST_F(PrivateTmpReclaim, ReusedPidWithAnotherStartTimeIsReclaimed) {
  // This test's pid, alive, but a start time it never had: the owner that made it is gone.
  const fs::path stale = base_ / ("kernex-sandbox-" + std::to_string(::getpid()) + "-1-AbCdEf");
  fs::create_directories(stale / "sub");
  next_kernel();
  EXPECT_FALSE(fs::exists(stale));
}

TEST_F(PrivateTmpReclaim, SymlinkNamedLikeADeadTmpIsNotFollowed) {
  auto [tmp, pid] = killed_kernel_tmp();
  const fs::path victim = root_ / "victim";
  fs::create_directories(victim);
  std::ofstream(victim / "keep.txt") << "keep";
  const fs::path link = base_ / ("kernex-sandbox-" + std::to_string(pid) + "-1-LiNkEd");
  fs::create_directory_symlink(victim, link);
  next_kernel();
  EXPECT_TRUE(fs::exists(victim / "keep.txt")) << "the reclaim followed a symlink";
  EXPECT_FALSE(fs::exists(tmp));
}

TEST_F(PrivateTmpReclaim, AnotherUsersDirectoryIsNotTouched) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory owned by another uid";
  auto [tmp, pid] = killed_kernel_tmp();
  const fs::path foreign = base_ / ("kernex-sandbox-" + std::to_string(pid) + "-1-FoReIg");
  fs::create_directories(foreign);
  std::ofstream(foreign / "theirs.txt") << "theirs";
  ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);
  next_kernel();
  EXPECT_TRUE(fs::exists(foreign / "theirs.txt"));
  EXPECT_FALSE(fs::exists(tmp));
}

// ---- pids cgroups of a dead kernel
// ----------------------------------------------------------------------

TEST_F(ProcessBattery, DeadKernelsPidsCgroupIsReclaimed) {
  auto policy = build(defaults(plain_ws_));
  if (policy.status().process_limit.rfind("pids cgroup ", 0) != 0) {
    GTEST_SKIP() << "no pids cgroup here: " << policy.status().process_limit;
  }
  const fs::path base = policy.status().process_limit.substr(std::string("pids cgroup ").size());
  auto [fifo, marker] = fifo_in(plain_ws_);
  const int ready = open_fifo(fifo);
  Stub stub({"spawn", plain_ws_.string(), KERNEX_ATTACK_DIR, "--", kProcs, "orphan_stay",
             fifo.string(), "plain", marker});
  ASSERT_EQ(stub.line(), "started");
  ASSERT_TRUE(wait_readable(ready, Clock::now() + 20s));
  const std::string prefix = "kernex-sandbox-" + std::to_string(stub.pid) + "-";
  auto owned = [&] {
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(base)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) dirs.push_back(e.path());
    }
    return dirs;
  };
  ASSERT_EQ(owned().size(), 1u);
  auto procs = processes_with(marker);
  stub.kill_and_reap();
  expect_all_gone(procs, "a kernel killed by SIGKILL");  // and reaped here: the cgroup is empty
  EXPECT_EQ(owned().size(), 1u);                         // SIGKILL ran no cleanup
  Stub next({"build", KERNEX_ATTACK_DIR});
  EXPECT_FALSE(next.line().empty());
  EXPECT_EQ(next.wait_exit(), 0);
  EXPECT_TRUE(owned().empty());
  ::close(ready);
}

// ---- process and thread limits of the default profile (item 7)
// ------------------------------------------

TEST_F(ProcessBattery, DefaultProfileLimitsProcesses) {
  SandboxProfile profile;
  EXPECT_EQ(profile.limits.processes, 256u);
  auto yaml = SandboxProfile::from_yaml("enforce: true\n", "test");
  ASSERT_TRUE(yaml.has_value());
  EXPECT_EQ(yaml->limits.processes, 256u);
  auto policy = build(defaults(git_ws_));
  EXPECT_FALSE(policy.status().process_limit.empty());
  EXPECT_TRUE(policy.status().pid_namespace) << "not root?";
}

TEST_F(ProcessBattery, ForkCountCappedSpawnMountNamespacePath) {
  expect_capped(spawned_count(git_ws_, "count_forks"));
}

TEST_F(ProcessBattery, ForkCountCappedSpawnInheritedFilterPath) {
  expect_capped(spawned_count(plain_ws_, "count_forks"));
}

TEST_F(ProcessBattery, ForkCountCappedSandboxedProcess) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    std::string line;
    ASSERT_NO_FATAL_FAILURE(held_count_line(ws, "count_forks_held", line));
    expect_capped(count_after(line), line);
  }
}

TEST_F(ProcessBattery, ThreadCountCappedSpawnMountNamespacePath) {
  expect_capped(spawned_count(git_ws_, "count_threads"));
}

TEST_F(ProcessBattery, ThreadCountCappedSpawnInheritedFilterPath) {
  expect_capped(spawned_count(plain_ws_, "count_threads"));
}

TEST_F(ProcessBattery, ThreadCountCappedSandboxedProcess) {
  std::string line;
  ASSERT_NO_FATAL_FAILURE(held_count_line(git_ws_, "count_threads", line));
  expect_capped(count_after(line), line);
}

TEST_F(ProcessBattery, ForkBombUnderTheDefaultProfile) {
  // The exponential one: every process forks for ever. Stopped by the cap, then by the timeout.
  for (const auto& ws : {git_ws_, plain_ws_}) {
    auto r = run(build(defaults(ws)), {kAttack, "fork_bomb"}, 1500ms);
    EXPECT_TRUE(r.timed_out) << ws;
    EXPECT_EQ(first_line(r.stdout_data), "EAGAIN") << ws;
  }
}

TEST_F(ProcessBattery, EachSandboxHasItsOwnCap) {
  // One sandbox holding its 255 children doesn't starve the next.
  Command cmd;
  cmd.argv = {kProcs, "count_forks_held"};
  auto holder = SandboxedProcess::start(build(defaults(plain_ws_)), cmd);
  ASSERT_TRUE(holder.has_value()) << holder.error().describe();
  auto held = holder->read_line(Clock::now() + 20s, 256);
  ASSERT_TRUE(held.has_value());
  EXPECT_LE(count_after(*held), 255) << *held;
  expect_capped(spawned_count(git_ws_, "count_forks"));
}

TEST_F(ProcessBattery, ProfileCanLowerTheCap) {
  ResourceLimits limits;
  limits.processes = 16;
  const int n = count_after(first_line(
      run(build(defaults(plain_ws_).limits(limits)), {kProcs, "count_forks"}).stdout_data));
  EXPECT_EQ(n, 15);  // the command is the 16th
}

TEST_F(ProcessBattery, RaisingRlimitNprocDoesNotLiftTheCap) {
  auto r = run(build(defaults(git_ws_)), {kProcs, "count_forks_raised"});
  const auto line = first_line(r.stdout_data);
  const auto space = line.find(' ');
  ASSERT_NE(space, std::string::npos) << line;
  expect_capped(count_after(line.substr(space + 1)), line);
}

TEST_F(ProcessBattery, CommandCannotLeaveItsPidsCgroup) {
  for (const auto& ws : {git_ws_, plain_ws_}) {
    const auto line = first_line(run(build(defaults(ws)), {kProcs, "cgroup_escape"}).stdout_data);
    EXPECT_TRUE(line == "EACCES" || line == "ENOENT") << ws << ": " << line;
  }
}

}  // namespace
