// The REPL toolbox plugin: a real python3 worker in the sandbox, driven directly through the
// plugin and end to end through the Kernel with the replay provider answering sub-queries.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <stop_token>
#include <thread>

#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/rlm.hpp"
#include "kernex/run_services.hpp"
#include "kernex/trajectory_view.hpp"
#include "eval_reply.hpp"
#include "proc_scan.hpp"
#include "session_only_services.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

Json parse(const ToolResult& r) {
  Json j = Json::parse(r.content, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.content;
  return j;
}

// Calls under different sessions get different REPLs, as calls of different runs do.
RunHandles in_session(std::string session) {
  RunHandles run;
  run.services = std::make_shared<kernex::testing::SessionOnlyServices>(std::move(session));
  return run;
}

class ReplToolbox : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(ws());
    host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
    auto box = host_.create_toolbox("repl", config());
    ASSERT_TRUE(box) << box.error().describe();
    repl_ = *box;
    run_ = in_session("s1");
  }
  virtual Json config() {
    return Json{
        {"workspace", ws().string()}, {"timeout", 20}, {"memory_mb", 512}, {"max_output", 4096}};
  }
  fs::path ws() const { return dir_ / "ws"; }

  ToolResult call(const std::string& name, Json args, const Context* in = nullptr,
                  const RunHandles* run = nullptr) {
    auto r = repl_->execute(in != nullptr ? *in : context_, run != nullptr ? *run : run_,
                            ToolCall{"c" + std::to_string(++calls_), name, std::move(args)});
    EXPECT_TRUE(r) << r.error().describe();
    return r.value_or(ToolResult{});
  }
  Json eval(const std::string& code, const Context* in = nullptr, const RunHandles* run = nullptr) {
    return parse(call("eval_code", {{"code", code}}, in, run));
  }

  TempDir dir_;
  PluginHost host_;
  std::shared_ptr<ToolExecutor> repl_;
  Context context_;
  RunHandles run_;
  int calls_ = 0;
};

TEST_F(ReplToolbox, ToolsAreOfferedOnlyWhenTheRunAllowsThem) {
  auto none = repl_->list_tools(context_);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  Context rlm;
  rlm.allowed_tools = rlm_tool_names();
  auto listed = repl_->list_tools(rlm);
  ASSERT_TRUE(listed);
  std::vector<std::string> names;
  for (const auto& t : *listed) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"load_context", "list_vars", "peek", "scan",
                                             "eval_code", "provide_answers"}));
}

// `tools: [eval_code]` offers the model eval_code alone ("code mode"); the others are refused
// when called anyway, and a name that is no REPL tool is a config error.
TEST_F(ReplToolbox, TheToolsOptionOffersOnlyTheToolsItNames) {
  auto box = host_.create_toolbox(
      "repl", Json{{"workspace", ws().string()}, {"offer", "always"}, {"tools", {"eval_code"}}});
  ASSERT_TRUE(box) << box.error().describe();
  auto listed = (*box)->list_tools(context_);
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "eval_code");
  // It goes with every request: short, pointing at where the rest of the API is written.
  EXPECT_LT((*listed)[0].description.size(), 400u) << (*listed)[0].description;
  EXPECT_NE((*listed)[0].description.find("servers/README.md"), std::string::npos);
  auto refused = (*box)->execute(context_, run_, ToolCall{"c1", "peek", {{"name", "x"}}});
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->is_error);
  EXPECT_NE(refused->content.find("`tools` option"), std::string::npos) << refused->content;
  auto ran = (*box)->execute(context_, run_, ToolCall{"c2", "eval_code", {{"code", "print(6*7)"}}});
  ASSERT_TRUE(ran);
  EXPECT_NE(ran->content.find("42"), std::string::npos) << ran->content;
  for (const Json& bad :
       {Json::array({"eval_code", "bash"}), Json::array(), Json("eval_code"), Json::array({1})}) {
    auto made = host_.create_toolbox("repl", Json{{"workspace", ws().string()}, {"tools", bad}});
    ASSERT_FALSE(made) << bad.dump();
    EXPECT_NE(made.error().describe().find("tools"), std::string::npos);
  }
}

TEST_F(ReplToolbox, LoadedContextIsReadByCodeAndStatePersists) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += "line " + std::to_string(i) + (i % 100 == 7 ? " ERROR disk full" : " ok") + "\n";
  Json loaded = parse(call("load_context", {{"name", "logs"}, {"text", text}}));
  EXPECT_EQ(loaded["line_count"], 1000);
  EXPECT_EQ(loaded["size"], text.size());

  Json first = eval("errors = [l for l in logs['lines'] if 'ERROR' in l]\nlen(errors)");
  EXPECT_EQ(first["stdout"], "10\n") << first.dump();
  EXPECT_FALSE(first.contains("error"));
  EXPECT_GE(first["wall_ms"].get<double>(), 0.0);
  EXPECT_TRUE(first.contains("cpu_ms"));
  // Null while the worker stays below the kernel's own peak RSS, which exec folds into its figure.
  ASSERT_TRUE(first.contains("peak_rss_kb"));
  EXPECT_TRUE(first["peak_rss_kb"].is_null() || first["peak_rss_kb"].get<long>() > 0);
  Json second = eval("def shout(s):\n    return s.upper()\nprint(shout(errors[0]))");
  EXPECT_EQ(second["stdout"], "LINE 7 ERROR DISK FULL\n");
  EXPECT_EQ(eval("print(shout('again'), logs['type'], logs['size'] > 0)")["stdout"],
            "AGAIN text True\n");

  Json hits = parse(call("scan", {{"name", "logs"}, {"pattern", "ERROR"}, {"max_hits", 2}}));
  EXPECT_EQ(hits["total"], 10);
  ASSERT_EQ(hits["hits"].size(), 2u);
  EXPECT_EQ(hits["hits"][1]["line"], 107);
  Json peek = parse(call("peek", {{"name", "logs"}, {"start", 5}, {"end", 7}}));
  EXPECT_EQ(peek["text"], "line 5 ok\nline 6 ok");
  Json vars = parse(call("list_vars", Json::object()));
  EXPECT_EQ(vars["variables"]["logs"]["type"], "context");
  EXPECT_EQ(vars["variables"]["errors"]["length"], 10);
  EXPECT_TRUE(vars["variables"].contains("shout"));
}

TEST_F(ReplToolbox, ErrorsAreResultsAndBadArgumentsAreRefused) {
  auto bad = call("eval_code", {{"code", "1/0"}});
  EXPECT_TRUE(bad.is_error);
  EXPECT_NE(parse(bad)["error"].get<std::string>().find("ZeroDivisionError"), std::string::npos);
  EXPECT_TRUE(call("eval_code", Json::object()).is_error);
  EXPECT_TRUE(call("load_context", {{"name", "x y"}, {"text", "t"}}).is_error);
  EXPECT_TRUE(call("load_context", {{"name", "x"}, {"text", "t"}, {"file", "f"}}).is_error);
  EXPECT_TRUE(call("peek", {{"name", "nothing"}}).is_error);
  EXPECT_TRUE(call("scan", {{"name", "nothing"}, {"pattern", "("}}).is_error);
  // SystemExit and writes to the protocol's fds do not end or confuse the worker.
  Json exited = eval("import os, sys\nos.write(1, b'noise\\n')\nsys.exit(3)");
  EXPECT_NE(exited["error"].get<std::string>().find("SystemExit"), std::string::npos);
  EXPECT_EQ(eval("print('still here')")["stdout"], "still here\n");
}

// The worker encodes and decodes with json's C scanner and encoder directly: text of every kind
// must come through both ways as the kernel sent it or as valid UTF-8.
TEST_F(ReplToolbox, ProtocolCarriesAnyText) {
  const std::string text = "h\u00e9llo \u2603 \U0001F600 \"q\" \\ tab\t nul\x01 \u2028";
  Json echoed = eval("s = " + Json(text).dump() + "\nprint(s, end='')\nlen(s)");
  EXPECT_FALSE(echoed.contains("error")) << echoed.dump();
  EXPECT_EQ(echoed["stdout"].get<std::string>().substr(0, text.size()), text);
  // A lone surrogate can't be UTF-8: it arrives replaced, and the worker keeps going.
  Json lone = eval("print('a\\udc80b', end='')");
  EXPECT_FALSE(lone.contains("error")) << lone.dump();
  EXPECT_EQ(lone["stdout"], "a?b");
  // Deferred queries carry the caller's model argument even when it isn't JSON (repr) or is a
  // cycle.
  Json odd = eval(
      "m = [1]\nm.append(m)\ntry:\n    llm_query('p', model=m)\nexcept RecursionError:\n    "
      "print('cycle refused')\n"
      "llm_query('p2', model=object())");
  EXPECT_NE(odd["stdout"].get<std::string>().find("cycle refused"), std::string::npos)
      << odd.dump();
  ASSERT_TRUE(odd["pending_queries"].is_array()) << odd.dump();
  EXPECT_NE(odd["pending_queries"].back()["model"].get<std::string>().find("object object"),
            std::string::npos);
  EXPECT_EQ(eval("print('still here')")["stdout"], "still here\n");
}

// eval_code's fast path passes the worker's value on as the content, so it must take only what is
// well-formed and of the usual shape, and leave everything else to the general path.
TEST(ReplEvalReply, UsualAnswersBecomeTheContentWithWallTime) {
  struct Case {
    const char* reply;
    bool is_error;
  };
  const Case cases[] = {
      {R"({"ok":true,"value":{"cpu_ms":0.004,"peak_rss_kb":null,"stdout":"hi\n","stderr":""}})",
       false},
      {R"({"ok":true,"value":{"cpu_ms":12.5,"peak_rss_kb":40960,"stdout":"}}","stderr":"w","error":"Traceback: x"}})",
       true},
      {R"({"ok":true,"value":{"stdout":"","pending_queries":[{"id":"q1","kind":"llm_query","prompt":"p","model":null}]}})",
       false},
      {R"({"ok":true,"value":{"stdout":"\u00e9\u2603 \"q\" \\"}})", false},
      {R"({"ok":true,"value":{ "cpu_ms" : 1 }})", false},
      {R"({"ok":true,"value":{}})", false},
      {R"({"ok":true,"value":{ }})", false},
      {R"({"ok":true,"value":{"pending_queries":[{"id":"q1","kind":"rlm_query","prompt":"p","context_size":3},{"id":"q2","model":true}]}})",
       false},
  };
  for (const auto& c : cases) {
    auto got = repl::eval_content(c.reply, 1.5);
    ASSERT_TRUE(got.has_value()) << c.reply;
    EXPECT_EQ(got->is_error, c.is_error) << c.reply;
    Json content = Json::parse(got->content, nullptr, false);
    ASSERT_TRUE(content.is_object()) << got->content;
    Json value = Json::parse(c.reply)["value"];
    value["wall_ms"] = 1.5;
    EXPECT_EQ(content, value) << got->content;
  }
}

TEST(ReplEvalReply, AnythingElseTakesTheGeneralPath) {
  const char* replies[] = {
      R"({"ok":false,"error":"ValueError: x"})",
      R"({"ok":true,"value":{"stdout":"a","stdout":"b"}})",        // a key twice
      R"({"ok":true,"value":{"stdout":"a","stdout_dropped":5}})",  // truncation: the kernel adds
                                                                   // the marker
      R"({"ok":true,"value":{"wall_ms":0}})",                      // the kernel's own field
      R"({"ok":true,"value":{"stdout":1}})",                       // wrong types
      R"({"ok":true,"value":{"cpu_ms":"1"}})",
      R"({"ok":true,"value":{"peak_rss_kb":"1"}})",
      R"({"ok":true,"value":{"error":null}})",
      R"({"ok":true,"value":{"pending_queries":{}}})",
      R"({"ok":true,"value":{"stdout":true}})",
      R"({"ok":true,"value":{"stdout":{}}})",
      R"({"ok":true,"value":{},"more":{}})",  // a third member
      R"({"ok":true,"ok":true,"value":{}})",
      R"({"ok":1,"value":{}})",
      R"({"ok":true,"value":{"stdout":"a"}}})",  // not JSON
      R"({"ok":true,"value":{"stdout":"a}})",
      R"({"ok":true,"value":{"stdout":"a"}} })",
      R"({"ok":true,"value":{"stdout":"a"},}})",
      "{\"ok\":true,\"value\":{\"stdout\":\"\xff\xfe\"}}",  // not UTF-8
      "{\"ok\":true,\"value\":{\"stdout\":\"a\nb\"}}",      // a raw control character
      R"({"ok":true,"value":[1,{}]})",
      R"({"call":"llm_query","prompt":"p"})",
      "",
      R"({"ok":true,"value": {}})",  // the value must start at once
      "{\"ok\":true,\"value\":\t{}}",
      R"({"ok":true,"value":{"pending_queries":[1]}})",  // items are flat objects
      R"({"ok":true,"value":{"pending_queries":[[]]}})",
      R"({"ok":true,"value":{"pending_queries":[{"id":"q1","id":"q2"}]}})",
      R"({"ok":true,"value":{"pending_queries":[{"id":"q1","extra":1}]}})",
      R"({"ok":true,"value":{"pending_queries":[{"id":"q1","model":[1]}]}})",
      R"({"ok":true,"value":{"pending_queries":[{"id":{"x":1}}]}})",
  };
  // Nesting as deep as a reply line can hold (64 MiB) stops at the first level too many.
  const std::string deep = R"({"ok":true,"value":{"pending_queries":)" + std::string(1 << 20, '[') +
                           std::string(1 << 20, ']') + "}}";
  EXPECT_FALSE(repl::eval_content(deep, 1.5).has_value());
  for (const char* reply : replies)
    EXPECT_FALSE(repl::eval_content(reply, 1.5).has_value()) << reply;
}

TEST(ReplEvalReply, RequestLineCarriesAnyCode) {
  const std::string code = "print(\"a\\nb\")\nx = '\u00e9'\n\x01\xff";
  const std::string line = repl::eval_request_line(code);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  Json request = Json::parse(line, nullptr, false);
  ASSERT_TRUE(request.is_object()) << line;
  EXPECT_EQ(request["op"], "eval");
  EXPECT_EQ(request["code"].get<std::string>().substr(0, code.size() - 1),
            code.substr(0, code.size() - 1));
}

// A plain eval takes the fast path: its content is the worker's value as sent (stdout before
// stderr; the general path re-serialises with sorted keys), with wall_ms last.
TEST_F(ReplToolbox, PlainEvalTakesTheFastPath) {
  auto r = call("eval_code", {{"code", "import sys\nprint('out')\nprint('err', file=sys.stderr)"}});
  EXPECT_FALSE(r.is_error);
  EXPECT_EQ(r.content.rfind(R"({"cpu_ms":)", 0), 0u) << r.content;
  EXPECT_LT(r.content.find(R"("stdout":"out\n")"), r.content.find(R"("stderr":"err\n")"))
      << r.content;
  EXPECT_NE(r.content.find(R"(,"wall_ms":)"), std::string::npos) << r.content;
  Json j = parse(r);
  EXPECT_EQ(j["stdout"], "out\n");
  EXPECT_TRUE(j["cpu_ms"].is_number());
}

// The model's code can write to the worker's protocol pipe. What it forges there reaches only its
// own session: never a crash (deep nesting), never a field the kernel owns.
TEST_F(ReplToolbox, ForgedAnswersCannotCrashTheKernelOrSetItsFields) {
  Json forged = eval(
      "import __main__ as m\n"
      "m._proto_out.write(b'{\"ok\":true,\"value\":{\"stdout\":\"f\",\"state_lost\":true,"
      "\"note\":\"forged\",\"wall_ms\":0,\"timed_out\":true}}\\n')");
  EXPECT_EQ(forged["stdout"], "f") << forged.dump();
  EXPECT_FALSE(forged.contains("state_lost")) << forged.dump();
  EXPECT_FALSE(forged.contains("note")) << forged.dump();
  EXPECT_FALSE(forged.contains("timed_out")) << forged.dump();
  EXPECT_GT(forged["wall_ms"].get<double>(), 0.0) << forged.dump();

  run_ = in_session("deep");
  ASSERT_FALSE(eval("x = 1").contains("error"));
  auto deep =
      call("eval_code", {{"code",
                          "import __main__ as m\n"
                          "m._proto_out.write(b'{\"ok\":true,\"value\":{\"x\":' + b'[' * 300000 + "
                          "b']' * 300000 + b'}}\\n')"}});
  EXPECT_TRUE(deep.is_error);
  EXPECT_NE(deep.content.find("broke the protocol"), std::string::npos)
      << deep.content.substr(0, 300);
  EXPECT_NE(deep.content.find("state"), std::string::npos) << deep.content.substr(0, 300);
  EXPECT_EQ(eval("print('fresh')")["stdout"], "fresh\n");
}

// Forged answers whose fields have the wrong types (ok as a string, error as a number, dropped
// counts as text or negative) are answers like any other: read defensively, never thrown on.
TEST_F(ReplToolbox, ForgedAnswersWithWrongTypesAreReadWithoutThrowing) {
  const char* forgeries[] = {
      R"({"ok":"yes","error":7})",
      R"({"ok":false,"error":{"x":1}})",
      R"([1,2,3])",
      R"({"ok":true,"value":{"stdout":5,"stdout_dropped":"many","stderr":"e","stderr_dropped":-3}})",
  };
  int n = 0;
  for (const char* forged : forgeries) {
    SCOPED_TRACE(forged);
    run_ = in_session("forged-" + std::to_string(++n));
    auto r = call("eval_code", {{"code", std::string("import __main__ as m\n"
                                                     "m._proto_out.write(b'") +
                                             forged + "\\n')"}});
    EXPECT_FALSE(r.content.empty());
    EXPECT_EQ(r.content.find("Tool failed"), std::string::npos) << r.content;
  }
  auto peek = call("peek", {{"name", "nothing"}});
  EXPECT_FALSE(peek.content.empty());
}

TEST_F(ReplToolbox, OutputIsCappedWithAVisibleMarker) {
  Json flood = eval("print('x' * 100000)");
  const std::string out = flood["stdout"];
  EXPECT_LT(out.size(), 4096u + 200u);
  EXPECT_NE(out.find("truncated"), std::string::npos) << out.substr(4000);
}

TEST_F(ReplToolbox, SessionsAreIsolated) {
  eval("secret = 'session one'");
  const RunHandles other = in_session("s2");
  Json there = eval("print(secret)", nullptr, &other);
  EXPECT_NE(there["error"].get<std::string>().find("NameError"), std::string::npos);
  EXPECT_EQ(eval("print(secret)")["stdout"], "session one\n");
}

TEST_F(ReplToolbox, FilesLoadFromTheWorkspaceOnlyAndGrantsOpenOthers) {
  std::ofstream(ws() / "data.csv") << "a,b\n1,2\n";
  fs::create_directories(dir_ / "outside");
  std::ofstream(dir_ / "outside" / "secret.txt") << "OUTSIDE";
  Json loaded = parse(call("load_context", {{"name", "table"}, {"file", "data.csv"}}));
  EXPECT_EQ(loaded["type"], "csv");
  EXPECT_EQ(loaded["line_count"], 2);
  auto refused =
      call("load_context", {{"name", "s"}, {"file", (dir_ / "outside" / "secret.txt").string()}});
  EXPECT_TRUE(refused.is_error);
  EXPECT_NE(refused.content.find("Permission"), std::string::npos) << refused.content;

  RunHandles granted = in_session("granted");
  granted.read_grants = {(dir_ / "outside" / "secret.txt").string()};
  Json ok = parse(call("load_context",
                       {{"name", "s"}, {"file", (dir_ / "outside" / "secret.txt").string()}},
                       nullptr, &granted));
  EXPECT_EQ(ok["size"], 7);
}

TEST_F(ReplToolbox, TheSandboxHoldsInsideTheRepl) {
  fs::create_directories(dir_ / "outside");
  std::ofstream(dir_ / "outside" / "secret.txt") << "OUTSIDE";
  ::setenv("KERNEX_TEST_SECRET", "secret-must-not-leak", 1);
  Json env = eval("import os\nprint(sorted(k for k in os.environ if 'SECRET' in k))");
  ::unsetenv("KERNEX_TEST_SECRET");
  EXPECT_EQ(env["stdout"], "[]\n");
  Json net = eval("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)");
  ASSERT_TRUE(net.contains("error")) << net.dump();
  EXPECT_NE(net["error"].get<std::string>().find("PermissionError"), std::string::npos)
      << net["error"];
  Json unix_socket = eval("import socket\nsocket.socket(socket.AF_UNIX)");
  EXPECT_TRUE(unix_socket.contains("error"));
  Json read = eval("open(" + Json((dir_ / "outside" / "secret.txt").string()).dump() + ").read()");
  EXPECT_NE(read["error"].get<std::string>().find("PermissionError"), std::string::npos);
  Json home = eval("import os\nopen(os.path.expanduser('~/.bashrc')).read()");
  EXPECT_TRUE(home.contains("error"));
  Json spawn = eval("import subprocess\nsubprocess.run(['/bin/cat', '/etc/hostname'])");
  EXPECT_NE(spawn["error"].get<std::string>().find("PermissionError"), std::string::npos)
      << spawn.dump();
  Json write = eval("open('made.txt', 'w').write('ok')");
  EXPECT_FALSE(write.contains("error")) << write.dump();
  EXPECT_TRUE(fs::exists(ws() / "made.txt"));
}

TEST_F(ReplToolbox, MemoryBombFailsTheCodeNotTheKernel) {
  Json bomb = eval("hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))");
  ASSERT_TRUE(bomb.contains("error")) << bomb.dump();
  EXPECT_NE(bomb["error"].get<std::string>().find("MemoryError"), std::string::npos) << bomb.dump();
  EXPECT_EQ(eval("del hog\nprint('alive')")["stdout"], "alive\n");
}

TEST_F(ReplToolbox, CrashLosesStateAndTheNextCallSaysSo) {
  eval("kept = 42");
  auto crashed =
      call("eval_code", {{"code", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"}});
  EXPECT_TRUE(crashed.is_error);
  Json c = parse(crashed);
  EXPECT_EQ(c["state_lost"], true);
  EXPECT_NE(c["error"].get<std::string>().find("signal 11"), std::string::npos) << c.dump();
  Json after = eval("print('kept' in globals())");
  EXPECT_EQ(after["stdout"], "False\n");
  EXPECT_EQ(after["state_lost"], true);
  EXPECT_NE(after["note"].get<std::string>().find("fresh REPL"), std::string::npos);
  EXPECT_FALSE(eval("print(1)").contains("state_lost"));  // told once
}

TEST_F(ReplToolbox, WorkersArePerWorkspace) {
  TempDir a, b;
  Context in_a = context_, in_b = context_;  // the same session, two workspaces
  in_a.workspace = a.path();
  in_b.workspace = b.path();
  Json first = eval(
      "import os\nmine = 'A'\nopen('made-here.txt', 'w').write('A')\nprint(os.getcwd())", &in_a);
  EXPECT_EQ(first["stdout"], fs::canonical(a.path()).string() + "\n") << first.dump();
  Json other = eval("import os\nprint('mine' in globals(), os.getcwd())", &in_b);
  EXPECT_EQ(other["stdout"], "False " + fs::canonical(b.path()).string() + "\n") << other.dump();
  EXPECT_EQ(eval("print(mine)", &in_a)["stdout"], "A\n");
  EXPECT_TRUE(fs::exists(a.path() / "made-here.txt"));
  EXPECT_FALSE(fs::exists(ws() / "made-here.txt"));
  // The workspace's worker can't read the configured workspace.
  std::ofstream(ws() / "private.txt") << "configured";
  Json denied =
      eval("print(open(" + Json((ws() / "private.txt").string()).dump() + ").read())", &in_a);
  EXPECT_TRUE(denied.contains("error")) << denied.dump();

  Context missing = context_;
  missing.workspace = a.path() / "not-made";
  auto refused = call("eval_code", {{"code", "print(1)"}}, &missing);
  EXPECT_TRUE(refused.is_error);
  EXPECT_NE(refused.content.find("is not an existing directory"), std::string::npos)
      << refused.content;
}

TEST_F(ReplToolbox, CancelKillsTheWorkerAtOnceAndTheNextCallStartsFresh) {
  eval("kept = 1");
  ASSERT_EQ(::mkfifo((ws() / "ready").c_str(), 0600), 0);
  std::stop_source source;
  Context run = context_;
  run.stop = source.get_token();
  std::set<pid_t> groups;
  std::chrono::steady_clock::time_point stopped_at;
  std::thread canceller([&] {
    std::ifstream ready(ws() / "ready");
    std::string word;
    ready >> word;
    groups = testing::groups_working_in(ws() / "busy");  // not the pool's idle workers in ws()
    stopped_at = std::chrono::steady_clock::now();
    source.request_stop();
  });
  auto r = call("eval_code",
                {{"code",
                  "import os, time\nos.mkdir('busy')\nos.chdir('busy')\n"
                  "open('../ready', 'w').write('go')\ntime.sleep(30)"}},
                &run);
  const auto returned = std::chrono::steady_clock::now();
  if (int fd = ::open((ws() / "ready").c_str(), O_WRONLY | O_NONBLOCK); fd >= 0) ::close(fd);
  canceller.join();
  EXPECT_TRUE(r.is_error);
  Json c = parse(r);
  EXPECT_EQ(c["cancelled"], true) << c.dump();
  EXPECT_EQ(c["state_lost"], true);
  const double back = std::chrono::duration<double, std::milli>(returned - stopped_at).count();
  EXPECT_LT(back, 250.0);
  ASSERT_FALSE(groups.empty());
  EXPECT_TRUE(testing::groups_gone_by(groups, stopped_at + std::chrono::milliseconds(250)));
  std::printf("[ measured ] REPL eval cancel returned after %.2f ms\n", back);
  Json after = eval("print('kept' in globals())");
  EXPECT_EQ(after["stdout"], "False\n");
  EXPECT_EQ(after["state_lost"], true);
}

class ReplTimeout : public ReplToolbox {
 protected:
  Json config() override { return Json{{"workspace", ws().string()}, {"timeout", 1.5}}; }
};

TEST_F(ReplTimeout, TimeoutKillsTheWorkerAndTheNextCallStartsFresh) {
  eval("kept = 1");
  auto slow = call("eval_code", {{"code", "while True:\n    pass"}});
  EXPECT_TRUE(slow.is_error);
  Json s = parse(slow);
  EXPECT_EQ(s["timed_out"], true);
  EXPECT_NE(s["error"].get<std::string>().find("timed out after 1.5 s"), std::string::npos)
      << s.dump();
  Json after = eval("print('kept' in globals())");
  EXPECT_EQ(after["stdout"], "False\n");
  EXPECT_EQ(after["state_lost"], true);
}

TEST_F(ReplToolbox, DeferredModeHandsQueriesBackAndAnswersBecomeVariables) {
  Json r =
      eval("a = llm_query('classify chunk 1')\nb = llm_query_batched(['x', 'y'])\nprint(a, b)");
  ASSERT_FALSE(r.contains("error")) << r.dump();
  ASSERT_EQ(r["pending_queries"].size(), 3u);
  EXPECT_EQ(r["pending_queries"][0]["id"], "q1");
  EXPECT_EQ(r["pending_queries"][0]["prompt"], "classify chunk 1");
  EXPECT_EQ(r["stdout"], "<<pending:q1>> ['<<pending:q2>>', '<<pending:q3>>']\n");
  Json stored =
      parse(call("provide_answers", {{"answers", {{"q1", "invoice"}, {"q3", "receipt"}}}}));
  EXPECT_EQ(stored["stored"], (Json{"q1", "q3"}));
  EXPECT_EQ(eval("print(q1, answers['q3'])")["stdout"], "invoice receipt\n");
  EXPECT_TRUE(call("provide_answers", {{"answers", {{"q1", 5}}}}).is_error);
}

// --- through the Kernel: sub-queries answered by the replay provider ---------------------------

std::string tool_line(const std::string& name, const Json& args, const std::string& match = "") {
  Json j = {{"tool_calls", {{{"id", "c-" + name}, {"name", name}, {"arguments", args}}}},
            {"usage", {{"input_tokens", 100}, {"output_tokens", 10}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump();
}
std::string text_line(const std::string& text, const std::string& match = "", int tokens = 10) {
  Json j = {{"text", text}, {"usage", {{"input_tokens", tokens}, {"output_tokens", tokens}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump();
}

class ReplKernel : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Kernel>> kernel(const std::vector<std::string>& lines,
                                         Limits limits = {}) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    std::ofstream(dir_ / "script.jsonl") << script;
    fs::create_directories(dir_ / "ws");
    Config config;
    config.provider.name = "replay";
    config.provider.config = {{"script", (dir_ / "script.jsonl").string()}};
    config.toolboxes = std::vector<PluginRef>{
        {"repl", Json{{"workspace", (dir_ / "ws").string()}, {"timeout", 20}}}};
    config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
    config.pricing_file = fs::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    config.data_dir = dir_ / "data";
    config.limits = limits;
    return Kernel::create(std::move(config));
  }
  std::vector<Json> events(const std::string& type) {
    auto all = read_trajectory(dir_ / "data" / "trajectories", "last");
    EXPECT_TRUE(all) << all.error().describe();
    std::vector<Json> out;
    for (auto& e : all.value_or(std::vector<Json>{})) {
      if (e["type"] == type) out.push_back(e);
    }
    return out;
  }
  TempDir dir_;
};

TEST_F(ReplKernel, RlmAnswersFromCodeWithLlmQueryAndBatchedSubCalls) {
  std::string log;
  for (int i = 0; i < 500; ++i)
    log += "req " + std::to_string(i) + (i % 50 == 0 ? " status=500" : " status=200") + "\n";
  auto k = kernel({
      tool_line("eval_code",
                {{"code",
                  "bad = [l for l in context['lines'] if 'status=500' in l]\n"
                  "kind = llm_query('classify: ' + bad[0])\n"
                  "more = llm_query_batched(['summarise: ' + b for b in bad[1:3]])\n"
                  "result = f'{len(bad)} failures, {kind}, ' + ' / '.join(more)\nprint(result)"}}),
      text_line("server error", "classify: req 0"),
      text_line("first", "summarise: req 50"),
      text_line("second", "summarise: req 100"),
      text_line("Done. FINAL_VAR(result)"),
  });
  ASSERT_TRUE(k) << k.error().describe();
  RlmOptions options;
  options.context_texts = {log};
  auto r = run_rlm(**k, "How many requests failed, and why?", options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "10 failures, server error, first / second");

  auto runs = events("code_run");
  ASSERT_EQ(runs.size(), 2u);  // the eval_code, then the driver printing FINAL_VAR
  EXPECT_EQ(runs[0]["stdout"], "10 failures, server error, first / second\n");
  EXPECT_EQ(runs[0]["span"], "0");
  auto subs = events("sub_call");
  ASSERT_EQ(subs.size(), 3u);
  for (const auto& s : subs) EXPECT_EQ(s["kind"], "llm_query");
  // The root model saw the variable's metadata, never its content.
  auto start = events("provider_call");
  ASSERT_FALSE(start.empty());
}

TEST_F(ReplKernel, DepthTwoRecursionRunsEachLevelInItsOwnRepl) {
  Limits limits;
  limits.max_depth = 2;
  auto k = kernel(
      {
          tool_line("eval_code",
                    {{"code", "r = rlm_query('sub question one', context='child text')"}}),
          tool_line("eval_code",
                    {{"code",
                      "leaf = rlm_query('leaf question', context=context['content'] + ' more')\n"
                      "out = 'sub:' + leaf"}},
                    "sub question one"),
          text_line("FINAL_VAR(out)", "sub question one"),
          tool_line("eval_code", {{"code", "deeper = rlm_query('too deep')"}}, "leaf question"),
          text_line("FINAL(leaf answer)", "leaf question"),
          text_line("FINAL_VAR(r)"),
      },
      limits);
  ASSERT_TRUE(k) << k.error().describe();
  auto r = run_rlm(**k, "root question", RlmOptions{});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "sub:leaf answer");
  auto runs = events("code_run");
  std::vector<std::string> spans;
  for (const auto& e : runs)
    spans.push_back(e["span"].get<std::string>() + "@" + std::to_string(e["depth"].get<int>()));
  EXPECT_NE(std::find(spans.begin(), spans.end(), "0.1.1@2"), spans.end());
  // Depth 2 may not recurse again: the call raised inside the code.
  bool refused = false;
  for (const auto& e : runs) {
    if (e["span"] == "0.1.1" && e.contains("error")) {
      refused = e["error"].get<std::string>().find("BudgetExceeded") != std::string::npos;
    }
  }
  EXPECT_TRUE(refused);
}

TEST_F(ReplKernel, TokenBudgetRunsOutInsideTheCode) {
  Limits limits;
  limits.budgets.token_budget = 300;
  auto k = kernel(
      {
          tool_line("eval_code",
                    {{"code",
                      "answers = []\ntry:\n    for i in range(10):\n"
                      "        answers.append(llm_query(f'chunk {i}'))\n"
                      "except BudgetExceeded as e:\n    print('stopped after', len(answers), e)"}}),
          text_line("a", "chunk 0", 50),
          text_line("b", "chunk 1", 50),
          text_line("c", "chunk 2", 50),
          text_line("d", "chunk 3", 50),
          text_line("e", "chunk 4", 50),
          text_line("FINAL(partial)"),
      },
      limits);
  ASSERT_TRUE(k) << k.error().describe();
  auto r = run_rlm(**k, "q", RlmOptions{});
  ASSERT_TRUE(r) << r.error().describe();
  auto runs = events("code_run");
  ASSERT_FALSE(runs.empty());
  const std::string out = runs[0]["stdout"];
  EXPECT_NE(out.find("stopped after"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens"), std::string::npos) << out;
}

TEST_F(ReplKernel, ToolCallBudgetCoversTheTree) {
  Limits limits;
  limits.budgets.tool_call_budget = 2;
  auto k = kernel(
      {
          tool_line("eval_code", {{"code", "a = 1"}}),
          tool_line("eval_code", {{"code", "b = 2"}}),
          tool_line("eval_code", {{"code", "c = 3"}}),
          text_line("FINAL(never)"),
      },
      limits);
  ASSERT_TRUE(k) << k.error().describe();
  auto r = run_rlm(**k, "q", RlmOptions{});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::BudgetTools);
  EXPECT_EQ(events("code_run").size(), 2u);
}

}  // namespace
}  // namespace kernex
