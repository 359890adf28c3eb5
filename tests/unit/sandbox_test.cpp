// The sandbox library: profiles, policy validation, env policy, allow-list resolution and the
// spawner.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "kernex/log.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/process.hpp"
#include "kernex/sandbox/profile.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using namespace std::chrono_literals;

namespace {

class Sandbox : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kernex-sandbox-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = fs::canonical(tmpl);
    ws_ = root_ / "ws";
    outside_ = root_ / "outside";
    fs::create_directories(ws_);
    fs::create_directories(outside_);
    std::ofstream(outside_ / "secret.txt") << "OUTSIDE-SECRET";
    std::ofstream(ws_ / "inside.txt") << "inside";
    // Orphaned descendants come back to this process, so tests can prove they were killed.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  Policy build(PolicyBuilder builder) {
    auto policy = builder.Build();
    EXPECT_TRUE(policy.has_value()) << (policy ? "" : policy.error().describe());
    return *policy;
  }
  PolicyBuilder builder() { return PolicyBuilder().workspace(ws_); }

  SpawnResult run(const Policy& policy, std::vector<std::string> argv,
                  std::string stdin_data = {}) {
    Command cmd;
    cmd.argv = std::move(argv);
    cmd.stdin_data = std::move(stdin_data);
    auto result = spawn(policy, cmd);
    EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().describe());
    return result ? *result : SpawnResult{};
  }

  // A long-lived process under the workspace policy (kept alive with it).
  std::optional<SandboxedProcess> start_process(std::vector<std::string> argv) {
    process_policy_ = build(builder());
    Command cmd;
    cmd.argv = std::move(argv);
    auto proc = SandboxedProcess::start(*process_policy_, cmd);
    EXPECT_TRUE(proc.has_value()) << (proc ? "" : proc.error().describe());
    if (!proc) return std::nullopt;
    return std::move(*proc);
  }

  fs::path root_, ws_, outside_;
  std::optional<Policy> process_policy_;
};

// --- profiles from YAML -------------------------------------------------------------------------

TEST(SandboxProfileYaml, ParsesEveryKey) {
  auto p = SandboxProfile::from_yaml(R"(
sandbox:
  enforce: true
  workspace: /tmp/ws
  read_only: [/opt/data]
  read_write: [/srv/out]
  executable: [/opt/tools]
  protected: [/var/lib/kernex]
  network: {tcp_connect: [443, 8080], unix: true}
  env: {base: [HOME], passthrough: [API_TOKEN], set: {MODE: fast}, locale: false}
  allowed_commands: [python3, /usr/bin/jq]
  search_path: [/usr/bin]
  limits: {cpu_seconds: 5, address_space: 1073741824, processes: 64, file_size: 1048576, open_files: 128}
  timeout: 2.5
  stdout_cap: 4096
  stderr_cap: 2048
  working_dir: /tmp/ws/sub
)",
                                     "test.yaml");
  ASSERT_TRUE(p.has_value()) << p.error().describe();
  EXPECT_EQ(p->workspace, fs::path("/tmp/ws"));
  EXPECT_EQ(p->read_only, std::vector<fs::path>{"/opt/data"});
  EXPECT_EQ(p->network.tcp_connect_ports, (std::vector<std::uint16_t>{443, 8080}));
  EXPECT_TRUE(p->network.unix_sockets);
  EXPECT_EQ(p->env.passthrough, std::vector<std::string>{"API_TOKEN"});
  EXPECT_EQ(p->env.set.at("MODE"), "fast");
  EXPECT_FALSE(p->env.pass_locale);
  EXPECT_EQ(p->allowed_commands.size(), 2u);
  EXPECT_EQ(p->limits.cpu_seconds, 5u);
  EXPECT_EQ(p->limits.open_files, 128u);
  EXPECT_EQ(p->timeout, 2500ms);
  EXPECT_EQ(p->stdout_cap, 4096u);
  EXPECT_EQ(p->working_dir, fs::path("/tmp/ws/sub"));
}

TEST(SandboxProfileYaml, DefaultsAreStrict) {
  auto p = SandboxProfile::from_yaml("network: none\n", "t.yaml");
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->enforce);
  EXPECT_TRUE(p->network.none());
  EXPECT_TRUE(p->allowed_commands.empty());
}

TEST(SandboxProfileYaml, ErrorsNameTheKey) {
  struct Case {
    const char* yaml;
    const char* expect;
  };
  for (const auto& c :
       {Case{"bogus: 1", "t.yaml: bogus: unknown key"},
        Case{"limits: {cpu: 1}", "limits.cpu: unknown key"},
        Case{"limits: {cpu_seconds: -1}", "limits.cpu_seconds: expected a non-negative integer"},
        Case{"network: {tcp_connect: [70000]}", "network.tcp_connect[0]: value out of range"},
        Case{"network: all", "network: expected 'none'"},
        Case{"read_only: [relative/dir]", "read_only[0]: expected an absolute path"},
        Case{"enforce: maybe", "enforce: expected true or false"},
        Case{"timeout: 0", "timeout: expected a number of seconds"},
        Case{"env: {set: [A]}", "env.set: expected a mapping"},
        Case{"[1, 2", "t.yaml: invalid YAML"}}) {
    auto p = SandboxProfile::from_yaml(c.yaml, "t.yaml");
    ASSERT_FALSE(p.has_value()) << c.yaml;
    EXPECT_NE(p.error().message.find(c.expect), std::string::npos) << p.error().message;
  }
}

TEST(SandboxProfileYaml, UnknownKeysSuggestTheNearestOne) {
  auto top = SandboxProfile::from_yaml("read_onyl: [/usr]\n", "t.yaml");
  ASSERT_FALSE(top.has_value());
  EXPECT_NE(top.error().message.find("t.yaml: read_onyl: unknown key (expected one of: enforce,"),
            std::string::npos)
      << top.error().message;
  EXPECT_NE(top.error().message.find("did you mean `read_only`?"), std::string::npos);
  auto nested = SandboxProfile::from_yaml("limits: {cpu_second: 1}\n", "t.yaml");
  ASSERT_FALSE(nested.has_value());
  EXPECT_NE(nested.error().message.find("limits.cpu_second: unknown key"), std::string::npos);
  EXPECT_NE(nested.error().message.find("did you mean `cpu_seconds`?"), std::string::npos);
}

TEST(SandboxProfileYaml, MissingFileIsAnError) {
  auto p = SandboxProfile::load_yaml_file("/nonexistent/profile.yaml");
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("/nonexistent/profile.yaml"), std::string::npos);
}

// --- policy validation
// ----------------------------------------------------------------------------

TEST(SandboxEnvNames, HijackingNamesAreRecognised) {
  for (const char* name :
       {"LD_PRELOAD", "ld_library_path", "LD_AUDIT", "PATH", "BASH_ENV", "ENV", "PYTHONSTARTUP",
        "NODE_OPTIONS", "PERL5OPT", "GLIBC_TUNABLES", "GIT_SSH_COMMAND", "DYLD_INSERT_LIBRARIES"}) {
    EXPECT_TRUE(is_hijacking_env_name(name)) << name;
  }
  for (const char* name : {"HOME", "LANG", "API_TOKEN", "MY_PATH_HINT"})
    EXPECT_FALSE(is_hijacking_env_name(name)) << name;
}

TEST_F(Sandbox, RefusesGrantsOverProtectedPaths) {
  fs::create_directories(root_ / "home" / ".ssh");
  auto contains =
      PolicyBuilder().workspace(root_ / "home").protect(root_ / "home" / ".ssh").Build();
  ASSERT_FALSE(contains.has_value());
  EXPECT_NE(contains.error().message.find("protected path"), std::string::npos)
      << contains.error().message;

  auto inside =
      PolicyBuilder().read_only(root_ / "home" / ".ssh").protect(root_ / "home" / ".ssh").Build();
  ASSERT_FALSE(inside.has_value());
  EXPECT_NE(inside.error().message.find("lies inside"), std::string::npos);

  // The real home's credential stores are protected without being listed.
  if (const char* home = std::getenv("HOME"); home != nullptr && fs::is_directory(home)) {
    auto whole_home = PolicyBuilder().read_only(home).Build();
    EXPECT_FALSE(whole_home.has_value());
  }
  auto root = PolicyBuilder().read_only("/").Build();
  EXPECT_FALSE(root.has_value());
}

TEST_F(Sandbox, RefusesMissingAndRelativeGrants) {
  auto missing = PolicyBuilder().read_only(root_ / "nope").Build();
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("read_only"), std::string::npos);
  auto relative = PolicyBuilder().read_write("ws").Build();
  ASSERT_FALSE(relative.has_value());
  EXPECT_NE(relative.error().message.find("not absolute"), std::string::npos);
}

TEST_F(Sandbox, RefusesHijackingEnvironment) {
  for (const char* name : {"LD_PRELOAD", "PATH", "BASH_ENV", "NODE_OPTIONS"}) {
    auto pass = builder().passthrough_env(name).Build();
    ASSERT_FALSE(pass.has_value()) << name;
    EXPECT_NE(pass.error().message.find(name), std::string::npos);
    auto set = builder().set_env(name, "x").Build();
    EXPECT_FALSE(set.has_value()) << name;
  }
  auto policy = build(builder());
  Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.env = {{"LD_PRELOAD", "/tmp/evil.so"}};
  auto r = spawn(policy, cmd);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("LD_PRELOAD"), std::string::npos);
}

TEST_F(Sandbox, EnvironmentStartsEmpty) {
  ::setenv("KERNEX_TEST_SECRET", "do-not-pass", 1);
  ::setenv("KERNEX_TEST_DECLARED", "declared-value", 1);
  ::setenv("LC_KERNEX_TEST", "es_ES.UTF-8", 1);
  auto policy = build(builder().passthrough_env("KERNEX_TEST_DECLARED").set_env("MODE", "literal"));
  Command cmd;
  cmd.argv = {"env"};
  cmd.env = {{"EXTRA", "added"}};
  auto r = spawn(policy, cmd);
  ::unsetenv("KERNEX_TEST_SECRET");
  ::unsetenv("KERNEX_TEST_DECLARED");
  ::unsetenv("LC_KERNEX_TEST");
  ASSERT_TRUE(r.has_value()) << r.error().describe();
  ASSERT_TRUE(r->success()) << r->stderr_data;
  EXPECT_EQ(r->stdout_data.find("KERNEX_TEST_SECRET"), std::string::npos);
  EXPECT_NE(r->stdout_data.find("KERNEX_TEST_DECLARED=declared-value\n"), std::string::npos);
  EXPECT_NE(r->stdout_data.find("LC_KERNEX_TEST=es_ES.UTF-8\n"), std::string::npos);
  EXPECT_NE(r->stdout_data.find("MODE=literal\n"), std::string::npos);
  EXPECT_NE(r->stdout_data.find("EXTRA=added\n"), std::string::npos);
  EXPECT_NE(r->stdout_data.find("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin\n"),
            std::string::npos);
  EXPECT_NE(r->stdout_data.find("TMPDIR=" + policy.private_tmp().string() + "\n"),
            std::string::npos);
}

TEST_F(Sandbox, MallocHugePagesSetsOnlyTheFixedTunable) {
  EXPECT_FALSE(builder().set_env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1").Build().has_value());
  auto plain = build(builder());
  EXPECT_EQ(run(plain, {"env"}).stdout_data.find("GLIBC_TUNABLES"), std::string::npos);
  SandboxProfile profile;
  profile.workspace = ws_;
  profile.env.malloc_huge_pages = true;
  auto huge = build(PolicyBuilder(profile));
  EXPECT_NE(run(huge, {"env"}).stdout_data.find("GLIBC_TUNABLES=glibc.malloc.hugetlb=1\n"),
            std::string::npos);
  auto yaml = SandboxProfile::from_yaml("env: {malloc_huge_pages: true}", "test");
  ASSERT_TRUE(yaml.has_value()) << yaml.error().describe();
  EXPECT_TRUE(yaml->env.malloc_huge_pages);
}

// --- allow-list
// -----------------------------------------------------------------------------------

TEST_F(Sandbox, AllowListResolvesAgainstTheFixedSearchPath) {
  auto policy = build(builder().allow_command("echo").allow_command("/bin/sh"));
  auto echo = resolve_command(policy, "echo", ws_);
  ASSERT_TRUE(echo.has_value()) << echo.error().describe();
  EXPECT_TRUE(echo->is_absolute());
  EXPECT_TRUE(
      resolve_command(policy, "/bin/echo", ws_).has_value());  // same program as /usr/bin/echo
  EXPECT_TRUE(resolve_command(policy, "sh", ws_).has_value());

  auto cat = resolve_command(policy, "cat", ws_);
  ASSERT_FALSE(cat.has_value());
  EXPECT_NE(cat.error().message.find("not in the sandbox's allowed_commands"), std::string::npos);

  // A look-alike with an allowed basename elsewhere is a different program.
  fs::copy_file("/bin/echo", ws_ / "echo");
  fs::permissions(ws_ / "echo", fs::perms::owner_all);
  EXPECT_FALSE(resolve_command(policy, "./echo", ws_).has_value());
  EXPECT_FALSE(resolve_command(policy, (ws_ / "echo").string(), ws_).has_value());

  EXPECT_FALSE(resolve_command(policy, "no-such-command-kernex", ws_).has_value());
}

TEST_F(Sandbox, AllowedInterpreterCannotExecOtherPrograms) {
  auto policy = build(builder().allow_command("sh"));
  auto r = run(policy, {"sh", "-c", "echo via-builtin; /bin/cat /etc/hostname"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "via-builtin\n");
  EXPECT_NE(r.stderr_data.find("Permission denied"), std::string::npos) << r.stderr_data;
}

// --- spawning
// -------------------------------------------------------------------------------------

TEST_F(Sandbox, RunsEchoSandboxed) {
  auto policy = build(builder());
  EXPECT_TRUE(policy.status().enforced);
  EXPECT_GE(policy.status().landlock_abi, 1);
  auto r = run(policy, {"/bin/echo", "hello", "sandbox"});
  EXPECT_TRUE(r.success());
  EXPECT_TRUE(r.sandboxed);
  EXPECT_EQ(r.stdout_data, "hello sandbox\n");
  EXPECT_EQ(r.stderr_data, "");
  EXPECT_EQ(r.executable, "/bin/echo");
  EXPECT_GT(r.wall_time.count(), 0);
  EXPECT_FALSE(r.peak_rss_kb.has_value());  // echo stays far below this test process's RSS
}

TEST_F(Sandbox, PassesStdinAndReportsExitCodes) {
  auto policy = build(builder());
  auto r = run(policy, {"sh", "-c", "cat; exit 7"}, R"({"file":"a.pdf"})");
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.stdout_data, R"({"file":"a.pdf"})");
  // A child that never reads stdin must not hurt the parent (no SIGPIPE), even with a large input.
  auto big = run(policy, {"/bin/true"}, std::string(4 << 20, 'x'));
  EXPECT_TRUE(big.success());
}

TEST_F(Sandbox, FilesystemFollowsThePolicy) {
  auto policy = build(builder());
  auto outside = run(policy, {"cat", (outside_ / "secret.txt").string()});
  EXPECT_NE(outside.exit_code, 0);
  EXPECT_EQ(outside.stdout_data.find("OUTSIDE-SECRET"), std::string::npos);
  auto inside = run(policy, {"cat", "inside.txt"});
  EXPECT_EQ(inside.stdout_data, "inside");
  auto write =
      run(policy, {"sh", "-c", "echo new > made.txt && cat made.txt && echo x > \"$TMPDIR/t\""});
  EXPECT_TRUE(write.success()) << write.stderr_data;
  EXPECT_TRUE(fs::exists(ws_ / "made.txt"));
  auto write_out = run(policy, {"sh", "-c", "echo x > " + (outside_ / "planted").string()});
  EXPECT_NE(write_out.exit_code, 0);
  EXPECT_FALSE(fs::exists(outside_ / "planted"));
  auto devnull = run(policy, {"sh", "-c", "echo quiet > /dev/null"});
  EXPECT_TRUE(devnull.success()) << devnull.stderr_data;
}

// `grandchild` as the command saw it. In a PID namespace of its own that pid means nothing here:
// the namespace died with the command, taking the grandchild with it, so nothing came back to this
// process (the subreaper). Without one, the killed grandchild was reparented to us.
void expect_grandchild_killed(const Policy& policy, pid_t grandchild) {
  int status = 0;
  if (policy.status().pid_namespace) {
    EXPECT_LE(::waitpid(-1, &status, WNOHANG), 0);  // none but the namespace inits, which live on
    return;
  }
  ASSERT_EQ(::waitpid(grandchild, &status, 0), grandchild);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST_F(Sandbox, TimeoutKillsTheWholeProcessGroup) {
  auto policy = build(builder().timeout(300ms));
  auto r = run(policy, {"sh", "-c", "sleep 1000 & echo $!; exec sleep 1000"});
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_LT(r.wall_time, 5s);
  const pid_t grandchild = std::atoi(r.stdout_data.c_str());
  ASSERT_GT(grandchild, 0) << r.stdout_data;
  expect_grandchild_killed(policy, grandchild);
}

TEST_F(Sandbox, BackgroundChildDoesNotOutliveTheCommand) {
  auto policy = build(builder());
  auto r = run(policy, {"sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  const pid_t grandchild = std::atoi(r.stdout_data.c_str());
  ASSERT_GT(grandchild, 0);
  expect_grandchild_killed(policy, grandchild);
}

TEST_F(Sandbox, OutputIsCappedWithAVisibleMarker) {
  auto policy = build(builder().output_caps(1000, 100));
  auto r =
      run(policy, {"sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; head -c 300 /dev/zero >&2"});
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_TRUE(r.stderr_truncated);
  EXPECT_EQ(r.stdout_data, std::string(1000, 'a') + truncation_marker(4000));
  EXPECT_EQ(r.stderr_data.size(), 100 + truncation_marker(200).size());
  EXPECT_NE(r.stdout_data.find("output truncated"), std::string::npos);
}

TEST_F(Sandbox, TruncationKeepsUtf8Whole) {
  auto policy = build(builder().output_caps(4, 4));
  auto r = run(policy, {"printf", "aaa\xc3\xa9zzz"});
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stdout_data, "aaa" + truncation_marker(5));
}

TEST_F(Sandbox, ResourceLimitsApply) {
  kernex::sandbox::ResourceLimits limits;
  limits.file_size_bytes = 4096;
  limits.open_files = 16;
  auto policy = build(builder().limits(limits));
  auto r = run(policy, {"sh", "-c", "ulimit -f; ulimit -n"});
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "8\n16\n");  // ulimit -f reports 512-byte blocks
}

TEST_F(Sandbox, ExecFailureIsAnError) {
  auto policy = build(builder());
  Command cmd;
  cmd.argv = {"no-such-command-kernex"};
  auto r = spawn(policy, cmd);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, kernex::ErrorCode::Sandbox);
  // Landlock refuses execution outside the exec paths even when the file is executable.
  fs::copy_file("/bin/true", ws_ / "mytrue");
  cmd.argv = {"./mytrue"};
  auto denied = spawn(policy, cmd);
  ASSERT_FALSE(denied.has_value());
  EXPECT_NE(denied.error().message.find("Permission denied"), std::string::npos)
      << denied.error().message;
}

TEST_F(Sandbox, UnenforcedSpawnWarnsEveryTime) {
  std::vector<std::string> warnings;
  std::mutex m;
  kernex::set_log_sink([&](kernex::LogLevel level, std::string_view msg) {
    std::lock_guard lock(m);
    if (level == kernex::LogLevel::Warn) warnings.emplace_back(msg);
  });
  auto policy = build(builder().enforce(false));
  EXPECT_FALSE(policy.status().enforced);
  auto a = run(policy, {"cat", (outside_ / "secret.txt").string()});
  auto b = run(policy, {"/bin/true"});
  kernex::set_log_sink(nullptr);
  EXPECT_FALSE(a.sandboxed);
  EXPECT_EQ(a.stdout_data, "OUTSIDE-SECRET");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("UNSANDBOXED"), std::string::npos);
}

TEST_F(Sandbox, GitAndRcFilesStayReadOnlyInTheWorkspace) {
  fs::create_directories(ws_ / ".git");
  std::ofstream(ws_ / ".git" / "config") << "[core]\n";
  std::ofstream(ws_ / ".envrc") << "";
  auto policy = build(builder());
  const auto& ro = policy.status().read_only_in_writable;
  for (const auto& p : {ws_ / ".git", ws_ / ".envrc"}) {  // .git as a whole
    EXPECT_NE(std::find(ro.begin(), ro.end(), p), ro.end()) << p;
  }
  auto r =
      run(policy,
          {"sh", "-c",
           "echo x > .git/hooks/post-checkout; echo y >> .envrc; echo ok > .git/HEAD; echo ok"});
  EXPECT_EQ(r.stdout_data, "ok\n");
  EXPECT_FALSE(fs::exists(ws_ / ".git" / "HEAD"));

  // With git_writes, git may write its objects and HEAD; hooks and config stay read-only.
  SandboxProfile writes;
  writes.git_writes = true;
  auto git_policy = build(PolicyBuilder(writes).workspace(ws_));
  const auto& kept = git_policy.status().read_only_in_writable;
  EXPECT_TRUE(fs::is_directory(ws_ / ".git" / "hooks"));  // created so that it can be protected
  for (const auto& p : {ws_ / ".git" / "hooks", ws_ / ".git" / "config", ws_ / ".envrc"}) {
    EXPECT_NE(std::find(kept.begin(), kept.end(), p), kept.end()) << p;
  }
  r = run(git_policy, {"sh", "-c",
                       "echo x > .git/hooks/post-checkout; echo y >> .envrc; echo ok > .git/HEAD "
                       "&& cat .git/HEAD"});
  EXPECT_EQ(r.stdout_data, "ok\n");
  EXPECT_FALSE(fs::exists(ws_ / ".git" / "hooks" / "post-checkout"));
  EXPECT_EQ(fs::file_size(ws_ / ".envrc"), 0u);
}

// With git_writes, metadata that doesn't exist yet is guarded too: its directories are made and
// bound read-only, config.worktree made empty; nothing can be created below them by any name.
TEST_F(Sandbox, GitWritesGuardMetadataThatDoesNotExistYet) {
  fs::create_directories(ws_ / ".git" / "objects");
  fs::create_directories(ws_ / ".git" / "refs");
  std::ofstream(ws_ / ".git" / "HEAD") << "ref: refs/heads/main\n";
  std::ofstream(ws_ / ".git" / "config") << "[core]\n";
  SandboxProfile writes;
  writes.git_writes = true;
  auto policy = build(PolicyBuilder(writes).workspace(ws_));
  const auto& kept = policy.status().read_only_in_writable;
  for (const char* rel :
       {"modules", "worktrees", "hooks", "info", "objects/info", "config", "config.worktree"}) {
    EXPECT_TRUE(fs::exists(ws_ / ".git" / rel)) << rel;
    EXPECT_NE(std::find(kept.begin(), kept.end(), ws_ / ".git" / rel), kept.end()) << rel;
  }
  EXPECT_EQ(fs::file_size(ws_ / ".git" / "config.worktree"), 0u);
  auto r = run(policy, {"sh", "-c",
                        "mkdir -p .git/modules/lib; echo x > .git/modules/lib/config; "
                        "mkdir -p .git/worktrees/w; echo x > .git/worktrees/w/commondir; "
                        "echo x >> .git/config.worktree; mv .git/modules .git/m2; "
                        "ln -s \"$PWD\" .git/modules/lib; echo ok > .git/HEAD && cat .git/HEAD"});
  EXPECT_EQ(r.stdout_data, "ok\n");  // the rest of .git stays writable
  EXPECT_TRUE(fs::is_empty(ws_ / ".git" / "modules"));
  EXPECT_TRUE(fs::is_empty(ws_ / ".git" / "worktrees"));
  EXPECT_EQ(fs::file_size(ws_ / ".git" / "config.worktree"), 0u);
  EXPECT_FALSE(fs::exists(ws_ / ".git" / "m2"));
}

TEST_F(Sandbox, ShellPipelinesAndSubshellsWork) {
  auto policy = build(builder());
  auto r = run(policy, {"/bin/bash", "-c", "echo a | tr a b; (echo sub) & wait; echo $(echo cmd)"});
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "b\nsub\ncmd\n");
}

TEST_F(Sandbox, ConcurrentSpawnsShareOnePolicy) {
  auto policy = build(builder());
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        Command cmd;
        cmd.argv = {"/bin/echo", std::to_string(t)};
        auto r = spawn(policy, cmd);
        if (r && r->success()) outputs[t] += r->stdout_data;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    std::string expected;
    for (int i = 0; i < 10; ++i) expected += std::to_string(t) + "\n";
    EXPECT_EQ(outputs[t], expected);
  }
}

// Children inherit their seccomp filter from a clone thread that carries it (clone_thread.cpp): the
// filter must stay on that thread, and each network policy must get its own.
std::string thread_status_field(const fs::path& status, const std::string& field) {
  std::ifstream in(status);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0)
      return line.substr(line.find_first_not_of(" \t", field.size() + 1));
  }
  return {};
}

TEST_F(Sandbox, SpawningLeavesTheKernelUnfiltered) {
  // No writable grant, so no mount namespace: the clone-thread path that carries the filter.
  SandboxProfile read_only_profile;
  read_only_profile.private_tmp = false;
  auto policy = build(PolicyBuilder(read_only_profile).read_only(ws_).working_dir(ws_));
  ASSERT_TRUE(run(policy, {"/bin/true"}).success());
  EXPECT_EQ(thread_status_field("/proc/thread-self/status", "Seccomp"), "0");
  EXPECT_EQ(thread_status_field("/proc/thread-self/status", "NoNewPrivs"), "0");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  int filtered_threads = 0;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm_file(task.path() / "comm");
    std::string comm;
    std::getline(comm_file, comm);
    const std::string mode = thread_status_field(task.path() / "status", "Seccomp");
    if (comm == "kernex-clone" && mode == "2") {
      ++filtered_threads;
    } else {
      EXPECT_EQ(mode, "0") << "thread " << task.path().filename() << " (" << comm
                           << ") is filtered";
    }
  }
  EXPECT_GE(filtered_threads, 1);
}

TEST_F(Sandbox, EachNetworkPolicyKeepsItsOwnFilter) {
  auto none = build(builder());
  auto unix_ok = build(builder().allow_unix_sockets());
  const std::vector<std::string> probe = {"python3", "-c",
                                          "import socket; socket.socket(socket.AF_UNIX)"};
  for (int round = 0; round < 2; ++round) {
    auto denied = run(none, probe);
    EXPECT_NE(denied.exit_code, 0) << "round " << round;
    EXPECT_NE(denied.stderr_data.find("Operation not permitted"), std::string::npos)
        << denied.stderr_data;
    auto allowed = run(unix_ok, probe);
    EXPECT_TRUE(allowed.success()) << "round " << round << ": " << allowed.stderr_data;
  }
}

TEST_F(Sandbox, ConcurrentSpawnsUnderDifferentFiltersKeepTheirOwn) {
  auto none = build(builder());
  auto unix_ok = build(builder().allow_unix_sockets());
  const std::vector<std::string> probe = {
      "/bin/sh", "-c", "python3 -c 'import socket; socket.socket(socket.AF_UNIX)' && echo open"};
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const Policy& policy = t % 2 == 0 ? none : unix_ok;
      for (int i = 0; i < 6; ++i) {
        Command cmd;
        cmd.argv = probe;
        auto r = spawn(policy, cmd);
        const bool opened = r && r->stdout_data == "open\n";
        if (!r || opened != (t % 2 == 1)) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST_F(Sandbox, PrivateTmpIsRemovedWithThePolicy) {
  fs::path tmp;
  {
    auto policy = build(builder());
    tmp = policy.private_tmp();
    ASSERT_TRUE(fs::is_directory(tmp));
    auto copy = policy;  // shared state: the directory lives as long as any copy
  }
  EXPECT_FALSE(fs::exists(tmp));
}

// --- long-lived processes (SandboxedProcess) ----------------------------------------------------

TEST_F(Sandbox, ProcessAnswersLineByLine) {
  auto proc = start_process({"/bin/cat"});
  ASSERT_TRUE(proc.has_value());
  const auto deadline = SandboxedProcess::Clock::now() + 10s;
  for (int i = 0; i < 3; ++i) {
    const std::string line = R"({"n":)" + std::to_string(i) + "}";
    ASSERT_TRUE(proc->write(line + "\n", deadline).has_value());
    auto got = proc->read_line(deadline, 1024);
    ASSERT_TRUE(got.has_value()) << got.error().describe();
    EXPECT_EQ(*got, line);
  }
  proc->close_stdin();
  auto end = proc->read_line(deadline, 1024);
  ASSERT_FALSE(end.has_value());
  EXPECT_EQ(end.error().code, kernex::ErrorCode::Io);
  EXPECT_EQ(proc->wait(deadline).exit_code, 0);
}

// stdin is a pipe: writing to a child that has gone must be an error, never SIGPIPE (which would
// end this test binary, as it would end a host that has not ignored it).
TEST_F(Sandbox, WritingToAProcessThatExitedIsAnErrorNotSigpipe) {
  auto proc = start_process({"/bin/true"});
  ASSERT_TRUE(proc.has_value());
  // More than the pipe holds, so the write must wait for the child (a large write grows the pipe
  // to 1 MiB first).
  const std::string mb(4 << 20, 'x');
  auto wrote = proc->write(mb, SandboxedProcess::Clock::now() + 30s);
  ASSERT_FALSE(wrote.has_value());
  EXPECT_EQ(wrote.error().code, kernex::ErrorCode::Io) << wrote.error().describe();
  EXPECT_NE(wrote.error().message.find("exited"), std::string::npos) << wrote.error().message;
  EXPECT_EQ(proc->wait(SandboxedProcess::Clock::now() + 10s).exit_code, 0);
  // Once reaped, a write that would wait fails at once the same way.
  auto again = proc->write(mb, SandboxedProcess::Clock::now() + 30s);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, kernex::ErrorCode::Io);
}

TEST_F(Sandbox, AProcessThatStopsReadingMakesTheWriteTimeOut) {
  auto proc = start_process({"/bin/sh", "-c", "exec 0<&-; echo closed; exec sleep 60"});
  ASSERT_TRUE(proc.has_value());
  auto closed = proc->read_line(SandboxedProcess::Clock::now() + 10s, 1024);
  ASSERT_TRUE(closed.has_value()) << closed.error().describe();
  const std::string mb(4 << 20, 'x');  // more than even a grown (1 MiB) pipe holds
  auto wrote = proc->write(mb, SandboxedProcess::Clock::now() + 300ms);
  ASSERT_FALSE(wrote.has_value());
  EXPECT_EQ(wrote.error().code, kernex::ErrorCode::Limit) << wrote.error().describe();
  EXPECT_TRUE(proc->running());
  proc->kill();
  EXPECT_EQ(proc->wait(SandboxedProcess::Clock::now() + 10s).term_signal, SIGKILL);
}

}  // namespace
