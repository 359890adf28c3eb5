// Sub-calls from tools (llm_query, batched, rlm_query) through the real Kernel and replay
// provider: one budget over the tree, depth limits, spans, and the trajectory they leave.
// A small in-process toolbox plays the code that makes the calls; the REPL plugin's own suite
// drives the same services from Python.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "kernex/kernel.hpp"
#include "kernex/rlm.hpp"
#include "kernex/run_services.hpp"
#include "kernex/trajectory.hpp"
#include "kernex/trajectory_view.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::TempDir;

std::string tool_line(const std::string& name, const Json& args, int in = 10, int out = 5) {
  return Json{{"tool_calls", {{{"id", "c-" + name}, {"name", name}, {"arguments", args}}}},
              {"usage", {{"input_tokens", in}, {"output_tokens", out}}}}
      .dump();
}
std::string text_line(const std::string& text, int in = 10, int out = 5) {
  return Json{{"text", text}, {"usage", {{"input_tokens", in}, {"output_tokens", out}}}}.dump();
}
std::string answer_line(const std::string& match, const std::string& text, int in = 10,
                        int out = 5) {
  return Json{
      {"match", match}, {"text", text}, {"usage", {{"input_tokens", in}, {"output_tokens", out}}}}
      .dump();
}

// Tools that call back into the run: ask (llm_query), ask_many (batched), recurse (rlm_query),
// and the two REPL tools the rlm driver needs (load_context, eval_code printing a variable).
class CallbackToolbox final : public ToolExecutor {
 public:
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    return std::vector<ToolSpec>{{"ask", "", Json{{"type", "object"}}, {}},
                                 {"ask_many", "", Json{{"type", "object"}}, {}},
                                 {"recurse", "", Json{{"type", "object"}}, {}},
                                 {"load_context", "", Json{{"type", "object"}}, {}},
                                 {"eval_code", "", Json{{"type", "object"}}, {}}};
  }
  Result<ToolResult> execute(const Context&, const RunHandles& run, const ToolCall& call) override {
    ToolResult out{call.id, call.name, "", false};
    auto set = [&](const Result<std::string>& r) {
      out.content = r ? *r : r.error().describe();
      out.is_error = !r;
    };
    RunServices* services = run.services.get();
    if (services == nullptr) return fail(ErrorCode::Internal, "no services");
    seen_spans.push_back(services->span() + "@" + std::to_string(services->depth()));
    if (call.name == "ask")
      set(services->llm_query(call.arguments.at("prompt").get<std::string>(), std::nullopt));
    if (call.name == "ask_many") {
      auto answers = services->llm_query_batched(
          call.arguments.at("prompts").get<std::vector<std::string>>(), std::nullopt);
      for (const auto& a : answers)
        out.content += (out.content.empty() ? "" : "|") + (a ? *a : a.error().describe());
    }
    if (call.name == "recurse" || call.arguments.contains("recurse")) {
      std::optional<std::string> ctx;
      if (call.arguments.contains("context")) ctx = call.arguments["context"].get<std::string>();
      set(services->rlm_query(
          call.arguments.value("prompt", call.arguments.value("recurse", std::string())), ctx));
    }
    if (call.name == "load_context") {
      const std::string text = call.arguments.value("text", std::string("<file>"));
      vars[services->span() + "/" + call.arguments["name"].get<std::string>()] = text;
      out.content = Json{{"type", "str"}, {"size", text.size()}}.dump();
    }
    if (call.name == "eval_code" && !call.arguments.contains("recurse")) {
      // Only what the driver sends for FINAL_VAR: "_v = NAME\n..." -> prints the variable.
      const std::string code = call.arguments["code"];
      const std::string name = code.substr(5, code.find('\n') - 5);
      auto it = vars.find(services->span() + "/" + name);
      out.content = it == vars.end() ? Json{{"stdout", ""}, {"error", "NameError: " + name}}.dump()
                                     : Json{{"stdout", it->second}}.dump();
    }
    return out;
  }

  std::vector<std::string> seen_spans;
  std::map<std::string, std::string> vars;
};

class RunTree : public ::testing::Test {
 protected:
  Result<RunResult> run(const std::vector<std::string>& lines, RunOptions options = {},
                        Limits limits = {}) {
    KERNEX_ASSIGN_OR_RETURN(auto kernel, make_kernel(lines, limits));
    return (kernel)->run(Request::from_text("tester", "the question"), options);
  }
  Result<std::unique_ptr<Kernel>> make_kernel(const std::vector<std::string>& lines,
                                              Limits limits = {}) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()}};
    config.toolboxes = std::vector<PluginRef>{};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    config.data_dir = dir / "data";
    config.limits = limits;
    auto kernel = Kernel::create(std::move(config));
    if (kernel) (*kernel)->add_toolbox(toolbox);
    return kernel;
  }
  std::vector<Json> events(const std::string& type = "") {
    auto all = read_trajectory(dir / "data" / "trajectories", "last");
    EXPECT_TRUE(all) << all.error().describe();
    std::vector<Json> out;
    for (auto& e : all.value_or(std::vector<Json>{})) {
      if (type.empty() || e["type"] == type) out.push_back(e);
    }
    return out;
  }

  TempDir dir;
  std::shared_ptr<CallbackToolbox> toolbox = std::make_shared<CallbackToolbox>();
};

TEST_F(RunTree, LlmQueryFromAToolIsAnsweredByTheProviderChargedAndRecorded) {
  auto r = run({tool_line("ask", {{"prompt", "summarise chunk 7"}}),
                answer_line("chunk 7", "chunk 7 is about cats", 100, 20), text_line("Cats.")});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Cats.");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].result.content, "chunk 7 is about cats");
  EXPECT_FALSE(r->run_id.empty());

  auto subs = events("sub_call");
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0]["kind"], "llm_query");
  EXPECT_EQ(subs[0]["span"], "0.1");
  EXPECT_EQ(subs[0]["parent"], "0");
  EXPECT_EQ(subs[0]["depth"], 1);
  EXPECT_EQ(subs[0]["input_tokens"], 100);
  EXPECT_EQ(subs[0]["answer"], "chunk 7 is about cats");
  EXPECT_EQ(events("provider_call").size(), 2u);
  auto tools = events("tool_call");
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]["arguments"]["prompt"], "summarise chunk 7");
  auto end = events("run_end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["outcome"], "end_turn");
  EXPECT_EQ(end[0]["tree_input_tokens"], 120);  // two model calls of the run and the sub-query
  EXPECT_EQ(events("run_start").at(0)["run_id"], r->run_id);
}

TEST_F(RunTree, BatchedQueriesRunConcurrentlyAndAnswerInPromptOrder) {
  auto r =
      run({tool_line("ask_many", {{"prompts", {"part A", "part B", "part C", "part D", "part E"}}}),
           answer_line("part C", "c"), answer_line("part A", "a"), answer_line("part E", "e"),
           answer_line("part B", "b"), answer_line("part D", "d"), text_line("done")});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->tool_calls.at(0).result.content, "a|b|c|d|e");
  auto subs = events("sub_call");
  ASSERT_EQ(subs.size(), 5u);
  std::set<std::string> spans;
  for (const auto& s : subs) spans.insert(s["span"].get<std::string>());
  EXPECT_EQ(spans, (std::set<std::string>{"0.1", "0.2", "0.3", "0.4", "0.5"}));
}

TEST_F(RunTree, TokenBudgetCoversSubQueriesAndStopsTheRun) {
  Limits limits;
  limits.budgets.token_budget = 100;
  auto r =
      run({tool_line("ask", {{"prompt", "big one"}}, 10, 5), answer_line("big one", "x", 200, 10),
           tool_line("ask", {{"prompt", "never asked"}}), text_line("unreached")},
          {}, limits);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::BudgetTokens);  // the sub-query spent it, not the run's own calls
  EXPECT_EQ(r->turns, 1u);
}

TEST_F(RunTree, ExhaustedBudgetIsALimitErrorInsideTheTool) {
  Limits limits;
  limits.budgets.cost_budget_usd = 0.0;  // nothing may be spent: the first sub-query is refused
  RunOptions options;
  options.budgets.cost_budget_usd = 0.0;
  auto r = run({tool_line("ask", {{"prompt", "anything"}}), text_line("gave up")}, options, limits);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(r->tool_calls.at(0).result.is_error);
  EXPECT_NE(r->tool_calls.at(0).result.content.find("budget exhausted: cost"), std::string::npos)
      << r->tool_calls.at(0).result.content;
}

TEST_F(RunTree, RlmQueryPastMaxDepthIsRefused) {
  RunOptions options;
  options.max_depth = 0;
  auto r = run({tool_line("recurse", {{"prompt", "go deeper"}}), text_line("ok")}, options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_NE(r->tool_calls.at(0).result.content.find("budget exhausted: depth"), std::string::npos)
      << r->tool_calls.at(0).result.content;
}

TEST_F(RunTree, RlmRecursesTwoLevelsWithSpansDepthsAndOneTrajectory) {
  // Match lines route each request to its level: a sub-agent's messages hold its own prompt.
  auto matched = [](const std::string& match, const std::string& line) {
    Json j = Json::parse(line);
    j["match"] = match;
    return j.dump();
  };
  Limits limits;
  limits.max_depth = 2;
  auto kernel = make_kernel(
      {tool_line("eval_code", {{"recurse", "level one task"}, {"context", "ctx for one"}}),
       matched("level one task",
               tool_line("eval_code", {{"recurse", "level two task"}, {"context", "ctx for two"}})),
       matched("level two task", text_line("FINAL_VAR(context)")),
       matched("level one task", text_line("FINAL(one got: see below)")),
       text_line("FINAL(root done)")},
      limits);
  ASSERT_TRUE(kernel) << kernel.error().describe();
  RlmOptions options;
  auto r = run_rlm(**kernel, "root question", options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "root done");
  // The depth-2 sub-agent answered with its context variable's value.
  EXPECT_EQ(r->tool_calls.at(0).result.content, "one got: see below");

  auto subs = events("sub_call");
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0]["span"], "0.1.1");  // the deepest finishes first
  EXPECT_EQ(subs[0]["depth"], 2);
  EXPECT_EQ(subs[0]["kind"], "rlm_query");
  EXPECT_EQ(subs[0]["answer"], "ctx for two");
  EXPECT_EQ(subs[1]["span"], "0.1");
  EXPECT_EQ(subs[1]["parent"], "0");
  EXPECT_EQ(events("run_start").at(0)["kind"], "rlm");
  auto provider_calls = events("provider_call");
  std::set<std::string> spans;
  for (const auto& p : provider_calls) spans.insert(p["span"].get<std::string>());
  EXPECT_EQ(spans, (std::set<std::string>{"0", "0.1", "0.1.1"}));
}

TEST_F(RunTree, TrajectoriesCanBeSwitchedOffAndAListedRunRendersEscaped) {
  auto r = run({tool_line("ask", {{"prompt", "<script>alert('x')</script>"}}),
                answer_line("<script>", "</pre><img src=x onerror=alert(1)>"),
                text_line("done & dusted")});
  ASSERT_TRUE(r) << r.error().describe();
  auto listed = list_trajectories(dir / "data" / "trajectories");
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).run_id, r->run_id);
  EXPECT_EQ(listed->at(0).outcome, "end_turn");
  EXPECT_EQ(listed->at(0).question, "the question");

  auto html = render_trajectory_html(events());
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("done &amp; dusted"), std::string::npos);
  EXPECT_NE(render_trajectory_text(events()).find("sub_call 0.1"), std::string::npos);

  auto yaml = Config::parse_yaml("trajectories: false\nlimits: {max_depth: 3}\n", "test.yaml");
  ASSERT_TRUE(yaml) << yaml.error().describe();
  EXPECT_FALSE(yaml->trajectories);
  EXPECT_EQ(yaml->limits.max_depth, 3u);
  auto bad = Config::parse_yaml("trajectories: maybe\n", "test.yaml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("trajectories: expected true or false"), std::string::npos)
      << bad.error().message;
}

TEST(TrajectoryFile, EveryRunGetsAnIdOfItsOwnEvenWhenManyOpenInOneSecond) {
  // Ids carry 24 random bits per second; thousands of runs a second share a day segment, so two
  // runs of one id would read back as one: every id must still be unique, and no run gets a file.
  TempDir dir;
  std::set<std::string> ids;
  for (int i = 0; i < 3000; ++i) {
    auto t = open_trajectory(dir.path());
    ASSERT_TRUE(t) << t.error().describe();
    (*t)->record("run_start", {{"n", i}});
    ids.insert((*t)->run_id());
  }
  EXPECT_EQ(ids.size(), 3000u);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path()))
    files += entry.is_regular_file() ? 1 : 0;
  EXPECT_LE(files, 4u) << "a segment and its index (two if the day turned)";
  auto listed = list_trajectories(dir.path());
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), 3000u);
  for (const auto& run : *listed) EXPECT_EQ(run.events, 1u) << run.run_id;
}

TEST(RlmFinal, ParsesFinalAndFinalVarTheLastOneWinning) {
  EXPECT_FALSE(parse_final("no answer here"));
  auto a = parse_final("I think FINAL(42 apples) is it");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->is_variable);
  EXPECT_EQ(a->value, "42 apples");
  auto v = parse_final("Done.\nFINAL_VAR( result_1 )");
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->is_variable);
  EXPECT_EQ(v->value, "result_1");
  auto nested = parse_final("FINAL(f(x) = (a, b))");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->value, "f(x) = (a, b)");
}

}  // namespace
}  // namespace kernex
