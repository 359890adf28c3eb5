// The OpenAI request parser and the JSON Schema guard, on hostile and ordinary input: every
// field honoured or refused naming it, tool histories as kernel entries, and schemas that would
// crash, hang or reach out through valijson refused before they are used.
#include <gtest/gtest.h>

#include "kernex/json_schema.hpp"
#include "openai_request.hpp"

namespace {

using kernex::Json;
using namespace kernex::server;

std::expected<OpenAiRequest, ApiError> parse(Json body, std::map<std::string, std::string> h = {}) {
  HttpRequest req;
  req.headers = std::move(h);
  if (!body.contains("model")) body["model"] = "kernex";
  if (!body.contains("messages"))
    body["messages"] = Json::array({{{"role", "user"}, {"content", "hi"}}});
  return parse_chat_request(req, body);
}

std::string param_of(const Json& body) {
  auto r = parse(body);
  return r ? std::string("<accepted>") : r.error().param;
}

TEST(OpenAiRequest, SamplingAndFormatFieldsAreParsedAndChecked) {
  auto r = parse({{"temperature", 0.5},
                  {"top_p", 1},
                  {"max_tokens", 10},
                  {"stop", "x"},
                  {"seed", -3},
                  {"presence_penalty", 2},
                  {"frequency_penalty", -2},
                  {"reasoning_effort", "low"},
                  {"parallel_tool_calls", false},
                  {"response_format", {{"type", "json_object"}}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->generation.temperature, 0.5);
  EXPECT_EQ(r->generation.max_tokens, 10u);
  EXPECT_EQ(r->generation.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r->generation.seed, -3);
  EXPECT_EQ(r->generation.parallel_tool_calls, false);
  EXPECT_EQ(r->generation.response_format.kind, kernex::ResponseFormat::Kind::JsonObject);
  EXPECT_EQ(param_of({{"temperature", "hot"}}), "temperature");
  EXPECT_EQ(param_of({{"temperature", 2.0001}}), "temperature");
  EXPECT_EQ(param_of({{"seed", 1.5}}), "seed");
  EXPECT_EQ(param_of({{"max_tokens", -1}}), "max_tokens");
  EXPECT_EQ(param_of({{"max_tokens", 5}, {"max_completion_tokens", 6}}), "max_tokens");
  EXPECT_EQ(param_of({{"stop", Json::array({""})}}), "stop");
  EXPECT_EQ(param_of({{"reasoning_effort", "max"}}), "reasoning_effort");
  EXPECT_EQ(param_of({{"stream", "yes"}}), "stream");
  EXPECT_EQ(param_of({{"stream_options", {{"include_usage", true}, {"x", 1}}}}),
            "stream_options.x");
  EXPECT_EQ(param_of({{"n", 3}}), "n");
  EXPECT_EQ(param_of({{"functions", Json::array()}}), "functions");
  EXPECT_EQ(param_of({{"metadata", {{"k", 1}}}}), "metadata.k");
  EXPECT_EQ(param_of({{"model", 5}}), "model");
  EXPECT_EQ(param_of({{"messages", Json::array()}}), "messages");
}

TEST(OpenAiRequest, ToolHistoryBecomesKernelEntries) {
  Json messages = Json::array(
      {{{"role", "developer"}, {"content", "rules"}},
       {{"role", "user"},
        {"content",
         Json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls", Json::array({{{"id", "c1"},
                                     {"type", "function"},
                                     {"function", {{"name", "f"}, {"arguments", "{\"x\":1}"}}}},
                                    {{"id", "c2"},
                                     {"type", "function"},
                                     {"function", {{"name", "g"}, {"arguments", "not json"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "one"}},
       {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "two"}}});
  auto r = parse({{"messages", messages}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->system, "rules");
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].content, "ab");
  EXPECT_EQ(r->messages[1].tool_calls[0].arguments, Json({{"x", 1}}));
  EXPECT_EQ(r->messages[1].tool_calls[1].arguments, "not json");
  EXPECT_EQ(r->messages[3].tool_result->name, "g");
  EXPECT_TRUE(r->continues_tool_calls());
  EXPECT_EQ(r->last_user(), 0u);

  Json orphan = Json::array({{{"role", "user"}, {"content", "q"}},
                             {{"role", "tool"}, {"tool_call_id", "nope"}, {"content", "x"}}});
  EXPECT_EQ(param_of({{"messages", orphan}}), "messages[1].tool_call_id");
  Json ends_assistant = Json::array(
      {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}});
  EXPECT_EQ(param_of({{"messages", ends_assistant}}), "messages");
  EXPECT_EQ(param_of({{"messages", Json::array({{{"role", "function"}, {"content", "x"}}})}}),
            "messages[0].role");
  EXPECT_EQ(
      param_of({{"messages", Json::array({{{"role", "user"}, {"content", "x"}, {"audio", 1}}})}}),
      "messages[0].audio");
}

TEST(OpenAiRequest, ToolsAndToolChoice) {
  const Json tool{{"type", "function"},
                  {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}};
  auto r =
      parse({{"tools", Json::array({tool})},
             {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->generation.tool_choice.mode, kernex::ToolChoice::Mode::Named);
  EXPECT_EQ(param_of({{"tools", Json::array({tool, tool})}}), "tools[1].function.name");
  EXPECT_EQ(param_of({{"tools", Json::array({tool})},
                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}}),
            "tool_choice.function.name");
  Json bad_name = tool;
  bad_name["function"]["name"] = "../etc";
  EXPECT_EQ(param_of({{"tools", Json::array({bad_name})}}), "tools[0].function.name");
  EXPECT_EQ(param_of({{"tool_choice", "sometimes"}}), "tool_choice");
}

TEST(OpenAiRequest, IdentityComesFromHeadersAndMetadataNeverFromUser) {
  auto r = parse({{"user", "alice@example.com"}, {"metadata", {{"session_id", "s1"}}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->user, "alice@example.com");
  EXPECT_EQ(r->session, "s1");
  auto h =
      parse({{"user", "bob"}}, {{"x-session-id", "chat 7"}, {"x-kernex-if-busy", "interrupt"}});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->session, "chat 7");
  EXPECT_EQ(h->if_busy, kernex::server::IfBusy::Interrupt);
  auto none = parse({{"user", "carol"}});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->session, "");
  auto clash = parse({{"metadata", {{"session_id", "a"}}}}, {{"x-session-id", "b"}});
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().param, "metadata.session_id");
  EXPECT_EQ(param_of({{"user", std::string(300, 'u')}}), "user");
}

TEST(JsonSchemaGuard, RefusesWhatWouldCrashHangOrFetch) {
  for (
      const char* bad :
      {R"({"$ref":"#"})", R"({"allOf":[{"$ref":"#"}]})",
       R"({"not":{"anyOf":[{"$ref":"#/definitions/a"}]},"definitions":{"a":{"oneOf":[{"$ref":"#"}]}}})",
       R"({"$ref":"https://example.com/s.json"})", R"({"$ref":"#/missing"})", R"({"type":7})"}) {
    EXPECT_FALSE(kernex::check_json_schema(Json::parse(bad))) << bad;
  }
  // Recursion through a smaller value is fine; patterns are not run (std::regex backtracks).
  const Json tree = Json::parse(R"({"properties":{"kids":{"type":"array","items":{"$ref":"#"}}}})");
  EXPECT_TRUE(kernex::check_json_schema(tree));
  EXPECT_FALSE(kernex::schema_violation(tree, Json::parse(R"({"kids":[{"kids":[]}]})")));
  EXPECT_TRUE(kernex::schema_violation(tree, Json::parse(R"({"kids":[{"kids":3}]})")));
  const Json redos = Json::parse(R"({"type":"string","pattern":"(a+)+$"})");
  EXPECT_FALSE(kernex::schema_violation(redos, std::string(64, 'a') + "b"));
}

}  // namespace
