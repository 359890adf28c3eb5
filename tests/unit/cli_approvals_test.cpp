// `kernex run` with calls that need approval: asked on a terminal (a real pty), approved by
// --approve, and denied when nothing can ask.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "pty_session.hpp"
#include "replay_lines.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::calculate_line;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::PtySession;
using testing::text_line;

class CliApprovals : public ::testing::Test {
 protected:
  void SetUp() override {
    env = testing::cli_environment(dir.path());
    dir.write("kernex.yaml", "permissions:\n  ask: [\"calculate(*7*)\"]\n");
  }
  std::vector<std::string> args(const std::vector<std::string>& lines) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    return {"run",
            "--config",
            (dir / "kernex.yaml").string(),
            "--provider",
            "replay",
            "--provider-opt",
            "script=" + dir.write("s.jsonl", script).string(),
            "--json",
            "compute"};
  }
  std::vector<std::string> one_call() {
    return args({calculate_line("c1", "6*7"), text_line("done")});
  }

  testing::TempDir dir;
  std::map<std::string, std::string> env;
};

TEST_F(CliApprovals, TerminalYesRunsTheCallAfterShowingToolAndArguments) {
  PtySession pty(KERNEX_CLI, one_call(), env);
  ASSERT_TRUE(pty.expect("approval needed: calculate {\"expression\":\"6*7\"}")) << pty.output();
  ASSERT_TRUE(pty.expect("why: ask rule: calculate(*7*)")) << pty.output();
  ASSERT_TRUE(pty.expect("approve? [y]es / [n]o / [a]lways for this session: ")) << pty.output();
  pty.type("y\n");
  ASSERT_TRUE(pty.expect("\"result\":\"42\"")) << pty.output();
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

TEST_F(CliApprovals, TerminalNoDeniesAndAnUnclearAnswerIsAskedAgain) {
  PtySession pty(KERNEX_CLI, one_call(), env);
  ASSERT_TRUE(pty.expect("approve? ")) << pty.output();
  pty.type("maybe\n");
  ASSERT_TRUE(pty.expect("please answer y, n or a")) << pty.output();
  ASSERT_TRUE(pty.expect("approve? ")) << pty.output();
  pty.type("n\n");
  ASSERT_TRUE(pty.expect("Tool call denied: denied by a person: the user said no")) << pty.output();
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

TEST_F(CliApprovals, TerminalAlwaysIsAskedOnceForTheSession) {
  PtySession pty(
      KERNEX_CLI,
      args({calculate_line("c1", "6*7"), calculate_line("c2", "7*7"), text_line("done")}), env);
  ASSERT_TRUE(pty.expect("approve? ")) << pty.output();
  pty.type("a\n");
  ASSERT_TRUE(pty.expect("\"result\":\"49\"")) << pty.output();
  EXPECT_EQ(pty.wait(), 0) << pty.output();
  EXPECT_THAT(pty.output(), Not(HasSubstr("7*7\"}\r\n  why")));  // the second was not asked
}

TEST_F(CliApprovals, EndOfInputAtThePromptDenies) {
  PtySession pty(KERNEX_CLI, one_call(), env);
  ASSERT_TRUE(pty.expect("approve? ")) << pty.output();
  pty.type("\x04");  // Ctrl-D
  ASSERT_TRUE(pty.expect("denied by a person: no answer (end of input)")) << pty.output();
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

TEST_F(CliApprovals, WithoutATerminalTheCallIsDeniedAsNeedingApproval) {
  auto o = testing::run_cli(dir.path(), env, one_call());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  Json j = Json::parse(o.out);
  EXPECT_EQ(j["tool_calls"][0]["result"],
            "Tool call denied: needs approval (ask rule: calculate(*7*))");
  EXPECT_EQ(j["tool_calls"][0]["is_error"], true);
}

TEST_F(CliApprovals, ApproveFlagRunsItWithoutATerminalAndSaysSo) {
  auto a = one_call();
  a.insert(a.begin() + 1, "--approve");
  auto o = testing::run_cli(dir.path(), env, a);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(Json::parse(o.out)["tool_calls"][0]["result"], "42");
  EXPECT_THAT(o.err, HasSubstr("approved by --approve: calculate (ask rule: calculate(*7*))"));
}

TEST_F(CliApprovals, ArgumentsWithTerminalEscapesAreShownDefanged) {
  PtySession pty(KERNEX_CLI, args({calculate_line("c1", "7\x1b]0;pwned\x07"), text_line("done")}),
                 env);
  ASSERT_TRUE(pty.expect("approve? ")) << pty.output();
  EXPECT_THAT(pty.output(), Not(HasSubstr("\x1b]0;pwned")));
  pty.type("n\n");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

}  // namespace
}  // namespace kernex
