// `kernex rlm` end to end: a large generated log is loaded as `context` in the sandboxed REPL,
// the replayed model answers from code it runs there, and budgets stop a tree of sub-calls.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

using kernex::Json;
using Outcome = kernex::testing::CliOutcome;

std::string eval_line(const std::string& code, int tokens = 100) {
  return Json{
      {"tool_calls", {{{"id", "e"}, {"name", "eval_code"}, {"arguments", {{"code", code}}}}}},
      {"usage", {{"input_tokens", tokens}, {"output_tokens", 10}}}}
      .dump();
}
std::string text_line(const std::string& text, const std::string& match = "", int tokens = 10) {
  Json j = {{"text", text}, {"usage", {{"input_tokens", tokens}, {"output_tokens", tokens}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump();
}

class CliRlm : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_.erase("KERNEX_DATA_DIR");
    // 200 000 lines (~9 MB); every 997th request failed, and the model must count them with code.
    std::ofstream log(inputs_ / "big.log");
    for (int i = 0; i < 200'000; ++i) {
      log << "2026-11-25T10:00:00 host" << i % 7 << " req=" << i
          << " status=" << (i % 997 == 0 ? 500 : 200) << "\n";
    }
  }
  Outcome rlm(const std::string& script, std::vector<std::string> extra) {
    const auto path = work_.write("script.jsonl", script);
    std::vector<std::string> args = {"rlm",
                                     "--provider",
                                     "replay",
                                     "--provider-opt",
                                     "script=" + path.string(),
                                     "--data-dir",
                                     (data_ / "data").string(),
                                     "--context",
                                     (inputs_ / "big.log").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return kernex::testing::run_cli(work_.path(), env_, args);
  }

  kernex::testing::TempDir work_, inputs_,
      data_;  // the workspace holds neither the data dir nor the input
  std::map<std::string, std::string> env_;
};

TEST_F(CliRlm, AnswerComesFromCodeRunOverTheLoadedLog) {
  const std::string script =
      eval_line(
          "bad = [l for l in context['lines'] if 'status=500' in l]\n"
          "answer = f\"{len(bad)} of {context['line_count']} requests failed\"") +
      "\n" + text_line("FINAL_VAR(answer)") + "\n";
  auto r = rlm(script, {"--json", "How many requests failed?"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Json result = Json::parse(r.out);
  EXPECT_EQ(result["text"], "201 of 200000 requests failed");
  EXPECT_EQ(result["outcome"], "end_turn");
  // The prompt carried the log's metadata, not its content.
  auto show = kernex::testing::run_cli(
      work_.path(), env_,
      {"logs", "show", "last", "--json", "--data-dir", (data_ / "data").string()});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("line_count\\\":200000"), std::string::npos) << show.out.substr(0, 2000);
  EXPECT_EQ(show.out.find("req=123456 "), std::string::npos);
}

TEST_F(CliRlm, CostBudgetStopsTheTreeOfSubCalls) {
  // Priced model: every sub-query costs money; the budget runs out part-way through the loop.
  std::string script =
      eval_line(
          "done = 0\nfor chunk in range(50):\n    llm_query(f'read chunk {chunk}')\n    done += 1",
          1000) +
      "\n";
  for (int i = 0; i < 50; ++i)
    script += text_line("ok", "read chunk " + std::to_string(i), 1000) + "\n";
  script += text_line("FINAL(gave up)") + "\n";
  auto r =
      rlm(script, {"--model", "gpt-4o", "--cost-budget", "0.05", "--json", "Read every chunk."});
  Json result = Json::parse(r.out, nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << r.out << r.err;
  auto show = kernex::testing::run_cli(
      work_.path(), env_,
      {"logs", "show", "last", "--json", "--data-dir", (data_ / "data").string()});
  std::size_t sub_calls = 0;
  bool budget_in_code = false;
  std::istringstream lines(show.out);
  for (std::string line; std::getline(lines, line);) {
    Json e = Json::parse(line);
    if (e["type"] == "sub_call" && !e.contains("error")) ++sub_calls;
    if (e["type"] == "code_run" && e.contains("error")) {
      budget_in_code = e["error"].get<std::string>().find(
                           "BudgetExceeded: budget exhausted: cost") != std::string::npos;
    }
  }
  EXPECT_TRUE(budget_in_code) << show.out.substr(0, 4000);
  EXPECT_GT(sub_calls, 0u);
  EXPECT_LT(sub_calls, 50u);
  EXPECT_LE(result["cost_usd"].get<double>(), 0.05 + 0.02) << r.out;
}

// A configuration whose toolboxes leave out `repl` has no load_context: the error says what to add
// instead of only "Unknown tool".
TEST_F(CliRlm, ToolboxesWithoutReplSayToAddIt) {
  const auto config = work_.write("kernex.yaml", "memory: none\ntoolboxes: [files]\n");
  auto r = rlm(text_line("FINAL(none)") + "\n", {"--config", config.string(), "Count them."});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("load_context"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("add it to `toolboxes:`"), std::string::npos) << r.err;
}

}  // namespace
