// `kernex sandbox exec`, `kernex tool run` and the sandbox section of `kernex doctor`, run as a
// user would run them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "kernex/json.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const std::string kSkills = KERNEX_SOURCE_DIR "/tests/fixtures/skills";

using Outcome = kernex::testing::CliOutcome;
using kernex::testing::slurp;

class CliSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kernex-cli-sandbox-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // A clean, known environment: no config from the caller's shell.
    env_ = kernex::testing::clean_environment();
    env_["KERNEX_DATA_DIR"] = (dir_ / "data").string();
    env_["KERNEX_PLUGIN_PATH"] = (dir_ / "no-plugins").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome kernex(const std::vector<std::string>& args) {
    return kernex::testing::run_cli(dir_, env_, args);
  }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

class SandboxExec : public CliSandboxTest {
 protected:
  void SetUp() override {
    CliSandboxTest::SetUp();
    ws_ = fs::canonical(dir_) / "ws";
    fs::create_directories(ws_);
    std::ofstream(ws_ / "inside.txt") << "inside-text";
    std::ofstream(dir_ / "secret.txt") << "OUTSIDE-SECRET";
    env_["KERNEX_TEST_SECRET"] = "secret-must-not-leak";
    env_["KERNEX_TEST_DECLARED"] = "declared-value";
  }
  std::vector<std::string> exec(std::vector<std::string> tail) {
    std::vector<std::string> args = {"sandbox", "exec", "--workspace", ws_.string()};
    args.insert(args.end(), tail.begin(), tail.end());
    return args;
  }
  fs::path ws_;
};

TEST_F(SandboxExec, RunsACommandInTheWorkspace) {
  auto o = kernex(exec({"--", "sh", "-c", "cat inside.txt; pwd"}));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("inside-text"));
  EXPECT_THAT(o.out, HasSubstr(ws_.string()));
}

TEST_F(SandboxExec, JsonReportsTheResultAndTheProtections) {
  auto o = kernex(exec({"--json", "--", "cat", (dir_ / "secret.txt").string()}));
  EXPECT_EQ(o.exit_code, 7) << o.err;
  Json j = Json::parse(o.out);
  EXPECT_FALSE(j.at("success").get<bool>());
  EXPECT_NE(j.at("exit_code"), 0);
  EXPECT_THAT(j.at("stdout").get<std::string>(), Not(HasSubstr("OUTSIDE-SECRET")));
  EXPECT_THAT(j.at("stderr").get<std::string>(), HasSubstr("Permission denied"));
  EXPECT_TRUE(j.at("sandbox").at("enforced").get<bool>());
  EXPECT_TRUE(j.at("sandbox").at("seccomp").get<bool>());
  EXPECT_GE(j.at("sandbox").at("landlock_abi").get<int>(), 1);
}

TEST_F(SandboxExec, OnlyNamedEnvironmentPassesThrough) {
  auto o = kernex(exec({"--env", "KERNEX_TEST_DECLARED", "--", "/usr/bin/env"}));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("KERNEX_TEST_DECLARED=declared-value"));
  EXPECT_THAT(o.out, Not(HasSubstr("secret-must-not-leak")));
  auto hijack = kernex(exec({"--env", "LD_PRELOAD", "--", "/usr/bin/env"}));
  EXPECT_EQ(hijack.exit_code, 7);
  EXPECT_THAT(hijack.err, HasSubstr("LD_PRELOAD"));
}

TEST_F(SandboxExec, TimeoutKillsAndExitsSeven) {
  auto o = kernex(exec({"--timeout", "0.5", "--", "sleep", "30"}));
  EXPECT_EQ(o.exit_code, 7);
  EXPECT_THAT(o.err, HasSubstr("timed out"));
  auto failing = kernex(exec({"--", "sh", "-c", "exit 3"}));
  EXPECT_EQ(failing.exit_code, 7);
  EXPECT_THAT(failing.err, HasSubstr("exited with status 3"));
}

TEST_F(SandboxExec, NetworkOnlyToAllowedPorts) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  const std::string connect = "exec 3<>/dev/tcp/127.0.0.1/" + port + " && echo connected";
  auto denied = kernex(exec({"--", "bash", "-c", connect}));
  EXPECT_EQ(denied.exit_code, 7);
  EXPECT_THAT(denied.out, Not(HasSubstr("connected")));
  auto allowed = kernex(exec({"--allow-net", port, "--", "bash", "-c", connect}));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.out, HasSubstr("connected"));
  ::close(listener);
}

TEST_F(SandboxExec, BadProfileIsAConfigError) {
  std::ofstream(dir_ / "bad.yaml") << "sandbox:\n  netwrk: none\n";
  auto o = kernex(exec({"--profile", (dir_ / "bad.yaml").string(), "--", "true"}));
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_THAT(o.err, HasSubstr("netwrk"));
  EXPECT_EQ(kernex({"sandbox", "exec"}).exit_code, 2);  // no command
}

TEST_F(SandboxExec, ToolRunRunsASkillToolboxAsTheLoopWould) {
  auto o = kernex({"tool", "run", "--skills", kSkills, "--tool", "probe", "--args",
                   R"({"path":"doc.pdf"})", "--workspace", ws_.string(), "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  Json j = Json::parse(o.out);
  EXPECT_FALSE(j.at("is_error").get<bool>());
  const std::string content = j.at("content").get<std::string>();
  EXPECT_THAT(content, HasSubstr("argv=doc.pdf"));
  EXPECT_THAT(content, HasSubstr(R"(stdin={"path":"doc.pdf"})"));
  EXPECT_THAT(content, HasSubstr("declared=declared-value"));
  EXPECT_THAT(content, HasSubstr("secret=unset"));
  EXPECT_THAT(content, HasSubstr("cwd=" + ws_.string()));
}

TEST_F(SandboxExec, ToolRunFailuresExitSeven) {
  auto fail =
      kernex({"tool", "run", "--skills", kSkills, "--tool", "fail", "--workspace", ws_.string()});
  EXPECT_EQ(fail.exit_code, 7);
  EXPECT_THAT(fail.out, HasSubstr("exit status 3"));
  EXPECT_THAT(fail.out, HasSubstr("boom"));
  auto missing_arg =
      kernex({"tool", "run", "--skills", kSkills, "--tool", "probe", "--workspace", ws_.string()});
  EXPECT_EQ(missing_arg.exit_code, 7);
  EXPECT_THAT(missing_arg.out, HasSubstr("`path` was not given"));
  auto unknown = kernex({"tool", "run", "--skills", kSkills, "--tool", "nope"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("probe"));
  auto bad_json =
      kernex({"tool", "run", "--skills", kSkills, "--tool", "probe", "--args", "{not json"});
  EXPECT_EQ(bad_json.exit_code, 2);
}

TEST_F(SandboxExec, DoctorReportsTheProtections) {
  auto o = kernex({"doctor", "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  Json j = Json::parse(o.out);
  ASSERT_TRUE(j.contains("sandbox"));
  EXPECT_GE(j.at("sandbox").at("landlock_abi").get<int>(), 1);
  EXPECT_TRUE(j.at("sandbox").at("seccomp").get<bool>());
  auto text = kernex({"doctor"});
  EXPECT_THAT(text.out, HasSubstr("sandbox (default profile)"));
  EXPECT_THAT(text.out, HasSubstr("seccomp"));
}

// Every class of the second battery has a row saying whether it holds here; on this machine (root,
// Landlock, seccomp, a pids cgroup) each one does.
TEST_F(SandboxExec, DoctorListsEveryProtectionClass) {
  auto o = kernex({"doctor", "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const Json rows = Json::parse(o.out).at("sandbox").at("protections");
  std::vector<std::string> names;
  for (const auto& r : rows) {
    names.push_back(r.at("protection").get<std::string>());
    EXPECT_FALSE(r.at("how").get<std::string>().empty());
    if (::geteuid() == 0) {
      EXPECT_TRUE(r.at("active").get<bool>()) << r.dump();
    }
  }
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "kernel_files", "skills_read_only", "git_read_only", "programs_not_files",
                         "network_gaps", "sysv_ipc", "process_limit", "anonymous_code",
                         "nothing_outlives_the_kernel", "no_watches", "read_only_outside_grants"));
  auto text = kernex({"doctor"});
  EXPECT_THAT(text.out, HasSubstr("nothing_outlives_the_kernel"));
}

}  // namespace
