// Tools called from REPL code: every call goes back through the kernel as a model's call would
// (hooks, permission rules, the PII guard, the tool-call budget, the trajectory), results come back
// as Python values, and nothing a tool returns reaches the model unless the code prints it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernex/files.hpp"
#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/trajectory_view.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string eval_line(const std::string& code) {
  return Json{
      {"tool_calls", {{{"id", "m1"}, {"name", "eval_code"}, {"arguments", {{"code", code}}}}}},
      {"usage", {{"input_tokens", 100}, {"output_tokens", 10}}}}
      .dump();
}
std::string text_line(const std::string& text) {
  return Json{{"text", text}, {"usage", {{"input_tokens", 10}, {"output_tokens", 10}}}}.dump();
}

std::string slurp(const fs::path& p) {
  return kernex::read_regular_file(p, "test file", 64u << 20).value_or("");
}

class CodeTools : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(ws()); }
  fs::path ws() const { return dir_.path() / "ws"; }

  // A run whose model calls eval_code once with `code`, then answers "done".
  // `between`: script lines answered while the code runs (its llm_query).
  Result<RunResult> run_code(const std::string& code, const std::string& between = "",
                             Json repl_options = Json::object()) {
    std::ofstream(dir_.path() / "script.jsonl") << eval_line(code) << "\n"
                                                << between << text_line("done") << "\n";
    Json repl = {{"workspace", ws().string()}, {"timeout", 20}, {"offer", "always"}};
    repl.update(repl_options);
    config_.provider.name = "replay";
    config_.provider.config = {{"script", (dir_.path() / "script.jsonl").string()},
                               {"record", (dir_.path() / "requests.jsonl").string()}};
    config_.toolboxes = std::vector<PluginRef>{
        {"repl", repl}, {"builtin", Json::object()}, {"files", Json{{"workspace", ws().string()}}}};
    config_.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
    config_.pricing_file = fs::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    config_.data_dir = dir_.path() / "data";
    auto kernel = Kernel::create(config_);
    if (!kernel) return std::unexpected(kernel.error());
    return (*kernel)->run(Request::from_text("test", "go"), RunOptions{});
  }
  std::vector<Json> events(const std::string& type) {
    auto all = read_trajectory(dir_.path() / "data" / "trajectories", "last");
    EXPECT_TRUE(all) << all.error().describe();
    std::vector<Json> out;
    for (auto& e : all.value_or(std::vector<Json>{})) {
      if (e["type"] == type) out.push_back(e);
    }
    return out;
  }
  // The one code run's event (what the code printed, its error).
  Json code_run() {
    auto runs = events("code_run");
    EXPECT_EQ(runs.size(), 1u);
    return runs.empty() ? Json::object() : runs[0];
  }
  std::string printed() { return code_run().value("stdout", std::string()); }

  TempDir dir_;
  Config config_;
};

TEST_F(CodeTools, ResultsStayInCodeAndCallsAreChildrenOfTheCodeRun) {
  {
    std::ofstream data(ws() / "data.txt");
    for (int i = 0; i < 1500; ++i)
      data << "row " << i << (i % 500 == 7 ? " needle found here" : " filler text") << "\n";
  }
  auto r = run_code(
      "text = tools.read(file_path='data.txt')['content']\n"
      "rows = [l for l in text.splitlines() if 'needle' in l]\n"
      "count = tools.word_count(text='\\n'.join(rows))\n"
      "print(len(rows), type(count).__name__, count['words'])\n");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "done");
  const Json run = code_run();
  EXPECT_EQ(run["stdout"], "3 dict 15\n") << run.dump();
  EXPECT_EQ(run["tool_calls"], 2);

  // Both calls are recorded as children of that code run, after the kernel ran them.
  auto calls = events("tool_call");
  std::vector<std::string> from_code;
  for (const auto& c : calls) {
    if (c.contains("code_run")) {
      EXPECT_EQ(c["code_run"], run["id"]);
      from_code.push_back(c["name"]);
    }
  }
  EXPECT_EQ(from_code, (std::vector<std::string>{"read", "word_count"}));
  // `kernex logs show` names the code run a tool was called from.
  auto all = read_trajectory(dir_.path() / "data" / "trajectories", "last");
  ASSERT_TRUE(all);
  const std::string text = render_trajectory_text(*all);
  EXPECT_NE(text.find("tool_call 0 word_count from code " + run["id"].get<std::string>()),
            std::string::npos)
      << text;
  // The model saw what the code printed, never the file.
  const std::string requests = slurp(dir_.path() / "requests.jsonl");
  EXPECT_NE(requests.find("3 dict 15"), std::string::npos);
  EXPECT_EQ(requests.find("row 1200 filler"), std::string::npos);
}

TEST_F(CodeTools, PermissionRulesApplyToCallsFromCode) {
  config_.deny = {"word_count"};
  auto r = run_code(
      "try:\n"
      "    tools.word_count(text='a b')\n"
      "except ToolError as e:\n"
      "    print('refused', e.tool, e)\n"
      "print(tools.calculate(expression='6*7'))\n");
  ASSERT_TRUE(r) << r.error().describe();
  const std::string out = printed();
  EXPECT_NE(out.find("refused word_count Tool call denied"), std::string::npos) << out;
  EXPECT_NE(out.find("42"), std::string::npos) << out;
}

TEST_F(CodeTools, PiiGuardTokenizesResultsForCodeAndRestoresThemForTools) {
  std::ofstream(ws() / "contact.txt") << "write to alice.smith@example.com today\n";
  config_.hooks = {PluginRef{"pii", Json::object()}};
  auto r = run_code(
      "t = tools.read(file_path='contact.txt')['content']\n"
      "print(t)\n"
      "tools.write(file_path='copy.txt', content=t)\n");
  ASSERT_TRUE(r) << r.error().describe();
  const std::string out = printed();
  EXPECT_EQ(out.find("alice.smith@example.com"), std::string::npos) << out;
  EXPECT_NE(out.find("[EMAIL_1]"), std::string::npos) << out;
  // The tool got the real value back, as it would from the model.
  EXPECT_NE(slurp(ws() / "copy.txt").find("alice.smith@example.com"), std::string::npos);
  EXPECT_EQ(slurp(dir_.path() / "requests.jsonl").find("alice.smith@example.com"),
            std::string::npos);
}

TEST_F(CodeTools, TheToolCallBudgetCoversCallsFromCode) {
  config_.limits.budgets.tool_call_budget = 3;  // eval_code takes one
  auto r = run_code(
      "done = 0\n"
      "try:\n"
      "    for i in range(5):\n"
      "        tools.word_count(text='x')\n"
      "        done += 1\n"
      "except BudgetExceeded as e:\n"
      "    print('stopped after', done, '|', e)\n");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_NE(printed().find("stopped after 2 | Tool call not run: the run's tool-call budget of 3"),
            std::string::npos)
      << printed();
}

TEST_F(CodeTools, SubmittedResultIsTheRunsResult) {
  auto r = run_code("submit_result({'answer': 42, 'items': ['a', 'b']})\nprint('ok')");
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_TRUE(r->result.has_value());
  EXPECT_EQ(*r->result, (Json{{"answer", 42}, {"items", {"a", "b"}}}));
  EXPECT_EQ(to_json(*r)["result"]["answer"], 42);
  auto results = events("result");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0]["value"]["answer"], 42);
  EXPECT_EQ(results[0]["code_run"], code_run()["id"]);
  auto ends = events("run_end");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0]["result"]["items"][1], "b");
  auto all = read_trajectory(dir_.path() / "data" / "trajectories", "last");
  ASSERT_TRUE(all);
  EXPECT_NE(render_trajectory_text(*all).find("result 0 from 0/code1"), std::string::npos);
  // The model is told a result was submitted, not given it again.
  EXPECT_NE(slurp(dir_.path() / "requests.jsonl").find("result_submitted"), std::string::npos);
}

TEST_F(CodeTools, ListingHelpAndRefusals) {
  auto r = run_code(
      "names = [t['name'] for t in tools.list()]\n"
      "print('word_count' in names, 'read' in names, 'eval_code' in names)\n"
      "help(tools.word_count)\n"
      "for bad in ('eval_code', 'no_such_tool'):\n"
      "    try:\n"
      "        tools.call(bad)\n"
      "    except ToolError as e:\n"
      "        print('E', e)\n"
      "try:\n"
      "    tools.no_such_tool\n"
      "except AttributeError as e:\n"
      "    print('A', e)\n"
      "try:\n"
      "    tools.call(5)\n"
      "except TypeError as e:\n"
      "    print('T', e)\n");
  ASSERT_TRUE(r) << r.error().describe();
  const std::string out = printed();
  EXPECT_NE(out.find("True True False"), std::string::npos) << out;
  EXPECT_NE(out.find("Arguments (JSON Schema)"), std::string::npos) << out;
  EXPECT_NE(out.find("E eval_code is the REPL's own tool"), std::string::npos) << out;
  EXPECT_NE(out.find("E Unknown tool: no_such_tool"), std::string::npos) << out;
  EXPECT_NE(out.find("A no tool named 'no_such_tool'"), std::string::npos) << out;
  EXPECT_NE(out.find("T tools.call: the tool's name must be a str"), std::string::npos) << out;
}

// Outside a run (a host that gives the REPL no services) code has no tools, and says so.
// Code gets a tool's whole result, in its structured form: not the model's 30 000-byte view.
TEST_F(CodeTools, CodeGetsWholeStructuredResultsNeverTheModelsCut) {
  {
    std::ofstream big(ws() / "big.txt");
    for (int i = 0; i < 20000; ++i) big << "line " << i << (i % 100 == 0 ? " ERROR\n" : " ok\n");
  }
  std::ofstream(ws() / "b.md") << "b\n";
  auto r = run_code(
      "r = tools.read(file_path='big.txt')\n"
      "g = tools.glob(pattern='*.md')\n"
      "errors = sum(1 for l in r['content'].splitlines() if l.endswith(' ERROR'))\n"
      "print(sorted(r), r['lines'], r['truncated'], len(r['content']), errors)\n"
      "print(type(g).__name__, [p.rsplit('/', 1)[-1] for p in g])\n"
      "print(tools.read(file_path='b.md', offset=1, limit=1))\n");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(printed(),
            "['content', 'lines', 'truncated'] 20000 False " +
                std::to_string(fs::file_size(ws() / "big.txt")) +
                " 200\nlist ['b.md']\n{'lines': 1, 'truncated': False, 'content': 'b\\n'}\n")
      << code_run().dump();
}

// A large result goes straight into a buffer the worker names (from its second large result on),
// else through the pipe; either way whole. A buffer named wrongly (nothing mapped there, or
// smaller than said) only sends the text through the pipe.
TEST_F(CodeTools, LargeResultsArriveWholeThroughTheWorkersBufferOrThePipe) {
  auto r = run_code(
      "import __main__ as w\n"
      "def read_back(i, n):\n"
      "    line = ''.join(chr(97 + (i + k) % 26) for k in range(70)) + ' \\u00e9\\n'\n"
      "    text = (line * (n // len(line) + 1))[:n]\n"
      "    with open('f.txt', 'w', encoding='utf-8') as f:\n"
      "        f.write(text)\n"
      "    got = tools.read(file_path='f.txt')\n"
      "    lines = text.count('\\n') + (0 if text.endswith('\\n') else 1)\n"
      "    return got['content'] == text and got['lines'] == lines\n"
      "sizes = [300000, 5000000, 200000, 1000000, 300001]\n"
      "print([read_back(i, n) for i, n in enumerate(sizes)])\n"
      "print(w._direct[3] >= 5000000, bytes(w._direct[1][:3]) == b'efg')\n"
      "w._direct[2] = 4096\n"
      "print(read_back(7, 400000))\n"
      "import ctypes, mmap\n"
      "mm = mmap.mmap(-1, 2 << 20)\n"
      "at = ctypes.addressof(ctypes.c_char.from_buffer(mm))\n"
      "ctypes.CDLL(None).mprotect(ctypes.c_void_p(at + (1 << 20)), 1 << 20, 0)\n"
      "w._direct[:] = [mm, memoryview(mm), at, 64 << 20]\n"
      "print(read_back(8, 3000000), read_back(9, 500000))\n");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(printed(), "[True, True, True, True, True]\nTrue True\nTrue\nTrue True\n")
      << code_run().dump();
}

// Code calling tools from several threads: each call gets its own whole result (the worker's
// exchanges with the kernel take turns, large results and their buffer included).
TEST_F(CodeTools, ToolCallsFromThreadsEachGetTheirOwnResult) {
  auto r = run_code(
      "from concurrent.futures import ThreadPoolExecutor\n"
      "texts = {}\n"
      "for i in range(6):\n"
      "    texts[i] = (str(i) * 99 + '\\n') * (3000 if i % 2 else 10)\n"
      "    with open('t%d.txt' % i, 'w') as f:\n"
      "        f.write(texts[i])\n"
      "def check(k):\n"
      "    i = k % 6\n"
      "    return tools.read(file_path='t%d.txt' % i)['content'] == texts[i]\n"
      "with ThreadPoolExecutor(4) as pool:\n"
      "    print(all(pool.map(check, range(48))))\n");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(printed(), "True\n") << code_run().dump();
}

TEST_F(CodeTools, AResultPastTheCodesCapRaisesToolError) {
  std::ofstream(ws() / "big.txt") << std::string(5000, 'x') << "\n";
  auto r = run_code(
      "try:\n"
      "    tools.read(file_path='big.txt')\n"
      "except ToolError as e:\n"
      "    print(e.tool, 'tool_result_max_bytes' in str(e), '4096' in str(e))\n",
      "", Json{{"tool_result_max_bytes", 4096}});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(printed(), "read True True\n") << code_run().dump();
}

TEST_F(CodeTools, SubQueriesFromCodeAreChildrenOfTheCodeRun) {
  auto r = run_code("print(llm_query('what is up?'))\n", text_line("all fine") + "\n");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(printed(), "all fine\n");
  auto subs = events("sub_call");
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0]["code_run"], code_run()["id"]);
}

// checkpoint() keeps the REPL's picklable variables with the kernel, so the fresh worker that
// follows a timeout gets them back with restore().
TEST_F(CodeTools, CheckpointedVariablesSurviveATimedOutWorker) {
  const std::string second = Json{{"tool_calls",
                                   {{{"id", "m2"},
                                     {"name", "eval_code"},
                                     {"arguments", {{"code", "print(restore(), x, y)\n"}}}}}},
                                  {"usage", {{"input_tokens", 100}, {"output_tokens", 10}}}}
                                 .dump();
  auto r = run_code(
      "x = {'a': [1, 2]}\ny = 5\nf = lambda: 1\n"
      "print(checkpoint())\n"
      "import time\ntime.sleep(60)\n",
      second + "\n", Json{{"timeout", 2}});
  ASSERT_TRUE(r) << r.error().describe();
  auto runs = events("code_run");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["timed_out"], true) << runs[0].dump();
  EXPECT_EQ(runs[1]["stdout"], "['x', 'y'] {'a': [1, 2]} 5\n") << runs[1].dump();
}

TEST(CodeToolsOutsideARun, CodeIsToldThereAreNoTools) {
  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  auto box = host.create_toolbox("repl", Json{{"workspace", dir.path().string()}, {"timeout", 20}});
  ASSERT_TRUE(box) << box.error().describe();
  auto r = (*box)->execute(
      Context{}, RunHandles{},
      ToolCall{"c1",
               "eval_code",
               {{"code",
                 "print(tools.list())\ntry:\n    tools.call('read')\nexcept ToolError as e:\n"
                 "    print(e)\nsubmit_result([1, 2])"}}});
  ASSERT_TRUE(r) << r.error().describe();
  Json j = Json::parse(r->content);
  EXPECT_EQ(j["stdout"], "[]\nno tools can be called from code here\n") << j.dump();
  EXPECT_EQ(j["result"], Json::array({1, 2}));  // the host has no run to carry it
}

}  // namespace
}  // namespace kernex
