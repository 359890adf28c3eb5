// The kernel's MCP client against the reference servers from npm (server-everything,
// server-filesystem) inside the sandbox, and `kernex mcp serve` driven by the official SDK client.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "kernex/mcp/client.hpp"
#include "kernex/mcp/toolbox.hpp"
#include "kernex/skills/loader.hpp"
#include "overlay_tool_run.hpp"
#include "temp_dir.hpp"

namespace {

using namespace kernex;
using namespace kernex::mcp;
namespace fs = std::filesystem;

const fs::path kModules = fs::path(KERNEX_NPM_DIR) / "node_modules";

McpServer node_server(const std::string& name, const std::string& package,
                      std::vector<std::string> extra) {
  McpServer s;
  s.name = name;
  s.command = KERNEX_NODE;
  s.args = {(kModules / "@modelcontextprotocol" / package / "dist" / "index.js").string()};
  s.args.insert(s.args.end(), extra.begin(), extra.end());
  return s;
}

ServerSandbox sandbox_for(const fs::path& workspace) {
  ServerSandbox sb;
  sb.workspace = workspace;
  sb.read_only = {kModules};
  return sb;
}

class Everything : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KERNEX_INTEROP_SECRET", "must-not-leak", 1);
    McpServer s = node_server("everything", "server-everything", {"stdio"});
    s.env = {{"DECLARED_FOR_TEST", "declared"}};
    client_ = std::make_unique<McpClient>(s, sandbox_for(ws_.path()));
  }
  kernex::testing::TempDir ws_;
  std::unique_ptr<McpClient> client_;
};

TEST_F(Everything, ListsItsTools) {
  auto tools = client_->list_tools();
  ASSERT_TRUE(tools) << tools.error().describe();
  std::set<std::string> names;
  for (const auto& t : *tools) names.insert(t.name);
  for (const char* expected :
       {"echo", "get-sum", "get-tiny-image", "get-structured-content", "get-env"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
  EXPECT_EQ(client_->protocol_version(), "2025-06-18");
}

TEST_F(Everything, EchoSumImageAndStructuredContent) {
  auto echo = client_->call_tool("echo", Json{{"message", "hello kernex"}});
  ASSERT_TRUE(echo) << echo.error().describe();
  EXPECT_EQ(echo->rendered.text, "Echo: hello kernex");
  auto sum = client_->call_tool("get-sum", Json{{"a", 2}, {"b", 40}});
  ASSERT_TRUE(sum);
  EXPECT_NE(sum->rendered.text.find("42"), std::string::npos) << sum->rendered.text;
  auto image = client_->call_tool("get-tiny-image", Json::object());
  ASSERT_TRUE(image);
  EXPECT_NE(image->rendered.text.find("[image image/png"), std::string::npos)
      << image->rendered.text;
  EXPECT_NE(image->rendered.text.find("data:image/png;base64,iVBOR"), std::string::npos);
  auto structured = client_->call_tool("get-structured-content", Json{{"location", "Chicago"}});
  ASSERT_TRUE(structured) << structured.error().describe();
  EXPECT_TRUE(structured->raw["structuredContent"].contains("temperature"))
      << structured->raw.dump();
  EXPECT_FALSE(structured->rendered.is_error);
  EXPECT_EQ(client_->starts(), 1);  // one server for every call
}

TEST_F(Everything, GetEnvSeesOnlyBaseAndDeclaredVariables) {
  auto env = client_->call_tool("get-env", Json::object());
  ASSERT_TRUE(env) << env.error().describe();
  Json vars = Json::parse(env->rendered.text);
  EXPECT_EQ(vars.value("DECLARED_FOR_TEST", ""), "declared");
  EXPECT_FALSE(vars.contains("KERNEX_INTEROP_SECRET"));
  static const std::set<std::string> allowed = {
      "PATH", "TMPDIR", "HOME", "LANG",    "LANGUAGE",
      "TZ",   "TERM",   "USER", "LOGNAME", "DECLARED_FOR_TEST"};
  for (const auto& [name, _] : vars.items())
    EXPECT_TRUE(allowed.contains(name) || name.starts_with("LC_")) << name;
}

// Declared by a skill: its permissions.env reaches the server, the kernel's other variables don't.
TEST(SkillDeclaredServer, RunsUnderTheSkillsPermissions) {
  kernex::testing::TempDir skills, ws;
  const fs::path index = kModules / "@modelcontextprotocol/server-everything/dist/index.js";
  fs::create_directories(skills.path() / "everything");
  std::ofstream(skills.path() / "everything" / "SKILL.md")
      << "---\nname: everything\ndescription: the reference MCP server\n"
      << "permissions: {commands: [node], env: [KERNEX_INTEROP_DECLARED]}\n"
      << "mcp: {everything: {command: " << KERNEX_NODE << ", args: [" << index.string()
      << ", stdio]}}\n---\n";
  auto skill = kernex::skills::load_skill(skills.path() / "everything");
  ASSERT_TRUE(skill) << skill.error().describe();
  ::setenv("KERNEX_INTEROP_SECRET", "must-not-leak", 1);
  ::setenv("KERNEX_INTEROP_DECLARED", "declared-by-skill", 1);
  auto config = ToolboxConfig::from_json(
      Json{{"workspace", ws.path().string()},
           {"servers", {{"everything", {{"read_only", {kModules.string()}}}}}}});
  ASSERT_TRUE(config) << config.error().describe();
  McpToolbox box(std::move(*config));
  Context context;
  context.mcp_servers = skill->mcp_servers;
  auto tools = box.list_tools(context);
  ASSERT_TRUE(tools) << tools.error().describe();
  auto env = box.execute(context, {}, ToolCall{"1", "everything__get-env", Json::object()});
  ::unsetenv("KERNEX_INTEROP_DECLARED");
  ASSERT_TRUE(env) << env.error().describe();
  ASSERT_FALSE(env->is_error) << env->content;
  Json vars = Json::parse(env->content);
  EXPECT_EQ(vars.value("KERNEX_INTEROP_DECLARED", ""), "declared-by-skill");
  EXPECT_FALSE(vars.contains("KERNEX_INTEROP_SECRET"));
}

class Filesystem : public ::testing::Test {
 protected:
  kernex::testing::TempDir ws_;
  kernex::testing::TempDir outside_;
};

TEST_F(Filesystem, ReadsAndWritesInsideTheWorkspace) {
  ws_.write("hello.txt", "hello from the workspace");
  McpClient client(node_server("filesystem", "server-filesystem", {ws_.path().string()}),
                   sandbox_for(ws_.path()));
  auto read = client.call_tool("read_text_file", Json{{"path", (ws_ / "hello.txt").string()}});
  ASSERT_TRUE(read) << read.error().describe();
  EXPECT_FALSE(read->rendered.is_error) << read->rendered.text;
  EXPECT_NE(read->rendered.text.find("hello from the workspace"), std::string::npos)
      << read->rendered.text;
  auto write = client.call_tool("write_file",
                                Json{{"path", (ws_ / "new.txt").string()}, {"content", "written"}});
  ASSERT_TRUE(write);
  EXPECT_FALSE(write->rendered.is_error) << write->rendered.text;
  std::ifstream in(ws_ / "new.txt");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "written");
}

TEST_F(Filesystem, OutsideTheWorkspaceFailsEvenThroughASymlinkAndWhenTheServerAllowsIt) {
  outside_.write("secret.txt", "outside secret");
  fs::create_directory_symlink(outside_.path(), ws_ / "link");
  // The server itself is told both directories are fine: only the sandbox stands in the way.
  McpClient client(node_server("filesystem", "server-filesystem",
                               {ws_.path().string(), outside_.path().string()}),
                   sandbox_for(ws_.path()));
  for (const fs::path& p : {outside_ / "secret.txt", ws_ / "link" / "secret.txt"}) {
    auto read = client.call_tool("read_text_file", Json{{"path", p.string()}});
    ASSERT_TRUE(read) << read.error().describe();
    EXPECT_TRUE(read->rendered.is_error) << p << ": " << read->rendered.text;
    EXPECT_EQ(read->rendered.text.find("outside secret"), std::string::npos) << read->rendered.text;
  }
  auto write = client.call_tool(
      "write_file", Json{{"path", (ws_ / "link" / "planted.txt").string()}, {"content", "x"}});
  ASSERT_TRUE(write);
  EXPECT_TRUE(write->rendered.is_error) << write->rendered.text;
  EXPECT_FALSE(fs::exists(outside_ / "planted.txt"));
}

struct SdkRun {
  int status = -1;
  std::string out;  // the script's JSON
  std::string err;  // the client's and kernex's stderr
};

// Runs tests/interop/<script> (an official SDK client) against `kernex mcp serve` configured by
// `yaml`, both in `dir` (the REPL's workspace).
SdkRun run_sdk_client(const std::string& script_name, const kernex::testing::TempDir& dir,
                      const std::string& yaml) {
  // ESM resolves packages next to the script, so it runs from the npm prefix.
  const fs::path script = fs::path(KERNEX_NPM_DIR) / ("kernex_" + script_name);
  fs::copy_file(fs::path(KERNEX_SOURCE_DIR "/tests/interop") / script_name, script,
                fs::copy_options::overwrite_existing);
  auto config = dir.write("kernex.yaml", yaml);
  const std::string cmd = "cd " + dir.path().string() + " && " + KERNEX_NODE + " " +
                          script.string() + " " + KERNEX_CLI + " mcp serve --config " +
                          config.string() + " 2>" + (dir / "stderr.txt").string();
  SdkRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), pipe)) run.out.append(buf, n);
  run.status = ::pclose(pipe);
  std::ifstream err(dir / "stderr.txt");
  run.err.assign(std::istreambuf_iterator<char>(err), {});
  return run;
}

TEST(KernexMcpServe, OfficialSdkClientListsAndCallsTools) {
  kernex::testing::TempDir dir;
  SdkRun run = run_sdk_client("sdk_client.mjs", dir, "toolboxes:\n  - name: builtin\n");
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  Json seen = Json::parse(run.out);
  EXPECT_EQ(seen["server"]["name"], "kernex");
  auto tools = seen["tools"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(tools.begin(), tools.end(), "kernex_run"), tools.end());
  EXPECT_NE(std::find(tools.begin(), tools.end(), "word_count"), tools.end());
  EXPECT_EQ(seen["word_count"]["isError"], false);
  EXPECT_NE(seen["word_count"]["content"][0]["text"].get<std::string>().find("\"words\":3"),
            std::string::npos);
  EXPECT_EQ(seen["unknown_tool_error"], -32602);
  EXPECT_EQ(seen["unknown_method_error"], -32601);
}

// The context kernel: a plain `toolboxes: [repl]` (no `offer`, no provider) offers the REPL's
// tools to an MCP client, keeps one REPL for its session, and hands llm_query to the client.
TEST(KernexMcpServe, OfficialSdkClientUsesTheReplAsAContextKernel) {
  kernex::testing::TempDir dir;
  SdkRun run = run_sdk_client("sdk_context_kernel.mjs", dir, "memory: none\ntoolboxes: [repl]\n");
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  Json seen = Json::parse(run.out);
  auto tools = seen["tools"].get<std::set<std::string>>();
  for (const char* name :
       {"kernex_run", "load_context", "list_vars", "peek", "scan", "eval_code", "provide_answers"})
    EXPECT_TRUE(tools.contains(name)) << name << " not offered: " << seen["tools"].dump();

  EXPECT_EQ(seen["load"]["isError"], false) << seen["load"].dump();
  EXPECT_EQ(seen["load"]["body"]["line_count"], 5);
  EXPECT_EQ(seen["peek"]["isError"], false) << seen["peek"].dump();
  EXPECT_EQ(seen["peek"]["body"]["text"], "ERROR disk full\nINFO retry") << seen["peek"].dump();
  EXPECT_EQ(seen["scan"]["isError"], false) << seen["scan"].dump();
  const Json& hits = seen["scan"]["body"]["hits"];
  ASSERT_EQ(hits.size(), 2u) << seen["scan"].dump();
  EXPECT_EQ(hits[0], (Json{{"line", 1}, {"text", "ERROR disk full"}}));
  EXPECT_EQ(hits[1], (Json{{"line", 3}, {"text", "ERROR disk still full"}}));

  // The code's llm_query comes back as a pending query for the client to answer.
  const Json& ask = seen["ask"];
  EXPECT_EQ(ask["isError"], false) << ask.dump();
  EXPECT_EQ(ask["body"]["stdout"], "2\n");
  ASSERT_EQ(ask["body"]["pending_queries"].size(), 1u) << ask.dump();
  const Json& query = ask["body"]["pending_queries"][0];
  EXPECT_EQ(query["kind"], "llm_query");
  EXPECT_EQ(query["prompt"], "Summarise: ERROR disk full | ERROR disk still full");
  const std::string id = query["id"].get<std::string>();
  ASSERT_FALSE(id.empty());

  // The answer is a variable named by the query's id and an entry of `answers`; `errors`, set by
  // the earlier call, is still there.
  EXPECT_EQ(seen["answer"]["isError"], false) << seen["answer"].dump();
  EXPECT_EQ(seen["answer"]["body"]["stored"], Json::array({id})) << seen["answer"].dump();
  EXPECT_EQ(seen["read"]["isError"], false) << seen["read"].dump();
  EXPECT_EQ(seen["read"]["body"]["stdout"], "the disk is full / the disk is full / 2\n")
      << seen["read"].dump();
}

// Issue 33: submit_result's value reaches an MCP client, and a notifications/cancelled for a
// running eval_code stops it (the REPL's worker is killed and the next call starts a fresh one),
// so the next call does not wait out the old one's minute of sleep.
TEST(KernexMcpServe, OfficialSdkClientGetsSubmittedResultsAndCancelsARunningCall) {
  kernex::testing::TempDir dir;
  SdkRun run = run_sdk_client("sdk_cancel_submit.mjs", dir, "memory: none\ntoolboxes: [repl]\n");
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  Json seen = Json::parse(run.out);
  EXPECT_EQ(seen["submit"]["isError"], false) << seen["submit"].dump();
  EXPECT_EQ(seen["submit"]["body"]["result"], (Json{{"answer", 42}, {"items", {"a"}}}))
      << seen["submit"].dump();
  EXPECT_EQ(seen["submit"]["body"]["stdout"], "done\n");
  // A call without submit_result carries no stale result.
  EXPECT_FALSE(seen["set"]["body"].contains("result")) << seen["set"].dump();
  EXPECT_EQ(seen["long"], "aborted");
  EXPECT_EQ(seen["next"]["isError"], false) << seen["next"].dump();
  EXPECT_EQ(seen["next"]["body"]["stdout"], "next\n") << seen["next"].dump();
  // The old REPL was stopped, not waited for: its state is gone and the answer says so.
  EXPECT_TRUE(seen["next"]["body"].contains("note")) << seen["next"].dump();
  // Stop (<= 250 ms) plus a fresh REPL's start, far from the 60 s the old call would take.
  EXPECT_LT(seen["next_ms"].get<int>(), 5000) << seen.dump();
  std::cout << "cancel to next answer: " << seen["next_ms"] << " ms\n";
}

// Overlay mode (issue "Overlay workspace"): a server of the run writes through the overlay like
// every other tool process, the files tools see what it wrote and it sees theirs, and the real tree
// stays byte for byte unchanged.
TEST(OverlayWorkspace, McpServerWritesIntoTheUpperLayer) {
  kernex::testing::OverlayDirs dirs;
  if (auto why = dirs.overlay_unavailable(); !why.empty()) GTEST_SKIP() << why;
  std::ofstream(dirs.ws() / "a.txt") << "alpha\n";
  const auto before = kernex::testing::tree_snapshot(dirs.ws());
  auto source = std::make_shared<kernex::testing::FixedTools>(
      std::vector<Toolbox>{},
      std::vector<McpServer>{node_server("filesystem", "server-filesystem", {dirs.ws().string()})});
  const Json mcp = {{"workspace", dirs.ws().string()},
                    {"servers", {{"filesystem", {{"read_only", {kModules.string()}}}}}}};
  const std::string seed = (dirs.ws() / "seed.txt").string();
  auto calls = kernex::testing::run_tools_in_overlay(
      dirs, {{"files", Json{{"workspace", dirs.ws().string()}}}, {"mcp", mcp}},
      {{"write", {{"file_path", "seed.txt"}, {"content", "seed from files"}}},
       {"filesystem__read_text_file", {{"path", seed}}},
       {"filesystem__write_file",
        {{"path", (dirs.ws() / "mcp.txt").string()}, {"content", "from mcp"}}},
       {"filesystem__write_file", {{"path", seed}, {"content", "seed from mcp"}}},
       {"read", {{"file_path", "mcp.txt"}}},
       {"bash", {{"command", "cat seed.txt"}}}},
      source);
  ASSERT_TRUE(calls) << calls.error().describe();
  const auto results = kernex::testing::results_of(*calls);
  ASSERT_EQ(results.size(), 6u);
  for (const auto& c : *calls) EXPECT_FALSE(c.value("is_error", false)) << c.dump();
  EXPECT_NE(results[1].find("seed from files"), std::string::npos) << results[1];
  EXPECT_NE(results[4].find("from mcp"), std::string::npos) << results[4];
  EXPECT_EQ(results[5], "seed from mcp");
  EXPECT_EQ(kernex::testing::tree_snapshot(dirs.ws()), before);
  EXPECT_EQ(kernex::testing::file_text(dirs.upper() / "mcp.txt"), "from mcp");
  EXPECT_EQ(kernex::testing::file_text(dirs.upper() / "seed.txt"), "seed from mcp");
}

}  // namespace
