// The agentic loop through the real Kernel, replay provider and builtin toolbox plugins.
#include <gtest/gtest.h>

#include <mutex>

#include "kernex/kernel.hpp"
#include "replay_config.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::read_lines;
using testing::TempDir;

std::string tool_line(const std::string& id, const std::string& name, const Json& args, int in = 10,
                      int out = 5) {
  return Json{{"tool_calls", {{{"id", id}, {"name", name}, {"arguments", args}}}},
              {"usage", {{"input_tokens", in}, {"output_tokens", out}}}}
      .dump();
}
std::string text_line(const std::string& text, int in = 10, int out = 5) {
  return Json{{"text", text}, {"usage", {{"input_tokens", in}, {"output_tokens", out}}}}.dump();
}

class Loop : public ::testing::Test {
 protected:
  Config config_for(const std::vector<std::string>& script_lines) {
    return testing::replay_builtin_config(dir, script_lines);
  }
  Result<RunResult> run(Config config, const RunOptions& options = {}) {
    KERNEX_ASSIGN_OR_RETURN(auto kernel, Kernel::create(std::move(config)));
    for (auto& h : hooks_) (kernel)->add_hook(h);
    return (kernel)->run(Request::from_text("tester", "count these words"), options);
  }
  std::vector<Json> recorded() {
    std::vector<Json> out;
    for (const auto& l : read_lines(dir / "record.jsonl")) out.push_back(Json::parse(l));
    return out;
  }

  TempDir dir;
  std::vector<std::shared_ptr<HookRunner>> hooks_;
};

TEST_F(Loop, ToolCallThenFinalAnswerEndsTurnWithSummedUsage) {
  auto r = run(config_for({tool_line("c1", "word_count", {{"text", "one two three"}}, 10, 5),
                           text_line("Three words.", 20, 7)}));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::EndTurn);
  EXPECT_EQ(r->turns, 2u);
  EXPECT_EQ(r->text, "Three words.");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].call.name, "word_count");
  EXPECT_FALSE(r->tool_calls[0].result.is_error);
  EXPECT_EQ(Json::parse(r->tool_calls[0].result.content)["words"], 3);
  EXPECT_EQ(r->usage.input_tokens, 30u);
  EXPECT_EQ(r->usage.output_tokens, 12u);

  // The tool result went back to the provider on the second request, after the call.
  auto requests = recorded();
  ASSERT_EQ(requests.size(), 2u);
  const Json& messages = requests[1]["messages"];
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0]["role"], "user");
  EXPECT_EQ(messages[1]["role"], "assistant");
  EXPECT_EQ(messages[1]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(messages[2]["role"], "tool");
  EXPECT_EQ(messages[2]["tool_result"]["call_id"], "c1");
  EXPECT_EQ(requests[0]["tools"].size(), 2u);  // calculate, word_count

  Json j = to_json(*r);
  EXPECT_EQ(j["outcome"], "end_turn");
  EXPECT_EQ(j["turns"], 2);
  EXPECT_EQ(j["tool_calls"][0]["name"], "word_count");
  EXPECT_EQ(j["usage"]["input_tokens"], 30);
}

TEST_F(Loop, SixtyToolCallsStopAtDefaultMaxTurns) {
  std::vector<std::string> lines;
  for (int i = 0; i < 60; ++i)
    lines.push_back(tool_line("c" + std::to_string(i), "calculate", {{"expression", "1+1"}}));
  auto r = run(config_for(lines));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::MaxTurns);
  EXPECT_EQ(r->turns, 50u);
  EXPECT_EQ(r->text, "");
  EXPECT_EQ(r->tool_calls.size(), 50u);
  EXPECT_EQ(recorded().size(), 50u);
}

TEST_F(Loop, MaxTurnsZeroMakesNoRequest) {
  RunOptions options;
  options.budgets.max_turns = 0;
  auto r = run(config_for({text_line("never")}), options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::MaxTurns);
  EXPECT_EQ(r->turns, 0u);
  EXPECT_TRUE(recorded().empty());
}

TEST_F(Loop, TokenBudgetIsCheckedAfterToolTurns) {
  RunOptions options;
  options.budgets.token_budget = 100;
  auto r = run(config_for({tool_line("a", "calculate", {{"expression", "2*3"}}, 60, 40),
                           text_line("unreached")}),
               options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::BudgetTokens);
  EXPECT_EQ(r->turns, 1u);
  EXPECT_EQ(r->text, "");
}

TEST_F(Loop, FinalAnswerIsReturnedEvenOverBudget) {
  RunOptions options;
  options.budgets.token_budget = 10;
  auto r = run(config_for({text_line("big answer", 500, 500)}), options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::EndTurn);
  EXPECT_EQ(r->text, "big answer");
}

TEST_F(Loop, DefectBudgetAccountingDiffersByProvider) {
  // kernex excluded cache reads from the budget for Anthropic only; here for every provider.
  RunOptions options;
  options.budgets.token_budget = 100;
  Json call = Json::parse(tool_line("a", "calculate", {{"expression", "1"}}, 10, 10));
  call["usage"]["cache_read_tokens"] = 1000;
  auto r = run(config_for({call.dump(), text_line("done", 10, 10)}), options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::EndTurn);
  EXPECT_EQ(r->usage.cache_read_tokens, 1000u);
}

TEST_F(Loop, CostBudgetStopsOnPricedModel) {
  RunOptions options;
  options.budgets.cost_budget_usd = 0.001;
  options.model = "gpt-4o";  // $2.5 / $10 per Mtok
  auto r = run(config_for({tool_line("a", "calculate", {{"expression", "1"}}, 1000, 0),
                           text_line("unreached")}),
               options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::BudgetCost);
  EXPECT_NEAR(r->usage.cost_usd, 0.0025, 1e-9);
}

TEST_F(Loop, ToolCallBudgetLeavesExtraCallsUnrun) {
  RunOptions options;
  options.budgets.tool_call_budget = 1;
  Json two{{"tool_calls",
            {{{"id", "a"}, {"name", "calculate"}, {"arguments", {{"expression", "1+1"}}}},
             {{"id", "b"}, {"name", "calculate"}, {"arguments", {{"expression", "2+2"}}}}}}};
  auto r = run(config_for({two.dump(), text_line("unreached")}), options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::BudgetTools);
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].result.content, "2");
  EXPECT_TRUE(r->tool_calls[1].result.is_error);
  EXPECT_NE(r->tool_calls[1].result.content.find("budget"), std::string::npos);
}

TEST_F(Loop, UnknownToolIsAnErrorResultAndTheLoopGoesOn) {
  auto r =
      run(config_for({tool_line("x", "no_such_tool", Json::object()), text_line("recovered")}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::EndTurn);
  EXPECT_EQ(r->tool_calls[0].result.content, "Unknown tool: no_such_tool");
  EXPECT_TRUE(r->tool_calls[0].result.is_error);
}

TEST_F(Loop, BadToolArgumentsComeBackAsToolErrors) {
  auto r =
      run(config_for({tool_line("x", "calculate", {{"expression", "(((1"}}), text_line("ok")}));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->tool_calls[0].result.is_error);
}

TEST_F(Loop, PermissionDenyBecomesToolError) {
  Config config =
      config_for({tool_line("x", "calculate", {{"expression", "rm -rf"}}), text_line("ok")});
  config.deny = {"Calculate(*rm*)"};
  auto r = run(std::move(config));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tool_calls[0].result.content, "Tool call denied: denied by rule: Calculate(*rm*)");
}

TEST_F(Loop, AllowListMustMatch) {
  Config config = config_for({tool_line("x", "calculate", {{"expression", "1"}}), text_line("ok")});
  config.allow = {"word_count"};
  auto r = run(std::move(config));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tool_calls[0].result.content,
            "Tool call denied: tool 'calculate' not in allow list");
}

TEST_F(Loop, ScriptRunningOutIsAProviderErrorNotACrash) {
  auto r = run(config_for({tool_line("x", "calculate", {{"expression", "1"}})}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().describe().find("no response left for request 2"), std::string::npos);
}

TEST_F(Loop, MalformedScriptNamesFileAndLine) {
  Config config = config_for({text_line("fine"), "{not json"});
  auto r = run(std::move(config));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Plugin);
  EXPECT_NE(r.error().describe().find("script.jsonl:2"), std::string::npos) << r.error().describe();
}

TEST_F(Loop, NoProviderIsAConfigError) {
  Config config;
  config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  auto r = run(std::move(config));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Config);
}

TEST_F(Loop, StreamSinkSeesEvents) {
  std::vector<StreamEvent::Kind> kinds;
  RunOptions options;
  options.sink = [&](const StreamEvent& e) { kinds.push_back(e.kind); };
  auto r = run(config_for({text_line("hello")}), options);
  ASSERT_TRUE(r);
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.front(), StreamEvent::Kind::TextDelta);
  EXPECT_EQ(kinds.back(), StreamEvent::Kind::Done);
}

// Records the order hooks are called in.
class RecordingHook : public HookRunner {
 public:
  RecordingHook(std::string name, std::vector<std::string>& log, std::string block = {})
      : name_(std::move(name)), log_(log), block_(std::move(block)) {}
  HookOutcome pre_tool(const HookScope&, ToolCall& call) override {
    log_.push_back(name_ + ".pre:" + call.name);
    if (!block_.empty() && call.name == block_)
      return HookOutcome::block("no " + block_ + " today");
    return HookOutcome::allow();
  }
  void post_tool(const HookScope&, const ToolCall& call, ToolResult&) override {
    log_.push_back(name_ + ".post:" + call.name);
  }
  void on_stop(const HookScope&, const std::string& text) override {
    log_.push_back(name_ + ".stop:" + text);
  }

 private:
  std::string name_;
  std::vector<std::string>& log_;
  std::string block_;
};

TEST_F(Loop, HooksRunInOrderAndBlockStopsLaterHooks) {
  std::vector<std::string> log;
  hooks_ = {std::make_shared<RecordingHook>("a", log, "word_count"),
            std::make_shared<RecordingHook>("b", log)};
  Json two{{"tool_calls",
            {{{"id", "1"}, {"name", "calculate"}, {"arguments", {{"expression", "1"}}}},
             {{"id", "2"}, {"name", "word_count"}, {"arguments", {{"text", "x"}}}}}}};
  auto r = run(config_for({two.dump(), text_line("fin")}));
  ASSERT_TRUE(r);
  EXPECT_EQ(log, (std::vector<std::string>{"a.pre:calculate", "b.pre:calculate", "a.post:calculate",
                                           "b.post:calculate", "a.pre:word_count", "a.stop:fin",
                                           "b.stop:fin"}));
  EXPECT_EQ(r->tool_calls[1].result.content, "Tool blocked by hook: no word_count today");
  EXPECT_TRUE(r->tool_calls[1].result.is_error);
}

// Puts a secret back into the arguments and redacts it from the result, as a PII guard would.
class RewritingHook : public HookRunner {
 public:
  HookOutcome pre_tool(const HookScope&, ToolCall& call) override {
    if (call.arguments.value("expression", "") == "<TOKEN_1>") call.arguments["expression"] = "6*7";
    return HookOutcome::allow();
  }
  void post_tool(const HookScope&, const ToolCall& call, ToolResult& result) override {
    seen_arguments = call.arguments;
    if (result.content == "42") result.content = "<NUMBER_1>";
  }
  Json seen_arguments;
};

TEST_F(Loop, HooksRewriteWhatTheToolGetsButNotTheModelsTranscript) {
  auto hook = std::make_shared<RewritingHook>();
  hooks_ = {hook};
  auto r = run(
      config_for({tool_line("1", "calculate", {{"expression", "<TOKEN_1>"}}), text_line("fin")}));
  ASSERT_TRUE(r);
  EXPECT_EQ(hook->seen_arguments["expression"], "6*7");
  EXPECT_EQ(r->tool_calls[0].call.arguments["expression"], "<TOKEN_1>");
  EXPECT_EQ(r->tool_calls[0].result.content, "<NUMBER_1>");
  const Json second = recorded()[1];
  EXPECT_EQ(second["messages"][1]["tool_calls"][0]["arguments"]["expression"], "<TOKEN_1>");
  EXPECT_EQ(second["messages"][2]["content"], "<NUMBER_1>");
}

TEST_F(Loop, OnStopIsNotFiredWhenALimitEndsTheRun) {
  std::vector<std::string> log;
  hooks_ = {std::make_shared<RecordingHook>("a", log)};
  RunOptions options;
  options.budgets.max_turns = 1;
  auto r = run(config_for({tool_line("1", "calculate", {{"expression", "1"}})}), options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, Outcome::MaxTurns);
  EXPECT_EQ(log, (std::vector<std::string>{"a.pre:calculate", "a.post:calculate"}));
}

TEST_F(Loop, AuditHookPluginWritesOneLinePerToolCall) {
  Config config = config_for({tool_line("1", "calculate", {{"expression", "6*7"}}),
                              tool_line("2", "word_count", {{"text", "a b"}}), text_line("done")});
  config.hooks.push_back(PluginRef{"audit", {{"file", (dir / "audit.jsonl").string()}}});
  auto r = run(std::move(config));
  ASSERT_TRUE(r) << r.error().describe();
  auto lines = read_lines(dir / "audit.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  Json first = Json::parse(lines[0]);
  EXPECT_EQ(first["tool"], "calculate");
  EXPECT_EQ(first["result"], "42");
  EXPECT_EQ(first["arguments"]["expression"], "6*7");
  EXPECT_FALSE(first["is_error"].get<bool>());
}

TEST_F(Loop, AuditHookWithoutFileIsAPluginErrorNamingIt) {
  Config config = config_for({text_line("x")});
  config.hooks.push_back(PluginRef{"audit", Json::object()});
  auto kernel = Kernel::create(std::move(config));
  ASSERT_FALSE(kernel);
  EXPECT_EQ(kernel.error().code, ErrorCode::Plugin);
  EXPECT_NE(kernel.error().describe().find("audit"), std::string::npos);
}

TEST_F(Loop, DefectAllowedToolsNotAFilter) {
  RunOptions options;
  options.allowed_tools = std::vector<std::string>{"word_count"};
  auto r = run(config_for({tool_line("1", "calculate", {{"expression", "1"}}), text_line("ok")}),
               options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tool_calls[0].result.content, "Unknown tool: calculate");
  auto requests = recorded();
  ASSERT_EQ(requests[0]["tools"].size(), 1u);
  EXPECT_EQ(requests[0]["tools"][0]["name"], "word_count");
}

TEST_F(Loop, EmptyAllowedToolsOffersNoTools) {
  RunOptions options;
  options.allowed_tools = std::vector<std::string>{};
  auto r = run(config_for({text_line("ok")}), options);
  ASSERT_TRUE(r);
  EXPECT_TRUE(recorded()[0]["tools"].empty());
}

TEST_F(Loop, DefectStreamingRecordsNoUsage) {
  // kernex's streaming path recorded no usage; here streaming and non-streaming runs sum alike.
  RunOptions options;
  options.sink = [](const StreamEvent&) {};
  auto r = run(config_for({tool_line("1", "calculate", {{"expression", "1"}}, 7, 3),
                           text_line("ok", 11, 2)}),
               options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->usage.input_tokens, 18u);
  EXPECT_EQ(r->usage.output_tokens, 5u);
}

}  // namespace
}  // namespace kernex
