// `kernex chat` on a real pseudo-terminal: turns that stream, /history and /new, approvals at the
// prompt, and Ctrl-C stopping the running turn while the chat goes on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "pty_session.hpp"
#include "replay_lines.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::calculate_line;
using testing::PtySession;
using testing::text_line;

class CliChat : public ::testing::Test {
 protected:
  void SetUp() override { env = testing::cli_environment(dir.path()); }
  std::vector<std::string> chat(const std::vector<std::string>& lines,
                                const std::string& yaml = "") {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    return {"chat",
            "--config",
            dir.write("kernex.yaml", yaml.empty() ? "{}\n" : yaml).string(),
            "--provider",
            "replay",
            "--provider-opt",
            "script=" + dir.write("s.jsonl", script).string()};
  }

  testing::TempDir dir;
  std::map<std::string, std::string> env;
};

TEST_F(CliChat, TurnsStreamAndHistoryAndNewSessionWork) {
  PtySession pty(KERNEX_CLI, chat({text_line("Hi there."), text_line("Fresh start.")}), env);
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("hello\n");
  ASSERT_TRUE(pty.expect("Hi there.")) << pty.output();
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("/history\n");
  ASSERT_TRUE(pty.expect("you: hello")) << pty.output();
  ASSERT_TRUE(pty.expect("kernex: Hi there.")) << pty.output();
  pty.type("/new\n");
  ASSERT_TRUE(pty.expect("(new session chat-2)")) << pty.output();
  pty.type("/history\n");
  ASSERT_TRUE(pty.expect("(no messages in chat-2 yet)")) << pty.output();
  pty.type("again\n");
  ASSERT_TRUE(pty.expect("Fresh start.")) << pty.output();
  pty.type("/quit\n");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

// `/hist` is a typo, answered at the prompt: the model (whose script has one answer) never sees
// it. A path is a message, and `//x` sends `/x`. On a terminal "thinking…" precedes the answer.
TEST_F(CliChat, UnknownSlashCommandsAreAnsweredLocallyNotSent) {
  PtySession pty(KERNEX_CLI, chat({text_line("Only answer.")}), env);
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("/hist\n");
  ASSERT_TRUE(pty.expect("unknown command /hist; did you mean /history?")) << pty.output();
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("//etc is a folder\n");
  ASSERT_TRUE(pty.expect("thinking")) << pty.output();
  ASSERT_TRUE(pty.expect("Only answer.")) << pty.output();
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("/history\n");
  ASSERT_TRUE(pty.expect("you: /etc is a folder")) << pty.output();
  EXPECT_THAT(pty.output(), ::testing::Not(::testing::HasSubstr("you: /hist")));
  pty.type("/quit\n");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

TEST_F(CliChat, CtrlCStopsTheRunningTurnNotTheProgram) {
  const std::string slow = Json{{"text", "never said"}, {"delay_ms", 120000}}.dump();
  // The next turn's answer, matched by its message: the script has no order across a cancel.
  const std::string still_here = Json{{"text", "Still here."}, {"match", "hello?"}}.dump();
  PtySession pty(KERNEX_CLI, chat({calculate_line("c1", "1+1"), slow, still_here}), env);
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("think long\n");
  ASSERT_TRUE(pty.expect("[tool calculate]")) << pty.output();  // the turn is running
  pty.interrupt();
  ASSERT_TRUE(pty.expect("(stopped)")) << pty.output();
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.interrupt();  // nothing running: a hint, the chat goes on
  ASSERT_TRUE(pty.expect("nothing is running")) << pty.output();
  pty.type("hello?\n");
  ASSERT_TRUE(pty.expect("Still here.")) << pty.output();
  pty.type("\x04");  // Ctrl-D leaves
  EXPECT_EQ(pty.wait(), 0) << pty.output();
}

TEST_F(CliChat, ApprovalsAreAskedAtThePromptAndAlwaysHoldsForTheSession) {
  PtySession pty(KERNEX_CLI,
                 chat({calculate_line("c1", "6*7"), text_line("It is 42."),
                       calculate_line("c2", "7*7"), text_line("It is 49.")},
                      "permissions:\n  ask: [calculate]\n"),
                 env);
  ASSERT_TRUE(pty.expect("you> ")) << pty.output();
  pty.type("six times seven\n");
  ASSERT_TRUE(pty.expect("approval needed: calculate")) << pty.output();
  ASSERT_TRUE(pty.expect("approve? ")) << pty.output();
  pty.type("a\n");
  ASSERT_TRUE(pty.expect("It is 42.")) << pty.output();
  pty.type("seven times seven\n");
  ASSERT_TRUE(pty.expect("It is 49.")) << pty.output();
  pty.type("/quit\n");
  EXPECT_EQ(pty.wait(), 0) << pty.output();
  const std::string& out = pty.output();
  EXPECT_EQ(out.find("approve? "), out.rfind("approve? ")) << "asked twice:\n" << out;
}

TEST_F(CliChat, NoProviderIsAConfigErrorBeforeAnyPrompt) {
  auto o = testing::run_cli(dir.path(), env,
                            {"chat", "--config", dir.write("kernex.yaml", "{}\n").string()});
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.err, ::testing::HasSubstr("no provider configured"));
}

}  // namespace
}  // namespace kernex
