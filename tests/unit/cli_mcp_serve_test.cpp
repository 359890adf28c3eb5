// `kernex mcp serve` as a context kernel: the REPL's tools offered to an MCP client whenever the
// repl toolbox is configured, and the tools its code may call (ServeTools, ServeRunServices).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "mcp_serve_tools.hpp"
#include "temp_dir.hpp"

namespace {

using namespace kernex;
using kernex::cli::ServeRunServices;
using kernex::cli::ServeTools;

// Speaks MCP to `kernex mcp serve --config <yaml>` (the REPL working in `dir`): initialize, then
// `requests` (methods with params) with ids 2, 3, ...; returns the responses by id.
std::map<int, Json> serve(const kernex::testing::TempDir& dir, const std::string& yaml,
                          const std::vector<std::pair<std::string, Json>>& requests) {
  auto config = dir.write("kernex.yaml", yaml);
  std::ostringstream in;
  in << Json{{"jsonrpc", "2.0"},
             {"id", 1},
             {"method", "initialize"},
             {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()}}}}
            .dump()
     << "\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
  int id = 2;
  for (const auto& [method, params] : requests)
    in << Json{{"jsonrpc", "2.0"}, {"id", id++}, {"method", method}, {"params", params}}.dump()
       << '\n';
  auto input = dir.write("in.jsonl", in.str());
  auto env = kernex::testing::clean_environment();
  env["KERNEX_DATA_DIR"] = (dir / "data").string();
  const std::string cmd = "cd '" + dir.path().string() + "' && exec '" + KERNEX_CLI +
                          "' mcp serve --config '" + config.string() + "' < '" + input.string() +
                          "'";
  auto outcome = kernex::testing::run_program("/bin/sh", dir.path(), env, {"-c", cmd});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
  std::map<int, Json> responses;
  std::istringstream lines(outcome.out);
  for (std::string line; std::getline(lines, line);) {
    Json response = Json::parse(line);
    responses[response["id"].get<int>()] = response;
  }
  return responses;
}

Json call(const std::string& tool, Json arguments) {
  return Json{{"name", tool}, {"arguments", std::move(arguments)}};
}

std::string text_of(const Json& response) {
  return response["result"]["content"][0]["text"].get<std::string>();
}

// A plain `toolboxes: [repl]` (either spelling) offers the REPL's tools, with schemas a client
// accepts, and its calls share one REPL: no "Unknown tool".
TEST(McpServe, APlainReplToolboxOffersTheReplToolsToTheClient) {
  for (const char* yaml :
       {"memory: none\ntoolboxes: [repl]\n", "memory: none\ntoolboxes:\n  - name: repl\n"}) {
    SCOPED_TRACE(yaml);
    kernex::testing::TempDir dir;
    auto responses =
        serve(dir, yaml,
              {{"tools/list", Json::object()},
               {"tools/call", call("load_context", {{"name", "doc"}, {"text", "a\nb\n"}})},
               {"tools/call", call("eval_code", {{"code", "n = doc['line_count'] * 10"}})},
               {"tools/call", call("eval_code", {{"code", "print(n + 1)"}})}});
    std::set<std::string> names;
    for (const auto& tool : responses[2]["result"]["tools"]) {
      names.insert(tool["name"].get<std::string>());
      const Json& schema = tool["inputSchema"];
      EXPECT_TRUE(!schema.contains("properties") || schema["properties"].is_object())
          << tool.dump();
    }
    for (const char* name : {"load_context", "list_vars", "peek", "scan", "eval_code",
                             "provide_answers", "kernex_run"})
      EXPECT_TRUE(names.contains(name)) << name;
    for (int id : {3, 4, 5}) {
      ASSERT_TRUE(responses[id].contains("result")) << responses[id].dump();
      EXPECT_EQ(responses[id]["result"]["isError"], false) << responses[id].dump();
    }
    EXPECT_EQ(Json::parse(text_of(responses[5]))["stdout"], "21\n");
  }
}

// The kernel's hook chain runs around mcp serve's calls as around a run's: the PII guard hands the
// client and the REPL's code tokens, and a token passed back reaches the tool as the real value.
TEST(McpServe, HooksRunAroundDirectCallsAndCallsFromCode) {
  kernex::testing::TempDir dir;
  dir.write("ws/contact.txt", "mail bob.jones@example.org now\n");
  const std::string yaml =
      "memory: none\nhooks: [pii]\ntoolboxes:\n  - name: repl\n"
      "    options: {workspace: " +
      (dir / "ws").string() +
      "}\n  - name: files\n    options: {workspace: " + (dir / "ws").string() + "}\n";
  const std::string code =
      "t = tools.read(file_path='contact.txt')['content']\nprint(t)\n"
      "tools.write(file_path='copy.txt', content=t)\n";
  auto responses = serve(dir, yaml,
                         {{"tools/call", call("read", {{"file_path", "contact.txt"}})},
                          {"tools/call", call("eval_code", {{"code", code}})}});
  ASSERT_TRUE(responses[2].contains("result")) << responses[2].dump();
  EXPECT_EQ(text_of(responses[2]).find("bob.jones@example.org"), std::string::npos)
      << text_of(responses[2]);
  EXPECT_NE(text_of(responses[2]).find("[EMAIL_1]"), std::string::npos) << text_of(responses[2]);
  Json eval = Json::parse(text_of(responses[3]));
  EXPECT_EQ(eval["stdout"].get<std::string>().find("bob.jones"), std::string::npos) << eval.dump();
  std::ifstream copy(dir / "ws" / "copy.txt");
  std::stringstream copied;
  copied << copy.rdbuf();
  EXPECT_NE(copied.str().find("bob.jones@example.org"), std::string::npos) << copied.str();
}

// With a provider configured, the code's llm_query is answered by it instead of deferred.
TEST(McpServe, AConfiguredProviderAnswersTheCodesQueries) {
  kernex::testing::TempDir dir;
  auto script = dir.write("script.jsonl", R"({"text": "a sunny answer", "match": "weather?"})"
                                          "\n");
  const std::string yaml =
      "memory: none\ntoolboxes: [repl]\nprovider: replay\n"
      "providers: {replay: {script: " +
      script.string() + "}}\n";
  auto responses = serve(
      dir, yaml, {{"tools/call", call("eval_code", {{"code", "print(llm_query('weather?'))"}})}});
  ASSERT_TRUE(responses[2].contains("result")) << responses[2].dump();
  Json eval = Json::parse(text_of(responses[2]));
  EXPECT_EQ(eval["stdout"], "a sunny answer\n") << eval.dump();
  EXPECT_FALSE(eval.contains("pending_queries")) << eval.dump();
}

// Code in the session's REPL calls the other toolboxes' tools (not the REPL's own) through the same
// permission rules as the client's calls.
TEST(McpServe, ReplCodeCallsTheOtherToolsUnderThePermissionRules) {
  kernex::testing::TempDir dir;
  const std::string code =
      "print(sorted(t['name'] for t in tools.list()))\n"
      "print(tools.word_count(text='one two three')['words'])\n"
      "try:\n    tools.word_count(text='a secret')\nexcept ToolError as e:\n    print(e)\n"
      "try:\n    tools.call('eval_code', code='1')\nexcept ToolError as e:\n    print('refused')\n";
  auto responses = serve(dir,
                         "memory: none\ntoolboxes: [repl, builtin]\n"
                         "permissions: {deny: [\"word_count(*secret*)\"]}\n",
                         {{"tools/call", call("eval_code", {{"code", code}})},
                          {"tools/call", call("word_count", {{"text", "my secret"}})}});
  ASSERT_TRUE(responses[2].contains("result")) << responses[2].dump();
  Json eval = Json::parse(text_of(responses[2]));
  ASSERT_TRUE(eval["stdout"].is_string()) << eval.dump();
  std::istringstream out(eval["stdout"].get<std::string>());
  std::string listed, words, denied, own;
  std::getline(out, listed), std::getline(out, words), std::getline(out, denied),
      std::getline(out, own);
  EXPECT_NE(listed.find("'word_count'"), std::string::npos) << listed;
  EXPECT_EQ(listed.find("eval_code"), std::string::npos) << listed;
  EXPECT_EQ(words, "3") << eval.dump();
  EXPECT_EQ(denied, "Tool call denied: denied by rule: word_count(*secret*)") << eval.dump();
  EXPECT_EQ(own, "refused") << eval.dump();
  // The client's own call meets the same rule.
  EXPECT_EQ(text_of(responses[3]), denied);
}

// A user who chose `offer: when_allowed` keeps that choice: an MCP client is then not offered
// the REPL's tools.
TEST(McpServe, AnExplicitOfferIsKept) {
  kernex::testing::TempDir dir;
  auto responses = serve(dir,
                         "memory: none\ntoolboxes:\n  - name: repl\n"
                         "    options: {offer: when_allowed}\n",
                         {{"tools/call", call("eval_code", {{"code", "print(1)"}})}});
  ASSERT_TRUE(responses[2].contains("error")) << responses[2].dump();
  EXPECT_EQ(responses[2]["error"]["message"], "Unknown tool: eval_code");
}

// A toolbox offering fixed tools that answers with the tool's name and remembers the services
// it was called with.
class FixedBox final : public ToolExecutor {
 public:
  explicit FixedBox(std::vector<std::string> names) : names_(std::move(names)) {}
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    std::vector<ToolSpec> specs;
    for (const auto& n : names_) specs.push_back(ToolSpec{n, "", Json{{"type", "object"}}, {}});
    return specs;
  }
  Result<ToolResult> execute(const Context&, const RunHandles& run, const ToolCall& call) override {
    seen_services = run.services.get();
    if (call.name == "broken") return fail(ErrorCode::Tool, "broken on purpose");
    return ToolResult{call.id, call.name, "ran " + call.name, false};
  }
  RunServices* seen_services = nullptr;

 private:
  std::vector<std::string> names_;
};

class McpServeTools : public ::testing::Test {
 protected:
  PermissionRules rules_{{}, {"echo(*secret*)"}};
  std::shared_ptr<FixedBox> repl_ =
      std::make_shared<FixedBox>(std::vector<std::string>{"eval_code", "load_context"});
  std::shared_ptr<FixedBox> other_ =
      std::make_shared<FixedBox>(std::vector<std::string>{"echo", "broken", "kernex_run"});
  ServeTools tools_{rules_, std::make_shared<Context>(),
                    std::vector<std::shared_ptr<ToolExecutor>>{repl_, other_},
                    std::vector<std::string>{"kernex_run"}};
  std::shared_ptr<ServeRunServices> services_ =
      std::make_shared<ServeRunServices>(tools_, repl_.get(), "mcp-test");
  void SetUp() override { tools_.set_handles(RunHandles{services_, nullptr, {}}); }
};

std::vector<std::string> names_of(const std::vector<ToolSpec>& specs) {
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  return names;
}

TEST_F(McpServeTools, TheClientSeesEveryToolCodeAllButTheReplsOwn) {
  EXPECT_EQ(names_of(tools_.list()),
            (std::vector<std::string>{"eval_code", "load_context", "echo", "broken"}));
  EXPECT_EQ(names_of(services_->tools()), (std::vector<std::string>{"echo", "broken"}));
}

TEST_F(McpServeTools, CodeCallsGoThroughThePermissionRules) {
  ToolResult ran = services_->call_tool(ToolCall{"c1", "echo", {{"text", "hello"}}}, "code-1");
  EXPECT_FALSE(ran.is_error) << ran.content;
  EXPECT_EQ(ran.content, "ran echo");
  EXPECT_EQ(other_->seen_services, services_.get());  // every call gets the session's handles

  ToolResult denied =
      services_->call_tool(ToolCall{"c2", "echo", {{"text", "the secret"}}}, "code-1");
  EXPECT_TRUE(denied.is_error);
  EXPECT_EQ(denied.content, "Tool call denied: denied by rule: echo(*secret*)");
  // The same rules refuse the client's own call.
  EXPECT_EQ(tools_.call(ToolCall{"m", "echo", {{"text", "secret"}}}).content, denied.content);
}

TEST_F(McpServeTools, CodeCannotCallTheReplReservedOrUnknownTools) {
  for (const char* name : {"eval_code", "kernex_run", "nope"}) {
    ToolResult r = services_->call_tool(ToolCall{"c", name, Json::object()}, "code-1");
    EXPECT_TRUE(r.is_error) << name;
    EXPECT_EQ(r.content, std::string("Unknown tool: ") + name);
  }
  EXPECT_EQ(repl_->seen_services, nullptr);  // the REPL never ran
  ToolResult broken = services_->call_tool(ToolCall{"c", "broken", Json::object()}, "code-1");
  EXPECT_TRUE(broken.is_error);
  EXPECT_NE(broken.content.find("broken on purpose"), std::string::npos) << broken.content;
}

TEST_F(McpServeTools, SubQueriesAreLeftToTheClient) {
  EXPECT_FALSE(services_->can_query());
  EXPECT_EQ(services_->session(), "mcp-test");
  EXPECT_EQ(services_->span(), "0");
  EXPECT_FALSE(services_->llm_query("q", std::nullopt));
  auto batch = services_->llm_query_batched({"a", "b"}, std::nullopt);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_FALSE(batch[0] || batch[1]);
}

// kernex_run with a message memory would refuse to save is refused before any provider request.
TEST(McpServe, KernexRunRefusesAMessageMemoryCannotKeepBeforePaying) {
  kernex::testing::TempDir dir;
  auto script = dir.write("script.jsonl", R"({"text": "a paid answer"})"
                                          "\n");
  const auto record = dir / "record.jsonl";
  const std::string yaml =
      "memory:\n  name: sqlite\n  options:\n    max_message_bytes: 64\n"
      "toolboxes: [repl]\nprovider: replay\nproviders: {replay: {script: " +
      script.string() + ", record: " + record.string() + "}}\n";
  auto responses = serve(dir, yaml,
                         {{"tools/call", call("kernex_run", {{"message", std::string(100, 'x')}})},
                          {"tools/call", call("kernex_run", {{"message", "hello"}})}});
  ASSERT_TRUE(responses[2].contains("result")) << responses[2].dump();
  EXPECT_EQ(responses[2]["result"]["isError"], true) << responses[2].dump();
  EXPECT_NE(text_of(responses[2]).find("refused before any provider request"), std::string::npos)
      << text_of(responses[2]);
  EXPECT_NE(text_of(responses[2]).find("max_message_bytes"), std::string::npos);
  // The second, small message was the only request the provider got.
  ASSERT_TRUE(responses[3].contains("result")) << responses[3].dump();
  EXPECT_EQ(text_of(responses[3]), "a paid answer");
  std::ifstream in(record);
  int requests = 0;
  for (std::string line; std::getline(in, line);) requests += !line.empty();
  EXPECT_EQ(requests, 1);
}

}  // namespace
