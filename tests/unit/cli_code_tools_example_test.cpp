// examples/code-tools against this build: its skill is valid, and its run does what the skill
// teaches: code reads a 1.7 MB log through a tool, filters it, writes the errors through another
// tool and submits the count, and the model receives a few KB, never the log.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::read_lines;
using kernex::testing::slurp;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const fs::path kExample = fs::path(KERNEX_SOURCE_DIR) / "examples/code-tools";

std::map<std::string, std::string> environment(const fs::path& home) {
  auto env = kernex::testing::clean_environment();
  env.erase("KERNEX_PLUGIN_PATH");
  env.erase("KERNEX_DATA_DIR");
  env["HOME"] = home.string();
  return env;
}

TEST(CodeToolsExample, SkillPassesLint) {
  kernex::testing::TempDir tmp;
  auto lint =
      kernex::testing::run_cli(tmp.path(), environment(tmp.path()),
                               {"skills", "lint", (kExample / "skills/code-tools").string()});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  EXPECT_THAT(lint.out, HasSubstr("code-tools: valid"));
}

TEST(CodeToolsExample, CodeFiltersTheLogAndTheModelNeverSeesIt) {
  kernex::testing::TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  auto run = kernex::testing::run_program("/bin/bash", tmp.path(), environment(tmp.path()),
                                          {(kExample / "run").string(), KERNEX_CLI, dir.string()});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("    what reached the model: 1711304 bytes read; 21 errors "
                                 "written to errors.log; first: ['2026-11-25T10:00:00Z host0"));
  EXPECT_THAT(run.out, HasSubstr("model> access.log holds 21 server errors"));

  const Json answer = Json::parse(slurp(dir / "run.json"));
  EXPECT_EQ(answer["result"], (Json{{"errors", 21}, {"file", "errors.log"}}));
  const auto errors = read_lines(dir / "workspace/errors.log");
  EXPECT_EQ(errors.size(), 21u);
  EXPECT_THAT(errors, Each(HasSubstr(" status=500 ")));

  // Two requests (the task; the code's printed line), the skill's instructions in them, the log
  // nowhere: its middle line is absent and all the requests together are ~1 % of its size.
  const auto requests = read_lines(dir / "requests.jsonl");
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[0], HasSubstr("# Calling tools from code"));
  EXPECT_THAT(requests, Each(Not(HasSubstr("req=r0010000"))));
  const std::string all = slurp(dir / "requests.jsonl");
  EXPECT_LT(all.size(), fs::file_size(dir / "workspace/access.log") / 20);
}

}  // namespace
