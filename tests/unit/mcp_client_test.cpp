// The MCP client against a scripted server (tests/unit/mcp/fake_server.py) run in the sandbox:
// handshake, pagination, result rendering, server->client requests, and the fault cases (a server
// that dies, hangs, writes garbage or an oversized line is a tool error, then restarted).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stop_token>
#include <thread>

#include "kernex/mcp/client.hpp"
#include "kernex/mcp/content.hpp"
#include "kernex/mcp/toolbox.hpp"
#include "proc_scan.hpp"
#include "temp_dir.hpp"

namespace {

using namespace kernex;
using namespace kernex::mcp;
using Clock = std::chrono::steady_clock;

const std::string kScript = KERNEX_SOURCE_DIR "/tests/unit/mcp/fake_server.py";

class McpClientTest : public ::testing::Test {
 protected:
  McpServer server(const std::string& mode, std::vector<std::string> extra = {}) {
    McpServer s;
    s.name = "fake";
    s.command = "python3";
    s.args = {script_.string(), mode};
    s.args.insert(s.args.end(), extra.begin(), extra.end());
    return s;
  }
  ServerSandbox sandbox() {
    ServerSandbox sb;
    sb.workspace = ws_.path();
    return sb;
  }
  ClientOptions fast() {
    ClientOptions o;
    o.request_timeout = std::chrono::milliseconds(1500);
    o.startup_timeout = std::chrono::milliseconds(20000);
    return o;
  }

  void SetUp() override {
    // The script lives in the workspace: the sandbox grants nothing of the source tree.
    std::ifstream in(kScript);
    std::stringstream text;
    text << in.rdbuf();
    script_ = ws_.write("fake_server.py", text.str());
  }

  kernex::testing::TempDir ws_;
  std::filesystem::path script_;
};

TEST_F(McpClientTest, HandshakeAndEveryPageOfTools) {
  McpClient client(server("ok"), sandbox(), fast());
  auto tools = client.list_tools();
  ASSERT_TRUE(tools) << tools.error().describe();
  std::vector<std::string> names;
  for (const auto& t : *tools) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"echo", "image", "fail", "fault",
                                             "env"}));  // nameless entry skipped
  EXPECT_EQ(client.protocol_version(), "2025-06-18");
  EXPECT_EQ(client.server_info().value("name", ""), "fake");
  EXPECT_EQ((*tools)[0].input_schema["properties"]["message"]["type"], "string");
  EXPECT_EQ((*tools)[1].input_schema, (Json{{"type", "object"}}));
}

TEST_F(McpClientTest, AcceptsTheOlderProtocolVersionAndRefusesUnknownOnes) {
  McpClient older(server("ok", {"2025-03-26"}), sandbox(), fast());
  ASSERT_TRUE(older.connect());
  EXPECT_EQ(older.protocol_version(), "2025-03-26");

  McpClient odd(server("ok", {"1999-01-01"}), sandbox(), fast());
  auto r = odd.connect();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("speaks MCP 1999-01-01"), std::string::npos)
      << r.error().message;
}

TEST_F(McpClientTest, TextAndStructuredContentAfterAnsweringThePing) {
  McpClient client(server("ok"), sandbox(), fast());
  auto r = client.call_tool("echo", Json{{"message", "hi"}});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_FALSE(r->rendered.is_error);
  EXPECT_EQ(r->rendered.text, "Echo: hi\n[structured content] {\"echo\":\"hi\"}");
  EXPECT_EQ(r->raw["structuredContent"]["echo"], "hi");
  EXPECT_EQ(r->rendered.structured, (Json{{"echo", "hi"}}));  // what code gets
}

// server-filesystem sends its text again as {"content": text}: the model gets it once, code the
// structured form.
TEST(McpContent, TextRepeatedInStructuredContentIsRenderedOnce) {
  const Json result = {{"content", {{{"type", "text"}, {"text", "line 1\nline 2"}}}},
                       {"structuredContent", {{"content", "line 1\nline 2"}}}};
  const auto rendered = render_call_result(result);
  EXPECT_EQ(rendered.text, "line 1\nline 2");
  EXPECT_EQ(rendered.structured, (Json{{"content", "line 1\nline 2"}}));
  const Json only = {{"content", Json::array()}, {"structuredContent", {{"n", 3}}}};
  EXPECT_EQ(render_call_result(only).text, "[structured content] {\"n\":3}");
  EXPECT_TRUE(render_call_result(Json{{"content", Json::array()}}).structured.is_null());
}

TEST_F(McpClientTest, ImagesLinksAndResourcesBecomeText) {
  McpClient client(server("ok"), sandbox(), fast());
  auto r = client.call_tool("image", Json::object());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->rendered.text,
            "[image image/png, 12 bytes base64: data:image/png;base64,iVBORw0KGgo=]\n"
            "[resource link: x.txt <file:///x.txt> (text/plain): a file]\n"
            "[resource mem://note (text/plain)]\nnote body");
}

TEST_F(McpClientTest, IsErrorAndJsonRpcErrors) {
  McpClient client(server("ok"), sandbox(), fast());
  auto failed = client.call_tool("fail", Json::object());
  ASSERT_TRUE(failed);
  EXPECT_TRUE(failed->rendered.is_error);
  EXPECT_EQ(failed->rendered.text, "it broke");
  auto unknown = client.call_tool("nope", Json::object());
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("-32602"), std::string::npos) << unknown.error().message;
  EXPECT_EQ(client.starts(), 1);  // an error answer is not a broken server
}

struct Fault {
  const char* mode;
  const char* expect;
};

class McpFault : public McpClientTest, public ::testing::WithParamInterface<Fault> {};

TEST_P(McpFault, IsAToolErrorAndTheServerRestartsOnTheNextCall) {
  ClientOptions opts = fast();
  opts.max_line_bytes = 64 * 1024;
  McpClient client(server(GetParam().mode), sandbox(), opts);
  ASSERT_TRUE(client.call_tool("echo", Json{{"message", "before"}}));
  const auto start = Clock::now();
  auto r = client.call_tool("fault", Json::object());
  const auto took = Clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Tool);
  EXPECT_NE(r.error().message.find(GetParam().expect), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("about to misbehave"), std::string::npos)
      << "stderr tail: " << r.error().message;
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_FALSE(client.running());

  auto again = client.call_tool("echo", Json{{"message", "after"}});
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->raw["structuredContent"]["echo"], "after");
  EXPECT_EQ(client.starts(), 2);
}

INSTANTIATE_TEST_SUITE_P(Faults, McpFault,
                         ::testing::Values(Fault{"die", "exited with status 3"},
                                           Fault{"hang", "did not answer tools/call in time"},
                                           Fault{"garbage", "not JSON-RPC"},
                                           Fault{"deep", "nests deeper than 128 levels"},
                                           Fault{"huge", "over the 65536-byte cap"}),
                         [](const auto& info) { return std::string(info.param.mode); });

TEST_F(McpClientTest, OnlyBaseDeclaredAndPassedThroughVariablesReachTheServer) {
  ::setenv("KERNEX_TEST_SECRET", "do-not-leak", 1);
  ::setenv("KERNEX_TEST_PASSED", "passed-through", 1);
  McpServer s = server("ok");
  s.env = {{"DECLARED_VAR", "declared"}};
  ServerSandbox sb = sandbox();
  sb.env_passthrough = {"KERNEX_TEST_PASSED"};
  McpClient client(s, sb, fast());
  auto r = client.call_tool("env", Json::object());
  ASSERT_TRUE(r) << r.error().describe();
  Json env = Json::parse(r->rendered.text);
  EXPECT_EQ(env.value("DECLARED_VAR", ""), "declared");
  EXPECT_EQ(env.value("KERNEX_TEST_PASSED", ""), "passed-through");
  EXPECT_FALSE(env.contains("KERNEX_TEST_SECRET"));
  for (const auto& [name, _] : env.items()) {
    static const std::set<std::string> allowed = {
        "PATH", "TMPDIR", "HOME",    "LANG",         "LANGUAGE",           "TZ",
        "TERM", "USER",   "LOGNAME", "DECLARED_VAR", "KERNEX_TEST_PASSED", "LC_CTYPE"};
    EXPECT_TRUE(allowed.contains(name) || name.starts_with("LC_")) << name;
  }
}

TEST_F(McpClientTest, HijackingDeclaredEnvIsRefused) {
  McpServer s = server("ok");
  s.env = {{"NODE_OPTIONS", "--require /tmp/x.js"}};
  McpClient client(s, sandbox(), fast());
  auto r = client.connect();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Sandbox);
  EXPECT_NE(r.error().describe().find("NODE_OPTIONS"), std::string::npos) << r.error().describe();
}

TEST_F(McpClientTest, TheServerCannotReadOutsideItsGrants) {
  // The client's own checks aside, the sandbox holds: the server is python, so ask it via a
  // tool that does not exist? No: run a tiny server that opens a file outside the workspace.
  kernex::testing::TempDir outside;
  auto secret = outside.write("secret.txt", "top secret");
  auto probe = ws_.write("probe.py",
                         "import sys\n"
                         "try:\n  open(sys.argv[1]).read(); sys.stdout.write('READ\\n')\n"
                         "except Exception as e:\n  "
                         "sys.stdout.write('{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,"
                         "\"message\":\"' + type(e).__name__ + '\"}}\\n')\n"
                         "sys.stdout.flush()\n");
  McpServer s;
  s.name = "probe";
  s.command = "python3";
  s.args = {probe.string(), secret.string()};
  McpClient client(s, sandbox(), fast());
  auto r = client.connect();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("PermissionError"), std::string::npos) << r.error().message;
}

TEST_F(McpClientTest, ToolboxPrefixesNamesAndDefersSchemasPastTheThreshold) {
  ToolboxConfig config;
  config.workspace = ws_.path();
  config.client = fast();
  config.search_threshold = 3;
  McpToolbox box(config);
  Context ctx;
  ctx.mcp_servers = {server("ok")};
  auto offered = box.list_tools(ctx);
  ASSERT_TRUE(offered) << offered.error().describe();
  ASSERT_EQ(offered->size(), 6u);
  EXPECT_EQ((*offered)[0].name, "search_tools");
  EXPECT_EQ((*offered)[1].name, "fake__echo");
  EXPECT_EQ((*offered)[1].parameters, (Json{{"type", "object"}}));

  auto found = box.execute(
      ctx, {}, ToolCall{"c1", "search_tools", Json{{"query", "echo message"}, {"detail", "full"}}});
  ASSERT_TRUE(found);
  Json hits = Json::parse(found->content);
  ASSERT_EQ(hits["matches"], 1);
  EXPECT_EQ(hits["tools"][0]["name"], "fake__echo");
  EXPECT_EQ(hits["tools"][0]["input_schema"]["properties"]["message"]["type"], "string");
  auto names = box.execute(
      ctx, {},
      ToolCall{"c2", "search_tools", Json{{"query", ""}, {"detail", "name"}, {"limit", 2}}});
  ASSERT_TRUE(names);
  EXPECT_EQ(Json::parse(names->content)["tools"],
            Json::parse(R"([{"name":"fake__echo"},{"name":"fake__env"}])"));
  auto bad = box.execute(
      ctx, {}, ToolCall{"c3", "search_tools", Json{{"query", "x"}, {"detail", "everything"}}});
  ASSERT_TRUE(bad);
  EXPECT_TRUE(bad->is_error);

  auto echoed =
      box.execute(ctx, {}, ToolCall{"c4", "fake__echo", Json{{"message", "via toolbox"}}});
  ASSERT_TRUE(echoed);
  EXPECT_FALSE(echoed->is_error);
  EXPECT_EQ(echoed->content.substr(0, 17), "Echo: via toolbox");
  auto unknown = box.execute(ctx, {}, ToolCall{"c5", "fake__missing", Json::object()});
  ASSERT_TRUE(unknown);
  EXPECT_TRUE(unknown->is_error);

  // Reused across runs: a second listing does not start the server again.
  ASSERT_TRUE(box.list_tools(ctx));
  EXPECT_EQ(box.client(ctx.mcp_servers[0])->starts(), 1);
}

TEST_F(McpClientTest, CancelKillsTheServerAndTheNextCallRestartsIt) {
  McpClient client(server("hang"), sandbox(), fast());
  ASSERT_TRUE(client.call_tool("echo", Json{{"message", "before"}}));
  std::stop_source source;
  Clock::time_point stopped_at;
  // Wherever the stop lands (before the request is written or while the server hangs), the call
  // ends cancelled at once.
  std::thread canceller([&] {
    stopped_at = Clock::now();
    source.request_stop();
  });
  auto r = client.call_tool("fault", Json::object(), source.get_token());
  const auto returned = Clock::now();
  canceller.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Cancelled) << r.error().message;
  EXPECT_LT(returned - stopped_at, std::chrono::milliseconds(250));
  EXPECT_FALSE(client.running());
  auto again = client.call_tool("echo", Json{{"message", "after"}});
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(client.starts(), 2);
}

TEST_F(McpClientTest, ToolboxKeepsAServerPerWorkspace) {
  ToolboxConfig config;
  config.workspace = ws_.path();
  config.client = fast();
  McpToolbox box(config);
  kernex::testing::TempDir a, b;
  McpServer s = server("ok");
  s.args = {"fake_server.py", "ok"};  // relative: each workspace's own copy, as its cwd
  std::vector<Context> runs(2);
  for (int i = 0; i < 2; ++i) {
    const auto& dir = i == 0 ? a : b;
    std::filesystem::copy_file(script_, dir.path() / "fake_server.py");
    runs[i].mcp_servers = {s};
    runs[i].workspace = dir.path();
    ASSERT_TRUE(box.list_tools(runs[i]));
    auto echoed = box.execute(runs[i], {}, ToolCall{"c", "fake__echo", Json{{"message", "hi"}}});
    ASSERT_TRUE(echoed);
    EXPECT_FALSE(echoed->is_error) << echoed->content;
  }
  auto in_a = box.client(s, a.path());
  auto in_b = box.client(s, b.path());
  EXPECT_NE(in_a, in_b);
  EXPECT_EQ(in_a->starts(), 1);
  EXPECT_EQ(in_b->starts(), 1);
  EXPECT_EQ(box.client(s)->starts(), 0);  // the configured workspace's server never started
  EXPECT_FALSE(kernex::testing::groups_working_in(a.path()).empty());
  EXPECT_FALSE(kernex::testing::groups_working_in(b.path()).empty());

  Context missing = runs[0];
  missing.workspace = a.path() / "not-made";
  auto refused = box.execute(missing, {}, ToolCall{"c", "fake__echo", Json{{"message", "hi"}}});
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->is_error);
  EXPECT_NE(refused->content.find("is not an existing directory"), std::string::npos)
      << refused->content;
}

// A skill shipping its MCP server (server.py next to SKILL.md, importing a module of its own and
// running a program of its own), loaded from a fresh folder outside the workspace and started the
// way `kernex run` and `kernex mcp call` start it: through McpToolbox with the skill's folder as
// the server's source_dir.
class SkillServer : public McpClientTest {
 protected:
  void SetUp() override {
    McpClientTest::SetUp();
    ship(skill_.path());
  }

  static void ship(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    for (const char* file : {"server.py", "greeting.py"})
      fs::copy_file(fs::path(KERNEX_SOURCE_DIR "/tests/unit/mcp/skill") / file, dir / file);
    fs::copy_file("/bin/echo", dir / "helper");
  }

  static McpServer declared(const std::filesystem::path& dir) {
    McpServer s;
    s.name = "skill";
    s.command = "python3";
    s.args = {"server.py"};  // relative: the file shipped in the skill folder
    s.source_dir = dir.string();
    return s;
  }

  Result<ToolResult> call(const std::filesystem::path& dir, const std::string& tool) {
    ToolboxConfig config;
    config.workspace = ws_.path();
    config.client = fast();
    McpToolbox box(config);
    Context run;
    run.mcp_servers = {declared(dir)};
    KERNEX_RETURN_IF_ERROR(box.list_tools(run));
    return box.execute(run, {}, ToolCall{"c", "skill__" + tool, Json::object()});
  }

  kernex::testing::TempDir skill_;
};

TEST_F(SkillServer, StartsFromItsSkillFolderAndReadsAndRunsWhatItShips) {
  auto greeted = call(skill_.path(), "greet");
  ASSERT_TRUE(greeted) << greeted.error().describe();
  EXPECT_FALSE(greeted->is_error) << greeted->content;
  EXPECT_EQ(greeted->content, "hello from the skill folder");
  auto ran = call(skill_.path(), "run_helper");
  ASSERT_TRUE(ran) << ran.error().describe();
  EXPECT_EQ(ran->content, "helper ran");
}

TEST_F(SkillServer, CannotWriteItsSkillFolder) {
  auto wrote = call(skill_.path(), "write_skill");
  ASSERT_TRUE(wrote) << wrote.error().describe();
  EXPECT_EQ(wrote->content.rfind("REFUSED ", 0), 0u) << wrote->content;
  EXPECT_FALSE(std::filesystem::exists(skill_.path() / "planted.txt"));
}

TEST_F(SkillServer, CannotWriteItsSkillFolderInsideTheWritableWorkspace) {
  const auto inside = ws_.path() / "skills" / "shipped";
  ship(inside);
  auto greeted = call(inside, "greet");
  ASSERT_TRUE(greeted) << greeted.error().describe();
  EXPECT_EQ(greeted->content, "hello from the skill folder");
  auto wrote = call(inside, "write_skill");
  ASSERT_TRUE(wrote) << wrote.error().describe();
  EXPECT_EQ(wrote->content.rfind("REFUSED ", 0), 0u) << wrote->content;
  EXPECT_FALSE(std::filesystem::exists(inside / "planted.txt"));
}

TEST(McpToolboxConfig, UnknownKeysAndBadTypesAreConfigErrors) {
  auto unknown = ToolboxConfig::from_json(Json{{"workspce", "/tmp"}});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::Config);
  EXPECT_NE(unknown.error().message.find("workspce"), std::string::npos);
  auto bad = ToolboxConfig::from_json(Json{{"servers", {{"fs", {{"network", "yes"}}}}}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("network"), std::string::npos) << bad.error().message;
  auto good = ToolboxConfig::from_json(
      Json{{"search_threshold", 5}, {"servers", {{"fs", {{"network", true}}}}}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->search_threshold, 5u);
  EXPECT_TRUE(good->servers.at("fs").network);
}

TEST(McpNames, ExposedNamesAreProviderSafe) {
  EXPECT_EQ(exposed_tool_name("files", "read_file"), "files__read_file");
  EXPECT_EQ(exposed_tool_name("my.server", "get sum"), "my_server__get_sum");
}

}  // namespace
