// Issue 20's scenario (tests/support/code_tools_scenario.hpp): code fetches a 1.7 MB file from
// server-filesystem (npm, sandboxed), filters it and hands the 21 error lines to the server's
// write_file; the same task done by the model calling both tools itself runs beside it. The
// replay provider records every request the model received: in the code version the file never
// reaches the model, and the model is sent at least 90 % fewer tokens (estimated as bytes / 4 of
// each recorded request in both versions alike, see estimated_tokens).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "code_tools_scenario.hpp"
#include "kernex/trajectory_view.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
namespace sc = kernex::scenario;

const sc::Environment kEnv{KERNEX_NPM_DIR, KERNEX_NODE, KERNEX_PLUGIN_BUILD_DIR, KERNEX_SOURCE_DIR};

// Each version runs once per test process, when a test first asks for it: each moves 1.7 MB
// through node, the kernel and Python.
class CodeToolsScenario : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    code_.reset();
    direct_.reset();
    tmp_.reset();
  }
  static const sc::Outcome& code() { return run(code_, sc::Mode::CodeTools, "code"); }
  static const sc::Outcome& direct() { return run(direct_, sc::Mode::DirectCalls, "direct"); }

  // The run ended with the model's answer and wrote exactly the log's error lines.
  static void expect_done(const sc::Outcome& o) {
    ASSERT_TRUE(o.run) << o.run.error().describe();
    EXPECT_EQ(o.run->outcome, Outcome::EndTurn);
    EXPECT_EQ(o.run->text, "21 server errors, copied to errors.log.");
    for (const auto& call : o.run->tool_calls)
      EXPECT_FALSE(call.result.is_error) << call.call.name << ": " << call.result.content;
    EXPECT_EQ(o.written, o.log.errors);
    EXPECT_EQ(std::count(o.written.begin(), o.written.end(), '\n'), 21);
  }

 private:
  static const sc::Outcome& run(std::unique_ptr<sc::Outcome>& slot, sc::Mode mode,
                                const char* name) {
    if (!tmp_) tmp_ = std::make_unique<kernex::testing::TempDir>();
    if (!slot) slot = std::make_unique<sc::Outcome>(sc::run_scenario(kEnv, mode, *tmp_ / name));
    return *slot;
  }
  static inline std::unique_ptr<kernex::testing::TempDir> tmp_;
  static inline std::unique_ptr<sc::Outcome> code_, direct_;
};

TEST_F(CodeToolsScenario, CodeReadsFiltersAndWritesThroughTheMcpServer) {
  expect_done(code());
  ASSERT_TRUE(code().run);
  EXPECT_GT(code().log.bytes, 1'500'000u);
  EXPECT_EQ(code().run->result, (Json{{"errors", 21}, {"file", "errors.log"}}));
  // The model made one call (eval_code); the two MCP calls were made by its code, as children of
  // that code run, and the model got back only the line the code printed.
  ASSERT_EQ(code().run->tool_calls.size(), 1u);
  EXPECT_THAT(code().run->tool_calls[0].result.content,
              HasSubstr("bytes read; 21 errors written to errors.log"));
  auto events = read_trajectory(code().data_dir / "trajectories", "last");
  ASSERT_TRUE(events) << events.error().describe();
  std::vector<std::string> from_code;
  for (const auto& e : *events) {
    if (e["type"] == "tool_call" && e.contains("code_run")) from_code.push_back(e["name"]);
  }
  EXPECT_THAT(from_code, ElementsAre("filesystem__read_text_file", "filesystem__write_file"));
}

TEST_F(CodeToolsScenario, DirectCallsDoTheSameTaskWithTheFileInTheModelsContext) {
  expect_done(direct());
  ASSERT_TRUE(direct().run);
  ASSERT_EQ(direct().run->tool_calls.size(), 2u);
  // The check below can fail: here the log's middle line did reach the model.
  ASSERT_EQ(direct().requests.size(), 3u);
  EXPECT_THAT(direct().requests[1], HasSubstr(sc::kMiddleOfLog));
}

TEST_F(CodeToolsScenario, TheLargeDataNeverReachesTheModelFromCode) {
  ASSERT_EQ(code().requests.size(), 2u);
  EXPECT_THAT(code().requests, Each(Not(HasSubstr(sc::kMiddleOfLog))));
  // The pattern's skill was active: its instructions were in what the model received.
  EXPECT_THAT(code().requests[0], HasSubstr("# Calling tools from code"));
}

TEST_F(CodeToolsScenario, TheModelIsSentAtLeastNinetyPercentFewerTokens) {
  const auto from_code = sc::estimated_tokens(code().requests);
  const auto by_model = sc::estimated_tokens(direct().requests);
  ASSERT_GT(by_model, 0u);
  const double fewer =
      100.0 * (1.0 - static_cast<double>(from_code) / static_cast<double>(by_model));
  std::printf(
      "tokens to the model (bytes/4 of every recorded request): code %llu in %zu "
      "requests, direct %llu in %zu requests: %.2f %% fewer\n",
      static_cast<unsigned long long>(from_code), code().requests.size(),
      static_cast<unsigned long long>(by_model), direct().requests.size(), fewer);
  RecordProperty("code_tokens", std::to_string(from_code));
  RecordProperty("direct_tokens", std::to_string(by_model));
  EXPECT_GE(fewer, 90.0);
}

}  // namespace
}  // namespace kernex
