// The PII guard hook: what it finds, the stable tokens it puts in tool output, the real values it
// puts back into tool arguments, per-tool rules, and the whole path through the agentic loop.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

class PiiHook : public ::testing::Test {
 protected:
  std::shared_ptr<HookRunner> hook(const Json& config = Json::object()) {
    auto made = host_.create_hook("pii", config);
    EXPECT_TRUE(made) << made.error().describe();
    return made.value_or(nullptr);
  }
  std::string guard(HookRunner& h, const std::string& text, const std::string& tool = "fetch",
                    const std::string& session = "s") {
    ToolResult r{"1", tool, text, false};
    h.post_tool(HookScope{session, "u", ""}, ToolCall{"1", tool, Json::object()}, r);
    return r.content;
  }
  PluginHost host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
};

// What code gets (the structured result) is tokenised as the text is, keys included, with the
// same tokens.
TEST_F(PiiHook, TokenisesTheStructuredResultLikeTheText) {
  auto h = hook();
  ToolResult r{"1", "read", "mail bob@example.org", false};
  r.structured = {{"content", "mail bob@example.org"},
                  {"people", {{{"email", "carol@example.org"}, {"n", 1}}}},
                  {"dave@example.org", true}};
  h->post_tool(HookScope{"s", "u", ""}, ToolCall{"1", "read", Json::object()}, r);
  EXPECT_EQ(r.content, "mail [EMAIL_1]");
  // Keys in order: "content", "dave@...", "people".
  EXPECT_EQ(r.structured, (Json{{"content", "mail [EMAIL_1]"},
                                {"people", {{{"email", "[EMAIL_3]"}, {"n", 1}}}},
                                {"[EMAIL_2]", true}}));
  EXPECT_EQ(r.structured.dump().find("example.org"), std::string::npos);
}

TEST_F(PiiHook, ReplacesEachKindWithStableTokens) {
  auto h = hook();
  const std::string out =
      guard(*h,
            "Contact ana.lopez+billing@example.co.uk or +1 415-555-0132 / (415) 555-0199.\n"
            "Card 4111 1111 1111 1111 paid; key sk-proj-abcdefghijklmnopqrstuvwxyz123456, "
            "aws AKIAIOSFODNN7EXAMPLE, ghp_0123456789abcdefghijABCDEFGHIJ.\n"
            "Again: ana.lopez+billing@example.co.uk");
  EXPECT_EQ(out,
            "Contact [EMAIL_1] or [PHONE_1] / [PHONE_2].\n"
            "Card [CARD_1] paid; key [SECRET_1], aws [SECRET_2], [SECRET_3].\n"
            "Again: [EMAIL_1]");
  // Same value, same token, in a later result of the same conversation.
  EXPECT_EQ(guard(*h, "from ana.lopez+billing@example.co.uk"), "from [EMAIL_1]");
  // Another conversation has its own numbering.
  EXPECT_EQ(guard(*h, "bob@example.org", "fetch", "other"), "[EMAIL_1]");
}

TEST_F(PiiHook, LeavesOrdinaryTextAlone) {
  auto h = hook();
  const std::string text =
      "order 12345678 shipped 2026-11-25 at 10:30; version 1.2.3; id 4111111111111112 (not Luhn); "
      "user@localhost; price 1,234.56; see sk-short and http://example.com/a@b";
  EXPECT_EQ(guard(*h, text), text);
}

TEST_F(PiiHook, PutsRealValuesBackIntoArguments) {
  auto h = hook();
  guard(*h, "owner: ana@example.com, phone +44 20 7946 0958");
  ToolCall call{"2", "send_mail",
                Json{{"to", "[EMAIL_1]"},
                     {"body", "Call [PHONE_1] or [PHONE_9]"},
                     {"n", 3},
                     {"cc", Json::array({"[EMAIL_1]"})}}};
  EXPECT_FALSE(h->pre_tool(HookScope{"s", "u", ""}, call).blocked);
  EXPECT_EQ(call.arguments["to"], "ana@example.com");
  EXPECT_EQ(call.arguments["body"], "Call +44 20 7946 0958 or [PHONE_9]");  // unknown tokens stay
  EXPECT_EQ(call.arguments["cc"][0], "ana@example.com");
  // Tokens of another conversation mean nothing here.
  ToolCall elsewhere{"3", "send_mail", Json{{"to", "[EMAIL_1]"}}};
  h->pre_tool(HookScope{"other", "u", ""}, elsewhere);
  EXPECT_EQ(elsewhere.arguments["to"], "[EMAIL_1]");
}

TEST_F(PiiHook, RulesPerToolAndKindsAndBadConfig) {
  auto h = hook(Json{{"kinds", {"email"}},
                     {"rules",
                      {{{"tool", "crm__*"}, {"kinds", Json::array()}},
                       {{"tool", "vault_*"}, {"kinds", {"secret"}}}}}});
  EXPECT_EQ(guard(*h, "a@b.io +1 415-555-0132"), "[EMAIL_1] +1 415-555-0132");
  EXPECT_EQ(guard(*h, "a@b.io", "crm__lookup"), "a@b.io");
  EXPECT_EQ(guard(*h, "a@b.io AKIAIOSFODNN7EXAMPLE", "vault_read"), "a@b.io [SECRET_1]");
  for (const Json& bad : {Json{{"kinds", {"ssn"}}}, Json{{"rules", {{{"tool", 1}}}}},
                          Json{{"restore", "yes"}}, Json{{"colour", true}}}) {
    auto made = host_.create_hook("pii", bad);
    EXPECT_FALSE(made) << bad.dump();
  }
}

TEST_F(PiiHook, LargeHostileOutputIsLinear) {
  auto h = hook();
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "x@y.zz 1-2-3-4-5-6-7 @@@@ eyJ.eyJ. ----- ";
  const std::string out = guard(*h, text);
  EXPECT_NE(out.find("[EMAIL_1]"), std::string::npos);
  EXPECT_EQ(out.find("x@y.zz"), std::string::npos);
}

// Through the loop: the model sees tokens, the next tool gets the real value.
class RecordingToolbox final : public ToolExecutor {
 public:
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    return std::vector<ToolSpec>{{"lookup", "", Json{{"type", "object"}}, {}},
                                 {"send_mail", "", Json{{"type", "object"}}, {}}};
  }
  Result<ToolResult> execute(const Context&, const RunHandles&, const ToolCall& call) override {
    seen.push_back(call.arguments);
    if (call.name == "lookup")
      return ToolResult{call.id, call.name,
                        "customer: jane.doe@example.com, card 5555 5555 5555 4444", false};
    return ToolResult{call.id, call.name, "sent", false};
  }
  std::vector<Json> seen;
};

TEST(PiiHookLoop, ModelSeesTokensAndToolsGetRealValues) {
  testing::TempDir dir;
  auto line = [](const std::string& name, const Json& args) {
    return Json{{"tool_calls", {{{"id", "c-" + name}, {"name", name}, {"arguments", args}}}}}
               .dump() +
           "\n";
  };
  std::ofstream(dir / "script.jsonl")
      << line("lookup", {{"q", "jane"}}) << line("send_mail", {{"to", "[EMAIL_1]"}})
      << Json{{"text", "Mailed [EMAIL_1]."}}.dump() << "\n";
  Config config;
  config.provider = {"replay", Json{{"script", (dir / "script.jsonl").string()},
                                    {"record", (dir / "record.jsonl").string()}}};
  config.hooks = {PluginRef{"pii", Json::object()}};
  config.toolboxes = std::vector<PluginRef>{};
  config.data_dir = dir / "data";
  config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
  auto kernel = Kernel::create(std::move(config));
  ASSERT_TRUE(kernel) << kernel.error().describe();
  auto tools = std::make_shared<RecordingToolbox>();
  (*kernel)->add_toolbox(tools);
  auto r = (*kernel)->run(Request::from_text("u", "mail jane"));
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(tools->seen.size(), 2u);
  EXPECT_EQ(tools->seen[1]["to"], "jane.doe@example.com");
  std::ifstream record(dir / "record.jsonl");
  const std::string requests((std::istreambuf_iterator<char>(record)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(requests.find("jane.doe@example.com"), std::string::npos);
  EXPECT_EQ(requests.find("5555 5555"), std::string::npos);
  EXPECT_NE(requests.find("[CARD_1]"), std::string::npos);
}

}  // namespace
}  // namespace kernex
