// The demo's runs (examples/demo/run, what scripts/demo shows after installing and building)
// against this build: each feature the demo is there to show must appear in its output, and the
// kernel's own records (the audit log, the requests the replay provider received, memory.db)
// must say the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::read_lines;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// The demo runs once for the whole suite: three runs of `kernex run` under ASan take seconds.
class CliDemo : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new kernex::testing::TempDir();
    auto env = kernex::testing::clean_environment();
    env.erase("KERNEX_PLUGIN_PATH");
    env.erase("KERNEX_DATA_DIR");
    env["HOME"] = tmp_->path().string();
    demo_ = new kernex::testing::CliOutcome(kernex::testing::run_program(
        "/bin/bash", tmp_->path(), env,
        {KERNEX_SOURCE_DIR "/examples/demo/run", KERNEX_CLI, dir().string()}));
  }
  static void TearDownTestSuite() {
    delete demo_;
    delete tmp_;
  }
  void SetUp() override {
    ASSERT_EQ(demo_->exit_code, 0) << demo_->out << demo_->err;
    ASSERT_EQ(demo_->err, "");
  }

  static fs::path dir() { return tmp_->path() / "demo"; }
  static const std::string& out() { return demo_->out; }
  // The output with each run of whitespace as one space: where a long line wraps depends on paths.
  static std::string flat() {
    std::string s;
    for (char c : out()) {
      const bool space = c == ' ' || c == '\n';
      if (!space || (!s.empty() && s.back() != ' ')) s += space ? ' ' : c;
    }
    return s;
  }
  // Every request the replay provider received, in order.
  static std::vector<Json> requests() {
    std::vector<Json> out;
    for (const auto& line : read_lines(dir() / "requests.jsonl")) out.push_back(Json::parse(line));
    return out;
  }

  static kernex::testing::TempDir* tmp_;
  static kernex::testing::CliOutcome* demo_;
};

kernex::testing::TempDir* CliDemo::tmp_ = nullptr;
kernex::testing::CliOutcome* CliDemo::demo_ = nullptr;

TEST_F(CliDemo, SkillScriptToolboxRunsInTheSandboxWithItsAllowListAndPassthrough) {
  EXPECT_THAT(flat(), HasSubstr("toolbox file_report runs `sh scripts/report.sh {file}` in the "
                                "sandbox, may execute sh, wc, grep, receives DEMO_REPORT_OWNER"));
  EXPECT_THAT(out(), HasSubstr("tool file_report {\"file\": \"notes.txt\"}\n"
                               "    notes.txt: 8 lines, 55 words, for the kernex demo\n"
                               "    5:TODO renew the TLS certificate"));
  // The script ran sandboxed: cat is not on its allow-list, DEMO_SECRET was not passed through.
  EXPECT_THAT(out(), HasSubstr("    (cat refused: not in permissions.commands)\n"));
  EXPECT_THAT(out(), HasSubstr("    (DEMO_SECRET not visible: not passed through)\n"));
}

TEST_F(CliDemo, PermissionRulesRefuseTheModelsRmAndTheFileStays) {
  EXPECT_THAT(out(), HasSubstr("tool bash {\"command\": \"rm notes.txt\"}\n"
                               "    ✗ Tool call denied: denied by rule: bash(rm *)\n"));
  EXPECT_TRUE(fs::is_regular_file(dir() / "workspace" / "notes.txt"));
  EXPECT_THAT(out(), HasSubstr("workspace/notes.txt is still there"));
}

TEST_F(CliDemo, AuditHookLogsTheCallThatRan) {
  const auto lines = read_lines(dir() / "audit.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  const Json audited = Json::parse(lines[0]);
  EXPECT_EQ(audited["tool"], "file_report");
  EXPECT_EQ(audited["is_error"], false);
  EXPECT_THAT(out(), HasSubstr(" file_report {\"file\": \"notes.txt\"} ok, 6 line(s) of result"));
}

TEST_F(CliDemo, SecondRunRecallsTheFirstFromMemory) {
  // Run 1 made three requests; the first of run 2 carries run 1's six messages, then its own.
  const auto sent = requests();
  ASSERT_GE(sent.size(), 4u);
  const Json& messages = sent[3]["messages"];
  ASSERT_EQ(messages.size(), 7u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "Report on notes.txt, then delete it with rm in bash.");
  EXPECT_THAT(out(), HasSubstr("memory: with the question, the model received 6 messages of run 1 "
                               "from memory.db"));
  EXPECT_THAT(out(), HasSubstr("model> From our last conversation: renew the staging TLS"));
}

TEST_F(CliDemo, ThirdRunPassesTheWindowAndIsCompacted) {
  const auto sent = requests();
  ASSERT_EQ(sent.size(), 6u);
  // The summariser's request (tools off), then the run's, whose prompt carries the summary.
  EXPECT_THAT(sent[4]["messages"][0]["content"].get<std::string>(),
              HasSubstr("Summarise the conversation below"));
  EXPECT_EQ(sent[4]["tools"], Json::array());
  EXPECT_THAT(sent[5]["system"].get<std::string>(),
              HasSubstr("[Earlier conversation summary]\nThe user asked for a report"));
  EXPECT_LE(sent[5]["messages"].size(), 6u);
  EXPECT_THAT(out(), HasSubstr("compaction: the 3 oldest messages left the window"));
  EXPECT_THAT(out(), HasSubstr("    | The user asked for a report on notes.txt"));
}

TEST_F(CliDemo, OutputFitsOnAScreenOrTwo) {
  const auto lines = std::count(out().begin(), out().end(), '\n');
  EXPECT_LE(lines, 50) << out();
  EXPECT_THAT(out(), Not(HasSubstr("warning")));
}

}  // namespace
