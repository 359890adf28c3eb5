// Tenant isolation battery: `kernex serve` gives each session's tools the
// workspace
// `<data_dir>/workspaces/<tenant>/<session>`, inside the data dir the kernel
// keeps hidden. The data dir is registered the way the kernel does it (a Hidden
// kernel file) and `<data>/workspaces` as a tool area
// (kernex/kernel_files.hpp). Tools of tenant t1, session s1, then attack
// everything else the data dir holds (the memory db and its -wal/-shm,
// trajectories, the serve db, the keys file), the other workspaces of their own
// and of another tenant, the other tenant's running tool processes, and what
// two sandboxes might share (/tmp, /dev/shm, sockets). Each case asserts the
// attack failed and that nothing changed; tests/security/README.md lists them.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "battery_support.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/process.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using kernex::battery::build_policy;
using kernex::battery::first_line;
using kernex::battery::kAttack;
using kernex::battery::make_scratch_root;
using kernex::battery::run_leaving_nothing;
using kernex::battery::slurp;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

bool blocked(const std::string& report) { return !report.starts_with("OK"); }

class TenantBattery : public ::testing::Test {
 protected:
  // One layout for the process: the kernel-file registry is process-wide.
  static void SetUpTestSuite() {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ASSERT_TRUE(make_scratch_root("kernex-battery2-tenants", root_));
    data_ = root_ / "data";
    area_ = data_ / "workspaces";
    put(data_ / "memory.db", "MEMORY-SECRET");
    put(data_ / "memory.db-wal", "WAL-SECRET");
    put(data_ / "memory.db-shm", "SHM-SECRET");
    put(data_ / "serve.db", "SERVE-DB-SECRET");
    put(data_ / "serve-keys.json", "{\"t2\": \"KEY-SECRET\"}");
    put(data_ / "trajectories" / "t2-run.jsonl", "TRAJECTORY-SECRET");
    put(ws("t1", "s2") / "secret", "T1-S2-SECRET");
    put(ws("t2", "s1") / "secret", "T2-S1-SECRET");
    fs::create_directories(ws("t1", "s1"));
    kernex::register_kernel_file(data_, kernex::KernelFileAccess::Hidden, "data dir");
    kernex::register_kernel_file(data_ / "memory.db", kernex::KernelFileAccess::Hidden,
                                 "memory store");
    kernex::register_tool_area(area_, "serve workspaces");

    // A second area holding a kernel file, and a hidden dir registered as its
    // own tool area.
    put(data_ / "workspaces2" / "t9" / "run.lock", "LOCK");
    fs::create_directories(data_ / "workspaces2" / "t8");
    kernex::register_kernel_file(data_ / "workspaces2" / "t9" / "run.lock",
                                 kernex::KernelFileAccess::Hidden, "lock");
    kernex::register_tool_area(data_ / "workspaces2", "second area");
    fs::create_directories(root_ / "data2" / "x");
    kernex::register_kernel_file(root_ / "data2", kernex::KernelFileAccess::Hidden,
                                 "second data dir");
    kernex::register_tool_area(root_ / "data2", "whole data dir");
    // Workspaces that are symlinks: out of the area into the data dir, and to a
    // sibling workspace.
    fs::create_directories(area_ / "t3");
    fs::create_directory_symlink(data_, area_ / "t3" / "to-data");
    fs::create_directory_symlink(data_ / "trajectories", area_ / "t3" / "to-trajectories");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  static fs::path ws(const std::string& tenant, const std::string& session) {
    return area_ / tenant / session;
  }
  static fs::path me() { return ws("t1", "s1"); }

  static PolicyBuilder tenant(const std::string& t = "t1", const std::string& s = "s1") {
    return PolicyBuilder().workspace(ws(t, s)).executable(KERNEX_ATTACK_DIR).timeout(10s);
  }
  static std::string build_error(const PolicyBuilder& b) {
    auto p = b.Build();
    return p ? std::string("(built)") : p.error().describe();
  }
  // The attack program's report ("OK" when the attempt worked, else the failing
  // errno).
  static std::string attack(std::vector<std::string> args, const PolicyBuilder& b = tenant()) {
    args.insert(args.begin(), kAttack);
    return first_line(run_leaving_nothing(build_policy(b), std::move(args)).stdout_data);
  }
  static SpawnResult shell(const std::string& line, const PolicyBuilder& b = tenant()) {
    return run_leaving_nothing(build_policy(b), {"/bin/sh", "-c", line});
  }
  // Every secret file of the layout, with its content: none may appear in a
  // tool's output.
  static std::vector<std::pair<fs::path, std::string>> secrets() {
    return {{data_ / "memory.db", "MEMORY-SECRET"},
            {data_ / "memory.db-wal", "WAL-SECRET"},
            {data_ / "memory.db-shm", "SHM-SECRET"},
            {data_ / "serve.db", "SERVE-DB-SECRET"},
            {data_ / "serve-keys.json", "KEY-SECRET"},
            {data_ / "trajectories" / "t2-run.jsonl", "TRAJECTORY-SECRET"},
            {ws("t1", "s2") / "secret", "T1-S2-SECRET"},
            {ws("t2", "s1") / "secret", "T2-S1-SECRET"}};
  }
  static void expect_no_secret(const SpawnResult& r) {
    for (const auto& [path, text] : secrets()) {
      EXPECT_EQ(r.stdout_data.find(text), std::string::npos)
          << path << " leaked: " << r.stdout_data;
      EXPECT_EQ(r.stderr_data.find(text), std::string::npos)
          << path << " leaked: " << r.stderr_data;
    }
  }
  static void expect_secrets_unchanged() {
    for (const auto& [path, text] : secrets())
      EXPECT_NE(slurp(path).find(text), std::string::npos) << path;
  }

  static inline fs::path root_, data_, area_;
};

// ---- Build(): what a tool area lets through
// ---------------------------------------------------------

TEST_F(TenantBattery, GrantInsideTheAreaBuilds) {
  EXPECT_EQ(build_error(tenant()), "(built)");
  EXPECT_EQ(build_error(PolicyBuilder().read_only(ws("t2", "s1"))), "(built)");
}

TEST_F(TenantBattery, GrantOfTheAreaOrATenantDirBuildsWhenItHoldsNoKernelFile) {
  EXPECT_EQ(build_error(PolicyBuilder().workspace(area_)), "(built)");
  EXPECT_EQ(build_error(PolicyBuilder().workspace(area_ / "t1")), "(built)");
  EXPECT_EQ(build_error(PolicyBuilder().workspace(data_ / "workspaces2" / "t8")), "(built)");
}

TEST_F(TenantBattery, GrantHoldingAKernelFileIsRefused) {
  for (const fs::path& p : {data_ / "workspaces2", data_ / "workspaces2" / "t9"}) {
    const std::string e = build_error(PolicyBuilder().workspace(p));
    EXPECT_NE(e.find("contains the kernel's lock"), std::string::npos) << p << ": " << e;
  }
  EXPECT_NE(build_error(PolicyBuilder().read_only(data_ / "workspaces2" / "t9" / "run.lock")),
            "(built)");
}

TEST_F(TenantBattery, DataDirAndItsOtherPartsStayRefused) {
  for (const fs::path& p :
       {data_, data_ / "trajectories", data_ / "memory.db", data_ / "serve-keys.json"}) {
    EXPECT_NE(build_error(PolicyBuilder().read_only(p)).find("data dir"), std::string::npos) << p;
  }
  EXPECT_NE(build_error(PolicyBuilder().workspace(data_)).find("refusing"), std::string::npos);
}

TEST_F(TenantBattery, DotDotOutOfTheAreaInTheGrantIsRefused) {
  EXPECT_NE(build_error(PolicyBuilder().workspace(me() / ".." / ".." / "..")).find("data dir"),
            std::string::npos);
  EXPECT_NE(build_error(PolicyBuilder().read_only(me() / ".." / ".." / ".." / "trajectories"))
                .find("data dir"),
            std::string::npos);
}

TEST_F(TenantBattery, ToolAreaRegistry) {
  const auto before = kernex::kernel_files_generation();
  kernex::register_tool_area(area_.string() + "/",
                             "again");  // the same area, spelled with a trailing '/'
  EXPECT_EQ(kernex::kernel_files_generation(), before);
  kernex::register_tool_area("", "nothing");
  EXPECT_EQ(kernex::kernel_files_generation(), before);
  kernex::register_tool_area(root_ / "unused" / ".." / "later-area", "later");
  EXPECT_EQ(kernex::kernel_files_generation(), before + 1);  // cached policies are rebuilt
  const auto areas = kernex::tool_areas();
  ASSERT_FALSE(areas.empty());
  EXPECT_EQ(areas.front().path, area_);
  EXPECT_EQ(areas.front().why, "serve workspaces");
  EXPECT_EQ(areas.back().path, root_ / "later-area");
}

TEST_F(TenantBattery, AreaThatIsTheKernelFileItselfExemptsNothing) {
  EXPECT_NE(build_error(PolicyBuilder().workspace(root_ / "data2")).find("second data dir"),
            std::string::npos);
  EXPECT_NE(build_error(PolicyBuilder().workspace(root_ / "data2" / "x")).find("second data dir"),
            std::string::npos);
}

TEST_F(TenantBattery, WorkspaceSymlinkOutOfTheAreaIsRefused) {
  EXPECT_NE(build_error(PolicyBuilder().workspace(area_ / "t3" / "to-data")).find("data dir"),
            std::string::npos);
  EXPECT_NE(
      build_error(PolicyBuilder().workspace(area_ / "t3" / "to-trajectories")).find("data dir"),
      std::string::npos);
}

TEST_F(TenantBattery, AnotherGrantCoveringTheDataDirIsRefused) {
  // root_ holds the data dir: it would be masked, and the workspace inside it
  // with it.
  const std::string e = build_error(tenant().read_only(root_));
  EXPECT_NE(e.find("masked"), std::string::npos) << e;
  EXPECT_NE(e.find(me().string()), std::string::npos) << e;
}

// ---- the tool's own workspace works
// -------------------------------------------------------------------

TEST_F(TenantBattery, OwnWorkspaceIsWritable) {
  auto r = shell(
      "echo mine > own.txt && cat own.txt && mkdir -p sub && echo x "
      "> sub/f && cat sub/f");
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "mine\nx\n");
  EXPECT_EQ(slurp(me() / "own.txt"), "mine\n");
}

// ---- the data dir
// ---------------------------------------------------------------------------------------

// The data dir is masked in the tool's mount namespace around its workspace
// (ENOENT); Landlock, which grants nothing of it but the workspace, would say
// EACCES without the mask.
TEST_F(TenantBattery, ReadMemoryDb) {
  EXPECT_EQ(attack({"read", (data_ / "memory.db").string()}), "ENOENT");
}

TEST_F(TenantBattery, ReadMemoryWalAndShm) {
  EXPECT_EQ(attack({"read", (data_ / "memory.db-wal").string()}), "ENOENT");
  EXPECT_EQ(attack({"read", (data_ / "memory.db-shm").string()}), "ENOENT");
}

TEST_F(TenantBattery, ReadTrajectories) {
  EXPECT_EQ(attack({"read", (data_ / "trajectories" / "t2-run.jsonl").string()}), "ENOENT");
  EXPECT_EQ(attack({"list", (data_ / "trajectories").string()}), "ENOENT");
}

TEST_F(TenantBattery, ReadServeDb) {
  EXPECT_EQ(attack({"read", (data_ / "serve.db").string()}), "ENOENT");
}

TEST_F(TenantBattery, ReadKeysFile) {
  EXPECT_EQ(attack({"read", (data_ / "serve-keys.json").string()}), "ENOENT");
}

TEST_F(TenantBattery, CatEverythingInOneShell) {
  std::string line = "cat";
  for (const auto& [path, text] : secrets()) line += " '" + path.string() + "'";
  line += "; ls -la '" + data_.string() + "' '" + area_.string() + "'";
  auto r = shell(line);
  EXPECT_NE(r.exit_code, 0);
  expect_no_secret(r);
  EXPECT_EQ(r.stdout_data.find("serve-keys.json"), std::string::npos) << r.stdout_data;
}

TEST_F(TenantBattery, WriteIntoTheDataDir) {
  EXPECT_TRUE(blocked(attack({"write", (data_ / "memory.db").string()})));
  EXPECT_TRUE(blocked(attack({"write", (data_ / "serve-keys.json").string()})));
  EXPECT_TRUE(blocked(attack({"write", (data_ / "trajectories" / "planted.jsonl").string()})));
  EXPECT_TRUE(blocked(attack({"write", (data_ / "planted").string()})));
  EXPECT_FALSE(fs::exists(data_ / "trajectories" / "planted.jsonl"));
  EXPECT_FALSE(fs::exists(data_ / "planted"));
  expect_secrets_unchanged();
}

// ---- other workspaces
// -----------------------------------------------------------------------------------

TEST_F(TenantBattery, ReadSameTenantOtherSession) {
  EXPECT_EQ(attack({"read", (ws("t1", "s2") / "secret").string()}), "ENOENT");
}

TEST_F(TenantBattery, ReadOtherTenantWorkspace) {
  EXPECT_EQ(attack({"read", (ws("t2", "s1") / "secret").string()}), "ENOENT");
}

TEST_F(TenantBattery, ListDataDirAreaAndTenantDirs) {
  for (const fs::path& p : {data_, area_, area_ / "t1", area_ / "t2", ws("t2", "s1")}) {
    EXPECT_TRUE(blocked(attack({"list", p.string()}))) << p;
  }
}

TEST_F(TenantBattery, DotDotPaths) {
  for (const char* rel : {"../s2/secret", "../../t2/s1/secret", "../../../memory.db",
                          "../../../serve-keys.json", "./../../t2/./s1/../s1/secret"}) {
    EXPECT_TRUE(blocked(attack({"read", (me() / rel).string()}))) << rel;
    EXPECT_TRUE(blocked(attack({"read", rel}))) << rel;  // relative to the working directory
  }
}

TEST_F(TenantBattery, WriteIntoOtherWorkspaces) {
  EXPECT_TRUE(blocked(attack({"write", (ws("t2", "s1") / "planted").string()})));
  EXPECT_TRUE(blocked(attack({"write", (ws("t1", "s2") / "planted").string()})));
  EXPECT_TRUE(blocked(attack({"write", (ws("t2", "s1") / "secret").string()})));
  EXPECT_NE(shell("mkdir ../../t2/s9 || mkdir ../s9; echo x > ../../t2/s1/planted").exit_code, 0);
  EXPECT_FALSE(fs::exists(ws("t2", "s1") / "planted"));
  EXPECT_FALSE(fs::exists(ws("t1", "s2") / "planted"));
  EXPECT_FALSE(fs::exists(ws("t2", "s9")));
  EXPECT_FALSE(fs::exists(ws("t1", "s9")));
  expect_secrets_unchanged();
}

TEST_F(TenantBattery, SymlinkToSiblingWorkspace) {
  EXPECT_EQ(attack({"symlink", ws("t2", "s1").string(), (me() / "to-t2").string()}), "OK");
  EXPECT_EQ(attack({"read", (me() / "to-t2" / "secret").string()}), "ENOENT");
  EXPECT_EQ(attack({"symlink", "../s2/secret", (me() / "to-s2-secret").string()}), "OK");
  EXPECT_EQ(attack({"read", (me() / "to-s2-secret").string()}), "ENOENT");
  EXPECT_TRUE(blocked(attack({"write", (me() / "to-t2" / "planted").string()})));
  EXPECT_FALSE(fs::exists(ws("t2", "s1") / "planted"));
}

TEST_F(TenantBattery, SymlinkToDataDir) {
  auto r = shell(
      "ln -s ../../.. data-link && cat data-link/memory.db "
      "data-link/serve-keys.json "
      "data-link/trajectories/t2-run.jsonl; echo x > "
      "data-link/planted; ls data-link");
  EXPECT_NE(r.exit_code, 0);
  expect_no_secret(r);
  EXPECT_FALSE(fs::exists(data_ / "planted"));
  EXPECT_EQ(
      attack({"symlink", (data_ / "serve-keys.json").string(), (me() / "keys-link").string()}),
      "OK");
  EXPECT_EQ(attack({"read", (me() / "keys-link").string()}), "ENOENT");
}

TEST_F(TenantBattery, HardlinkFromAnotherWorkspace) {
  EXPECT_TRUE(
      blocked(attack({"link", (ws("t2", "s1") / "secret").string(), (me() / "stolen").string()})));
  EXPECT_TRUE(
      blocked(attack({"link", (data_ / "memory.db").string(), (me() / "stolen-db").string()})));
  EXPECT_FALSE(fs::exists(me() / "stolen"));
  EXPECT_FALSE(fs::exists(me() / "stolen-db"));
}

TEST_F(TenantBattery, HardlinkOrRenameIntoAnotherWorkspace) {
  put(me() / "mine.txt", "mine");
  EXPECT_TRUE(blocked(
      attack({"link", (me() / "mine.txt").string(), (ws("t2", "s1") / "planted").string()})));
  EXPECT_TRUE(blocked(
      attack({"rename", (me() / "mine.txt").string(), (ws("t2", "s1") / "planted").string()})));
  EXPECT_TRUE(
      blocked(attack({"rename", (ws("t2", "s1") / "secret").string(), (me() / "moved").string()})));
  EXPECT_FALSE(fs::exists(ws("t2", "s1") / "planted"));
  EXPECT_FALSE(fs::exists(me() / "moved"));
  EXPECT_TRUE(fs::exists(me() / "mine.txt"));
  expect_secrets_unchanged();
}

TEST_F(TenantBattery, ProcSelfRootAndCwd) {
  EXPECT_TRUE(blocked(attack({"read", "/proc/self/root" + (data_ / "memory.db").string()})));
  EXPECT_TRUE(blocked(attack({"read", "/proc/self/root" + (ws("t2", "s1") / "secret").string()})));
  EXPECT_TRUE(blocked(attack({"read", "/proc/self/cwd/../s2/secret"})));
  EXPECT_TRUE(blocked(attack({"read", "/proc/thread-self/cwd/../../../serve-keys.json"})));
}

TEST_F(TenantBattery, ParentDirectoryHandle) {
  EXPECT_TRUE(blocked(attack({"via_dirfd", "..", "s2/secret"})));
  EXPECT_TRUE(blocked(attack({"via_dirfd", (area_ / "t2").string(), "s1/secret"})));
  EXPECT_TRUE(blocked(attack({"via_dirfd", data_.string(), "serve-keys.json"})));
  EXPECT_TRUE(blocked(attack({"list", ".."})));
  auto r = shell("cd .. && cat s2/secret; cd ../.. && cat memory.db serve-keys.json; ls");
  expect_no_secret(r);
}

// Landlock doesn't mediate lstat, inotify or connecting to a socket file: the
// policy's mount namespace masks the data dir and binds the workspace back, so
// the rest of it is not even there.
TEST_F(TenantBattery, OtherWorkspacesAreNotThereToStat) {
  EXPECT_EQ(attack({"stat", (ws("t2", "s1") / "secret").string()}), "stat:ENOENT");
  EXPECT_EQ(attack({"stat", (data_ / "serve-keys.json").string()}), "stat:ENOENT");
  EXPECT_EQ(attack({"stat", (area_ / "t2").string()}), "stat:ENOENT");
  EXPECT_EQ(attack({"stat", (ws("t1", "s2")).string()}), "stat:ENOENT");
  EXPECT_EQ(attack({"stat", (me() / "..").string()}).substr(0, 2),
            "OK");  // the path down to the workspace
}

TEST_F(TenantBattery, InotifyOnAnotherWorkspace) {
  auto watching = tenant().allow_file_watches();
  EXPECT_EQ(attack({"inotify", me().string()}, watching),
            "OK");  // control: the opt-in works
  EXPECT_TRUE(blocked(attack({"inotify", ws("t2", "s1").string()}, watching)));
  EXPECT_TRUE(blocked(attack({"inotify", data_.string()}, watching)));
  EXPECT_TRUE(blocked(attack({"inotify", (data_ / "trajectories").string()}, watching)));
}

// ---- what two sandboxes might share
// --------------------------------------------------------------------

TEST_F(TenantBattery, PrivateTmpDirsArePrivate) {
  const Policy a = build_policy(tenant("t2", "s1"));
  const Policy b = build_policy(tenant());
  ASSERT_FALSE(a.private_tmp().empty());
  EXPECT_NE(a.private_tmp(), b.private_tmp());
  auto planted = run_leaving_nothing(
      a, {"/bin/sh", "-c", "echo TMP-SECRET > \"$TMPDIR/planted\" && echo $TMPDIR"});
  ASSERT_EQ(planted.exit_code, 0) << planted.stderr_data;
  EXPECT_EQ(planted.stdout_data, a.private_tmp().string() + "\n");
  const std::string theirs = (a.private_tmp() / "planted").string();
  EXPECT_EQ(first_line(run_leaving_nothing(b, {kAttack, "read", theirs}).stdout_data), "EACCES");
  EXPECT_EQ(
      first_line(run_leaving_nothing(b, {kAttack, "list", a.private_tmp().string()}).stdout_data),
      "EACCES");
  EXPECT_TRUE(blocked(first_line(run_leaving_nothing(b, {kAttack, "write", theirs}).stdout_data)));
  EXPECT_EQ(slurp(theirs), "TMP-SECRET\n");
}

TEST_F(TenantBattery, SharedTmpDevShmAndVarTmp) {
  const fs::path host_shm = "/dev/shm/kernex-tenant-battery-" + std::to_string(::getpid());
  const fs::path host_tmp = root_ / "host-tmp-secret";
  put(host_shm, "SHM-HOST-SECRET");
  put(host_tmp, "TMP-HOST-SECRET");
  for (const char* dir : {"/tmp", "/dev/shm", "/var/tmp"}) {
    const std::string planted =
        std::string(dir) + "/kernex-tenant-planted-" + std::to_string(::getpid());
    EXPECT_TRUE(blocked(attack({"write", planted}))) << dir;
    EXPECT_FALSE(fs::exists(planted)) << dir;
    EXPECT_TRUE(blocked(attack({"list", dir}))) << dir;
  }
  EXPECT_TRUE(blocked(attack({"read", host_shm.string()})));
  EXPECT_TRUE(blocked(attack({"read", host_tmp.string()})));
  EXPECT_EQ(attack({"shm_create", "4242"}),
            "shmget:EPERM");  // SysV shared memory
  EXPECT_EQ(attack({"mq_create", "/kernex-tenant"}), "mq_open:EPERM");
  std::error_code ec;
  fs::remove(host_shm, ec);
}

// ---- another tenant's running tools
// ----------------------------------------------------------------------

// A tool of tenant t2 that keeps running (a REPL worker, an MCP server):
// `attack victim` prints its pid as it sees it and waits for stdin to close.
class TenantProcesses : public TenantBattery {
 protected:
  void SetUp() override {
    Command cmd;
    cmd.argv = {kAttack, "victim"};
    auto proc = SandboxedProcess::start(build_policy(tenant("t2", "s1")), cmd);
    ASSERT_TRUE(proc.has_value()) << proc.error().describe();
    victim_.emplace(std::move(*proc));
    auto line = victim_->read_line(Clock::now() + 20s, 256);
    ASSERT_TRUE(line.has_value()) << line.error().describe();
    ASSERT_TRUE(line->starts_with("READY ")) << *line;
    // Its pid as the kernel sees it; the one it printed is its pid in its own
    // PID namespace, where the attacker may be that number itself (kill_scan
    // covers every pid the attacker can name).
    pids_ = {std::to_string(victim_->pid())};
  }
  void TearDown() override {
    if (!victim_) return;
    EXPECT_TRUE(victim_->running()) << "the other tenant's tool died";
    victim_->close_stdin();
    const ExitStatus st = victim_->wait(Clock::now() + 10s);
    EXPECT_EQ(st.term_signal, 0);
    EXPECT_EQ(st.exit_code, 0);
  }
  // `what` against the victim's pid: never OK.
  void expect_blocked_on_victim(const std::string& what) {
    for (const auto& pid : pids_) EXPECT_TRUE(blocked(attack({what, pid}))) << what << " " << pid;
  }
  std::optional<SandboxedProcess> victim_;
  std::vector<std::string> pids_;
};

TEST_F(TenantProcesses, ProcFilesOfAnotherTenantsTool) {
  for (const auto& pid : pids_) {
    const std::string proc = "/proc/" + pid;
    for (const std::string& path : {proc + "/environ", proc + "/cmdline", proc + "/cwd/secret",
                                    proc + "/root" + (ws("t2", "s1") / "secret").string(),
                                    proc + "/maps", proc + "/mem", proc + "/fd/0"}) {
      EXPECT_TRUE(blocked(attack({"read", path}))) << path;
    }
    EXPECT_TRUE(blocked(attack({"list", proc + "/fd"})));
  }
}

TEST_F(TenantProcesses, PtraceAnotherTenantsTool) { expect_blocked_on_victim("ptrace"); }

TEST_F(TenantProcesses, ProcessVmReadvOfAnotherTenantsTool) {
  for (const auto& pid : pids_) EXPECT_TRUE(blocked(attack({"vm_readv", pid, "0x400000"}))) << pid;
}

TEST_F(TenantProcesses, SignalAnotherTenantsTool) {
  expect_blocked_on_victim("kill");
  expect_blocked_on_victim("pidfd_signal");
  // kill(-1) reports success when every signal it tried was refused, so each
  // pid is tried instead.
  EXPECT_EQ(attack({"kill_scan"}), "NONE");
}

TEST_F(TenantProcesses, LimitsAndSchedulingOfAnotherTenantsTool) {
  for (const char* what :
       {"prlimit", "setpriority", "affinity", "scheduler", "ioprio", "process_madvise"}) {
    expect_blocked_on_victim(what);
  }
}

TEST_F(TenantProcesses, KcmpAnotherTenantsTool) { expect_blocked_on_victim("kcmp"); }

// ---- sockets between tenants
// ------------------------------------------------------------------------------

// A t2 tool listening (unix sockets and listen opted in); the test's own
// connection (sending 'P') is the first the listener sees unless the attacker
// got in before it.
class TenantSockets : public TenantBattery {
 protected:
  static PolicyBuilder serving(const std::string& t, const std::string& s) {
    return tenant(t, s).allow_unix_sockets().allow_listen();
  }
  void listen_as_t2(const std::string& how, const std::string& where) {
    Command cmd;
    cmd.argv = {kAttack, how, where};
    auto proc = SandboxedProcess::start(build_policy(serving("t2", "s1")), cmd);
    ASSERT_TRUE(proc.has_value()) << proc.error().describe();
    listener_.emplace(std::move(*proc));
    auto line = listener_->read_line(Clock::now() + 20s, 256);
    ASSERT_TRUE(line.has_value()) << line.error().describe();
    ASSERT_EQ(*line, "READY");
  }
  // Connects from the test (unsandboxed) and returns what the listener reports
  // for the first connection.
  std::string first_accepted(const std::string& where, bool abstract) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + (abstract ? 1 : 0), where.data(), where.size());
    const auto size =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + where.size() + (abstract ? 1 : 0));
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), size), 0) << std::strerror(errno);
    EXPECT_EQ(::write(fd, "P", 1), 1);
    auto line = listener_->read_line(Clock::now() + 20s, 256);
    ::close(fd);
    return line ? *line : line.error().describe();
  }
  void TearDown() override {
    if (listener_) listener_->kill();
  }
  std::optional<SandboxedProcess> listener_;
};

TEST_F(TenantSockets, AbstractSocketOfAnotherTenant) {
  const std::string name = "kernex-tenant-battery-" + std::to_string(::getpid());
  listen_as_t2("serve_abstract", name);
  EXPECT_EQ(attack({"abstract", name}), "socket:EPERM");
  EXPECT_EQ(attack({"abstract", name}, serving("t1", "s1")), "connect:EPERM");
  EXPECT_EQ(first_accepted(name, true), "ACCEPTED P");
}

TEST_F(TenantSockets, SocketFileInAnotherTenantsWorkspace) {
  const fs::path sock = ws("t2", "s1") / "tool.sock";
  listen_as_t2("serve_unix", sock.string());
  EXPECT_EQ(attack({"unix", sock.string()}), "socket:EPERM");
  EXPECT_TRUE(blocked(attack({"unix", sock.string()}, serving("t1", "s1"))));
  EXPECT_EQ(first_accepted(sock.string(), false), "ACCEPTED P");
}

TEST_F(TenantSockets, SocketFileInTheDataDir) {
  // A socket the kernel (or anything else) keeps in the data dir.
  const fs::path sock = data_ / "kernel.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 4), 0);
  EXPECT_TRUE(blocked(attack({"unix", sock.string()}, serving("t1", "s1"))));
  ::close(fd);
  fs::remove(sock);
}

}  // namespace
