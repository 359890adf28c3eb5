// The anthropic plugin against recorded Messages API exchanges: cache boundary, tool_use,
// thinking replay through provider_state, cache usage, SSE streaming and its failures.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "fake_http_server.hpp"
#include "kernex/plugin_host.hpp"

namespace {

using kernex::Context;
using kernex::ContextEntry;
using kernex::Json;
using kernex::StreamEvent;
using kernex::ToolCall;
using kernex::ToolResult;
using kernex::ToolSpec;
using kernex::test::FakeHttpServer;

constexpr const char* kKey = "sk-ant-api03-SECRET";

kernex::Result<std::shared_ptr<kernex::Provider>> create(const Json& config) {
  static kernex::PluginHost host = [] {
    kernex::PluginHost h;
    auto added =
        h.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/libkernex-provider-anthropic.so");
    if (!added) ADD_FAILURE() << added.error().describe();
    return h;
  }();
  return host.create_provider("anthropic", config);
}

std::shared_ptr<kernex::Provider> make(const FakeHttpServer& server, Json extra = Json::object()) {
  Json config{{"base_url", server.url()}, {"api_key", kKey}, {"retry_base_ms", 1}};
  for (auto& [k, v] : extra.items()) config[k] = v;
  auto p = create(config);
  EXPECT_TRUE(p) << (p ? "" : p.error().describe());
  return p ? *p : nullptr;
}

std::vector<ToolSpec> tools() {
  return {ToolSpec{"calculate",
                   "Evaluates arithmetic",
                   Json{{"type", "object"}, {"properties", {{"expression", {{"type", "string"}}}}}},
                   {}}};
}

const char* kText =
    R"({"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":512,"cache_read_input_tokens":1024,"output_tokens":3}})";

const char* kThinkingTool =
    R"({"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[{"type":"thinking","thinking":"Need the calculator.","signature":"sig-1"},{"type":"redacted_thinking","data":"EmwKAhgBEgy3va"},{"type":"text","text":"Let me compute."},{"type":"tool_use","id":"toolu_123","name":"calculate","input":{"expression":"6*7"}},{"type":"tool_use","id":"toolu_456","name":"calculate","input":{"expression":"1+1"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":40}})";

std::string ev(const std::string& name, const std::string& data) {
  return "event: " + name + "\ndata: " + data + "\n\n";
}

TEST(AnthropicProvider, TextWithCacheBoundaryAndCacheUsage) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server);
  Context ctx("Hi");
  ctx.system_prompt = "Stable rules.\nKERNEX_CACHE_BOUNDARY\nDynamic context.";
  auto r = p->complete(ctx, {}, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Hello!");
  EXPECT_EQ(r->stop_reason, "end_turn");
  EXPECT_EQ(r->usage, (kernex::Usage{12, 3, 1024, 512, 0.0}));
  const auto req = server.requests().at(0);
  EXPECT_EQ(req.target, "/v1/messages");
  EXPECT_EQ(req.header("x-api-key"), kKey);
  EXPECT_EQ(req.header("anthropic-version"), "2023-06-01");
  EXPECT_EQ(req.header("anthropic-beta"), "");
  const Json body = Json::parse(req.body);
  EXPECT_EQ(body["max_tokens"], 16384);
  EXPECT_EQ(
      body["system"],
      Json::parse(R"([{"type":"text","text":"Stable rules.","cache_control":{"type":"ephemeral"}},
                            {"type":"text","text":"Dynamic context."}])"));
  EXPECT_EQ(body["messages"],
            Json::parse(R"([{"role":"user","content":[{"type":"text","text":"Hi"}]}])"));
  EXPECT_FALSE(body.contains("thinking"));
  EXPECT_FALSE(body.contains("tools"));
}

TEST(AnthropicProvider, ToolUseWithThinkingIsReplayedIntact) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kThinkingTool));
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server, {{"extended_thinking", true}});
  Context ctx("compute");
  auto r = p->complete(ctx, tools(), {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Let me compute.");
  EXPECT_EQ(r->thinking, "Need the calculator.");
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0], (ToolCall{"toolu_123", "calculate", Json{{"expression", "6*7"}}}));
  EXPECT_EQ(r->stop_reason, "tool_use");
  const Json first = Json::parse(server.requests().at(0).body);
  EXPECT_EQ(first["thinking"], (Json{{"type", "adaptive"}}));
  EXPECT_EQ(first["tools"][0],
            Json::parse(R"({"name":"calculate","description":"Evaluates arithmetic",
      "input_schema":{"type":"object","properties":{"expression":{"type":"string"}}}})"));

  // The loop appends the assistant entry (with provider_state) and the results.
  ContextEntry assistant = ContextEntry::assistant(r->text);
  assistant.tool_calls = r->tool_calls;
  assistant.provider_state = r->provider_state;
  ctx.turn = {assistant, ContextEntry::tool(ToolResult{"toolu_123", "calculate", "42", false}),
              ContextEntry::tool(ToolResult{"toolu_456", "calculate", "bad", true})};
  ASSERT_TRUE(p->complete(ctx, tools(), {}));
  const Json msgs = Json::parse(server.requests().at(1).body)["messages"];
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1]["role"], "assistant");
  EXPECT_EQ(msgs[1]["content"],
            Json::parse(kThinkingTool)["content"]);  // signature sig-1 unchanged
  EXPECT_EQ(msgs[2], Json::parse(R"({"role":"user","content":[
      {"type":"tool_result","tool_use_id":"toolu_123","content":"42"},
      {"type":"tool_result","tool_use_id":"toolu_456","content":"bad","is_error":true}]})"));
}

// Extended thinking is the provider's option; a token budget turns it on with that budget.
TEST(AnthropicProvider, ThinkingBudgetTurnsThinkingOnWithThatBudget) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server, {{"thinking_budget", 2048}});
  ASSERT_TRUE(p->complete(Context("Hi"), {}, {}));
  EXPECT_EQ(Json::parse(server.requests().at(0).body)["thinking"],
            (Json{{"type", "enabled"}, {"budget_tokens", 2048}}));
}

// Its own options are fields beside the common ones, read with their types and ranges.
TEST(AnthropicProvider, ItsOwnOptionsAreTypedFields) {
  const Json base{{"base_url", "http://127.0.0.1:9"}, {"api_key", "x"}};
  for (const auto& [extra, wanted] : std::vector<std::pair<Json, std::string>>{
           {{{"thinking_budget", 0}}, "anthropic: option `thinking_budget`: must be positive"},
           {{{"thinking_budget", 1e12}},
            "anthropic: option `thinking_budget`: expected a non-negative integer"},
           {{{"extended_thinking", "yes"}},
            "anthropic: option `extended_thinking`: expected true or false, got \"yes\""},
           {{{"thinking", true}},
            "anthropic: option `thinking`: unknown key (expected one of: extended_thinking, "
            "thinking_budget, model"}}) {
    Json config = base;
    config.update(extra);
    auto p = create(config);
    ASSERT_FALSE(p) << config;
    EXPECT_NE(p.error().describe().find(wanted), std::string::npos) << p.error().describe();
  }
}

TEST(AnthropicProvider, BuildsToolUseBlocksWithoutProviderState) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server);
  Context ctx("compute");
  ContextEntry assistant = ContextEntry::assistant("");
  assistant.tool_calls = {ToolCall{"toolu_9", "calculate", Json{{"expression", "2"}}}};
  ctx.turn = {assistant, ContextEntry::tool(ToolResult{"toolu_9", "calculate", "2", false})};
  ASSERT_TRUE(p->complete(ctx, tools(), {}));
  const Json msgs = Json::parse(server.requests().at(0).body)["messages"];
  EXPECT_EQ(
      msgs[1]["content"],
      Json::parse(
          R"([{"type":"tool_use","id":"toolu_9","name":"calculate","input":{"expression":"2"}}])"));
}

TEST(AnthropicProvider, StreamsTextThinkingAndToolUse) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({
      ev("message_start",
         R"({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-6","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":559,"cache_creation_input_tokens":0,"cache_read_input_tokens":40,"output_tokens":1}}})"),
      ev("content_block_start",
         R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think"}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}})"),
      ev("content_block_stop", R"({"type":"content_block_stop","index":0})"),
      ev("ping", R"({"type": "ping"})"),
      ev("content_block_start",
         R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Okay, "}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"computing."}})"),
      ev("content_block_stop", R"({"type":"content_block_stop","index":1})"),
      ev("content_block_start",
         R"({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"calculate","input":{}}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"expression\": \"6"}})"),
      ev("content_block_delta",
         R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"*7\"}"}})"),
      ev("content_block_stop", R"({"type":"content_block_stop","index":2})"),
      ev("message_delta",
         R"({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":83}})"),
      ev("message_stop", R"({"type":"message_stop"})"),
  }));
  auto p = make(server);
  std::vector<StreamEvent> events;
  auto r =
      p->complete(Context("compute"), tools(), [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Okay, computing.");
  EXPECT_EQ(r->thinking, "Let me think");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0],
            (ToolCall{"toolu_01T1x1fJ34qAmk2tNTrN7Up6", "calculate", Json{{"expression", "6*7"}}}));
  EXPECT_EQ(r->usage, (kernex::Usage{559, 83, 40, 0, 0.0}));
  EXPECT_EQ(r->stop_reason, "tool_use");
  const Json& blocks = r->provider_state["content"];
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0]["signature"], "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds");
  EXPECT_EQ(blocks[2]["input"], (Json{{"expression", "6*7"}}));
  using K = StreamEvent::Kind;
  std::vector<K> kinds;
  for (const auto& e : events) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<K>{K::ThinkingDelta, K::TextDelta, K::TextDelta, K::ToolCallStart,
                                   K::ToolCallDelta, K::ToolCallDelta, K::ToolCallEnd, K::Usage,
                                   K::Done}));
  EXPECT_EQ(Json::parse(server.requests().at(0).body)["stream"], true);
}

TEST(AnthropicProvider, StreamErrorsAreSurfaced) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({
      ev("message_start",
         R"({"type":"message_start","message":{"model":"claude-sonnet-4-6","usage":{"input_tokens":5,"output_tokens":1}}})"),
      ev("error", R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"),
  }));
  auto p = make(server);
  std::vector<StreamEvent> events;
  auto r = p->complete(Context("Hi"), {}, [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("overloaded_error: Overloaded"), std::string::npos)
      << r.error().message;
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, StreamEvent::Kind::Error);
}

TEST(AnthropicProvider, AStreamWithoutMessageStopIsCut) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse(
      {
          ev("message_start",
             R"({"type":"message_start","message":{"model":"m","usage":{"input_tokens":5}}})"),
          ev("content_block_start",
             R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})"),
          "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"ind",
      },
      true));
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, [](const StreamEvent&) {});
  ASSERT_FALSE(r);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(AnthropicProvider, ErrorsAndOptions) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(
      400,
      R"({"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 99999999 > 64000"}})"));
  auto p = make(server, {{"max_tokens", 99999999}});
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("HTTP 400"), std::string::npos);
  EXPECT_NE(r.error().message.find("invalid_request_error: max_tokens"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(r.error().message.find(kKey), std::string::npos);
  EXPECT_EQ(server.requests().size(), 1u);  // 4xx is not retried
  auto bad = create({{"api_key", kKey}, {"base_url", "http://api.anthropic.example/v1"}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().describe().find("https://"), std::string::npos) << bad.error().describe();
  auto keyless = create({{"api_key_env", "KERNEX_TEST_SURELY_UNSET_KEY"}});
  ASSERT_FALSE(keyless);
  EXPECT_NE(keyless.error().describe().find("KERNEX_TEST_SURELY_UNSET_KEY"), std::string::npos);
}

}  // namespace
