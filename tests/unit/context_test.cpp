// Context, ContextEntry, Toolbox, McpServer and the tool records: kernex's 14 context.rs
// conformance cases, the command allow-list cases, JSON rules, and the turn extension.
#include "kernex/context.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernex/permissions.hpp"
#include "kernex/tool.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Context with_history() {
  Context ctx("How are you?");
  ctx.system_prompt = "Be helpful.";
  ctx.history = {ContextEntry::user("Hi"), ContextEntry::assistant("Hello!")};
  return ctx;
}

std::string json_error(const Json& j, auto&& parse) {
  try {
    parse(j);
  } catch (const Json::exception& e) {
    return e.what();
  }
  return "";
}

// --- kernex context.rs conformance (its session, agent and budget fields are left out) ---

TEST(Context, NewDefaults) {
  Context ctx("hello");
  EXPECT_TRUE(ctx.system_prompt.empty());
  EXPECT_TRUE(ctx.history.empty());
  EXPECT_TRUE(ctx.mcp_servers.empty());
  EXPECT_TRUE(ctx.toolboxes.empty());
  EXPECT_EQ(ctx.current_message, "hello");
  EXPECT_FALSE(ctx.model);
  EXPECT_TRUE(ctx.tools_enabled());
}

TEST(Context, McpServerSerdeRoundTrip) {
  McpServer s{"playwright", "npx", {"@playwright/mcp", "--headless"}, {}};
  const Json j = s;
  EXPECT_FALSE(j.contains("env"));  // skipped when empty
  const auto back = j.get<McpServer>();
  EXPECT_EQ(back.name, "playwright");
  EXPECT_EQ(back.args, (std::vector<std::string>{"@playwright/mcp", "--headless"}));
}

TEST(Context, SerdeWithoutOptionalFields) {
  const auto ctx =
      Json::parse(R"({"system_prompt":"test","history":[],"current_message":"hi"})").get<Context>();
  EXPECT_EQ(ctx.system_prompt, "test");
  EXPECT_EQ(ctx.current_message, "hi");
  EXPECT_TRUE(ctx.mcp_servers.empty());
}

TEST(Context, ToApiMessagesBasic) {
  const auto [system, messages] = Context("hello").to_api_messages();
  EXPECT_EQ(system, "");
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0], (ApiMessage{"user", "hello"}));
}

TEST(Context, ToApiMessagesWithHistory) {
  const auto [system, messages] = with_history().to_api_messages();
  EXPECT_EQ(system, "Be helpful.");
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0], (ApiMessage{"user", "Hi"}));
  EXPECT_EQ(messages[1], (ApiMessage{"assistant", "Hello!"}));
  EXPECT_EQ(messages[2], (ApiMessage{"user", "How are you?"}));
}

TEST(Context, ToPromptStringNoSession) {
  Context ctx("How are you?");
  ctx.system_prompt = "Be helpful.";
  ctx.history = {ContextEntry::user("Hi")};
  const std::string p = ctx.to_prompt_string();
  EXPECT_THAT(p, HasSubstr("[System]\nBe helpful."));
  EXPECT_THAT(p, HasSubstr("[User]\nHi"));
  EXPECT_THAT(p, HasSubstr("[User]\nHow are you?"));
  EXPECT_EQ(p, "[System]\nBe helpful.\n\n[User]\nHi\n\n[User]\nHow are you?");
}

TEST(Context, OptionalFieldsSkippedInSerialization) {
  const Json j = Context("hello");
  for (const char* key : {"toolboxes", "allowed_tools", "model", "turn"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j.contains("mcp_servers"));  // kernex always writes it
}

TEST(Context, ToolboxSerdeRoundTrip) {
  Toolbox tb;
  tb.name = "lint";
  tb.description = "Run the linter.";
  tb.command = "bash";
  tb.args = {"scripts/lint.sh"};
  const Json j = tb;
  EXPECT_TRUE(j.contains("args"));
  EXPECT_TRUE(j.contains("network"));
  for (const char* key : {"env", "env_passthrough", "allowed_commands", "search_hints"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  const auto back = j.get<Toolbox>();
  EXPECT_EQ(back.name, "lint");
  EXPECT_EQ(back.command, "bash");
  EXPECT_EQ(back.args, std::vector<std::string>{"scripts/lint.sh"});
}

TEST(Context, ToolboxDefaultParameters) {
  const auto tb =
      Json::parse(R"({"name":"test","description":"Test tool.","command":"echo"})").get<Toolbox>();
  EXPECT_EQ(tb.parameters, Json::parse(R"({"type":"object"})"));
  EXPECT_TRUE(tb.args.empty());
  EXPECT_TRUE(tb.env.empty());
  EXPECT_FALSE(tb.network);
}

TEST(Context, SerdeWithToolboxes) {
  Context ctx("hi");
  Toolbox tb;
  tb.name = "lint";
  tb.description = "d";
  tb.command = "bash";
  ctx.toolboxes.push_back(tb);
  const Json j = ctx;
  EXPECT_TRUE(j.contains("toolboxes"));
  const auto back = Json::parse(j.dump()).get<Context>();
  ASSERT_EQ(back.toolboxes.size(), 1u);
  EXPECT_EQ(back.toolboxes[0].name, "lint");
}

// --- command_matches_allowlist (kernex-skills / kernex-providers cases) ---

TEST(CommandAllowlist, EmptyAllowsEverything) {
  EXPECT_TRUE(command_matches_allowlist({}, "/usr/bin/npx"));
  EXPECT_TRUE(command_matches_allowlist({}, "anything"));
}

TEST(CommandAllowlist, BareNameMatchesBasename) {
  const std::vector<std::string> allowed{"npx"};
  EXPECT_TRUE(command_matches_allowlist(allowed, "npx"));
  EXPECT_TRUE(command_matches_allowlist(allowed, "/usr/bin/npx"));
  EXPECT_TRUE(command_matches_allowlist(allowed, "/opt/node/bin/npx"));
  EXPECT_FALSE(command_matches_allowlist(allowed, "rm"));
  EXPECT_FALSE(command_matches_allowlist(allowed, "/tmp/payload"));
  EXPECT_FALSE(command_matches_allowlist(allowed, "NPX"));   // case-sensitive
  EXPECT_FALSE(command_matches_allowlist(allowed, "npx/"));  // basename ""
}

TEST(CommandAllowlist, PathEntryMatchesExactly) {
  const std::vector<std::string> allowed{"/usr/local/bin/mcp-foo"};
  EXPECT_TRUE(command_matches_allowlist(allowed, "/usr/local/bin/mcp-foo"));
  EXPECT_FALSE(command_matches_allowlist(allowed, "mcp-foo"));
  EXPECT_FALSE(command_matches_allowlist(allowed, "/tmp/mcp-foo"));
}

// --- JSON rules ---

TEST(ContextJson, MissingRequiredFieldIsNamed) {
  const auto err = json_error(Json::parse(R"({"system_prompt":"s","history":[]})"),
                              [](const Json& j) { (void)j.get<Context>(); });
  EXPECT_THAT(err, HasSubstr("current_message"));
  EXPECT_THAT(err, HasSubstr("missing"));
}

TEST(ContextJson, WrongTypeIsNamedWithItsPath) {
  const auto err =
      json_error(Json::parse(R"({"system_prompt":"s","history":[],"current_message":"m",
                      "toolboxes":[{"name":"a","description":"d","command":"c"},{"name":7,"description":"d","command":"c"}]})"),
                 [](const Json& j) { (void)j.get<Context>(); });
  EXPECT_THAT(err, HasSubstr("field 'toolboxes[1].name'"));
  EXPECT_THAT(err, HasSubstr("string"));
}

TEST(ContextJson, McpServerArgsAreRequired) {
  const auto err = json_error(Json::parse(R"({"name":"x","command":"npx"})"),
                              [](const Json& j) { (void)j.get<McpServer>(); });
  EXPECT_THAT(err, HasSubstr("'args'"));
}

TEST(ContextJson, NotAnObjectIsAnError) {
  EXPECT_THAT(json_error(Json::array(), [](const Json& j) { (void)j.get<Context>(); }),
              HasSubstr("object"));
  EXPECT_THAT(json_error(Json::parse(R"({"system_prompt":"","history":[3],"current_message":""})"),
                         [](const Json& j) { (void)j.get<Context>(); }),
              HasSubstr("field 'history[0]'"));
}

TEST(ContextJson, NullOptionalIsNone) {
  const auto ctx =
      Json::parse(
          R"({"system_prompt":"","history":[],"current_message":"","model":null,"session_id":null})")
          .get<Context>();
  EXPECT_FALSE(ctx.model);
}

// kernex's session_id, agent_name, extended_thinking and budget fields are not the Context's:
// the run's session is RunServices::session(), thinking a provider option, limits the run's.
// JSON that still carries them is read, and they are not written back.
TEST(ContextJson, FieldsKernexKeptElsewhereAreIgnored) {
  const auto ctx = Json::parse(R"({"system_prompt":"s","history":[],"current_message":"hi",
      "session_id":"sess","agent_name":"a","extended_thinking":true,"max_turns":-1,
      "token_budget":"x","cost_budget_usd":1,"tool_call_budget":2})")
                       .get<Context>();
  EXPECT_EQ(ctx.current_message, "hi");
  const Json back = ctx;
  for (const char* key : {"session_id", "agent_name", "extended_thinking", "max_turns",
                          "token_budget", "cost_budget_usd", "tool_call_budget"}) {
    EXPECT_FALSE(back.contains(key)) << key;
  }
  // Flattened as a run without a provider-side session: the history is always there.
  EXPECT_EQ(ctx.to_prompt_string(), "[System]\ns\n\n[User]\nhi");
}

TEST(ContextJson, ExtensionFieldsRoundTrip) {
  Context ctx("q");
  ContextEntry call = ContextEntry::assistant("checking");
  call.tool_calls.push_back({"c1", "bash", Json{{"command", "ls"}}});
  call.provider_state = Json{{"thinking", "sig"}};
  ctx.history.push_back(call);
  ctx.turn.push_back(ContextEntry::tool({"c1", "bash", "a.txt", false}));
  ctx.allowed_tools = std::vector<std::string>{};
  ctx.model = "m";
  const Json j = ctx;
  const auto back = Json::parse(j.dump()).get<Context>();
  EXPECT_EQ(back.history, ctx.history);
  EXPECT_EQ(back.turn, ctx.turn);
  EXPECT_EQ(back.allowed_tools, std::vector<std::string>{});
  EXPECT_FALSE(back.tools_enabled());
  EXPECT_EQ(back.model, "m");
}

TEST(ContextJson, PlainEntrySerializesAsKernex) {
  EXPECT_EQ(Json(ContextEntry::user("hi")), Json::parse(R"({"role":"user","content":"hi"})"));
}

TEST(ToolJson, RecordsRoundTripWithDefaults) {
  const auto call = Json::parse(R"({"id":"c1","name":"read"})").get<ToolCall>();
  EXPECT_EQ(call.arguments, Json::object());
  const auto result = Json::parse(R"({"call_id":"c1","content":"x"})").get<ToolResult>();
  EXPECT_FALSE(result.is_error);
  const auto spec = Json::parse(R"({"name":"grep"})").get<ToolSpec>();
  EXPECT_EQ(spec.parameters, Json::parse(R"({"type":"object"})"));
  EXPECT_FALSE(Json(spec).contains("search_hints"));
  Toolbox tb;
  tb.name = "t";
  tb.search_hints = {"lint"};
  EXPECT_EQ(tb.spec().search_hints, std::vector<std::string>{"lint"});
  EXPECT_THAT(json_error(Json::parse(R"({"id":"c1","name":"read","arguments":[]})"),
                         [](const Json& j) { (void)j.get<ToolCall>(); }),
              Not(HasSubstr("arguments")));  // arguments is any JSON value
  EXPECT_THAT(
      json_error(Json::parse(R"({"name":"read"})"), [](const Json& j) { (void)j.get<ToolCall>(); }),
      HasSubstr("'id'"));
}

// --- turn extension ---

Context with_turn() {
  Context ctx("List files");
  ContextEntry call = ContextEntry::assistant("Looking.");
  call.tool_calls.push_back({"c1", "bash", Json{{"command", "ls"}}});
  ctx.turn = {call, ContextEntry::tool({"c1", "bash", "a.txt", false}),
              ContextEntry::tool({"c2", "read", "no such file", true})};
  return ctx;
}

TEST(ContextTurn, EntryToolCarriesResult) {
  const auto e = ContextEntry::tool({"c9", "grep", "out", true});
  EXPECT_EQ(e.role, "tool");
  EXPECT_EQ(e.content, "out");
  ASSERT_TRUE(e.tool_result);
  EXPECT_EQ(e.tool_result->call_id, "c9");
  EXPECT_TRUE(e.tool_result->is_error);
}

TEST(ContextTurn, MessagesAreHistoryUserTurn) {
  Context ctx = with_turn();
  ctx.history = {ContextEntry::user("Hi"), ContextEntry::assistant("Hello")};
  const auto m = ctx.messages();
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0], ContextEntry::user("Hi"));
  EXPECT_EQ(m[2], ContextEntry::user("List files"));
  EXPECT_EQ(m[3], ctx.turn[0]);
  EXPECT_EQ(m[5], ctx.turn[2]);
}

TEST(ContextTurn, PromptStringRendersToolTrafficAfterCurrentMessage) {
  EXPECT_EQ(with_turn().to_prompt_string(),
            "[User]\nList files\n\n"
            "[Assistant]\nLooking.\n[Tool call c1] bash {\"command\":\"ls\"}\n\n"
            "[Tool result c1 bash]\na.txt\n\n"
            "[Tool error c2 read]\nno such file");
}

TEST(ContextTurn, ApiMessagesRenderToolEntries) {
  Context ctx = with_turn();
  ContextEntry only_calls;
  only_calls.role = "assistant";
  only_calls.tool_calls.push_back({"c3", "read", Json{{"path", "x"}}});
  ctx.history = {only_calls};
  const auto [system, m] = ctx.to_api_messages();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], (ApiMessage{"assistant", "[Tool call c3] read {\"path\":\"x\"}"}));
  EXPECT_EQ(m[1], (ApiMessage{"user", "List files"}));
  EXPECT_EQ(m[2], (ApiMessage{"assistant", "Looking.\n[Tool call c1] bash {\"command\":\"ls\"}"}));
  EXPECT_EQ(m[3], (ApiMessage{"tool", "[Tool result c1 bash]\na.txt"}));
  EXPECT_EQ(m[4], (ApiMessage{"tool", "[Tool error c2 read]\nno such file"}));
}

TEST(ContextTurn, HistoryRolesOtherThanUserRenderAsAssistant) {
  Context ctx("now");
  ctx.history = {{"User", "x", {}, {}, {}}, {"system", "y", {}, {}, {}}};
  EXPECT_EQ(ctx.to_prompt_string(), "[Assistant]\nx\n\n[Assistant]\ny\n\n[User]\nnow");
  const auto [system, m] = ctx.to_api_messages();
  EXPECT_EQ(m[0], (ApiMessage{"User", "x"}));  // verbatim, not normalised
}

}  // namespace
}  // namespace kernex
