// The ollama plugin against recorded /api/chat exchanges: tools and NDJSON streaming.
#include <gtest/gtest.h>

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

std::shared_ptr<kernex::Provider> make(const FakeHttpServer& server, Json extra = Json::object()) {
  static kernex::PluginHost host = [] {
    kernex::PluginHost h;
    auto added = h.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/libkernex-provider-ollama.so");
    if (!added) ADD_FAILURE() << added.error().describe();
    return h;
  }();
  Json config{{"base_url", server.url()}, {"retry_base_ms", 1}};
  for (auto& [k, v] : extra.items()) config[k] = v;
  auto p = host.create_provider("ollama", config);
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
    R"({"model":"llama3.2","created_at":"2023-12-12T14:13:43.416799Z","message":{"role":"assistant","content":"Hello! How are you today?"},"done":true,"done_reason":"stop","total_duration":5191566416,"load_duration":2154458,"prompt_eval_count":26,"prompt_eval_duration":383809000,"eval_count":298,"eval_duration":4799921000})";

const char* kTools =
    R"({"model":"llama3.2","created_at":"2024-07-22T20:33:28.123648Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"calculate","arguments":{"expression":"6*7"}}},{"function":{"name":"calculate","arguments":{"expression":"1+1"}}}]},"done_reason":"stop","done":true,"total_duration":885095291,"prompt_eval_count":40,"eval_count":60})";

TEST(OllamaProvider, PlainTextAndRequestShape) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server, {{"max_tokens", 100}});
  Context ctx("Hi");
  ctx.system_prompt = "Be brief. KERNEX_CACHE_BOUNDARY Now.";
  auto r = p->complete(ctx, {}, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Hello! How are you today?");
  EXPECT_EQ(r->usage.input_tokens, 26u);
  EXPECT_EQ(r->usage.output_tokens, 298u);
  EXPECT_EQ(r->stop_reason, "end_turn");
  EXPECT_EQ(r->provider, "ollama");
  const auto req = server.requests().at(0);
  EXPECT_EQ(req.target, "/api/chat");
  EXPECT_EQ(req.header("authorization"), "");
  const Json body = Json::parse(req.body);
  EXPECT_EQ(body["model"], "llama3.2");
  EXPECT_EQ(body["stream"], false);
  EXPECT_EQ(body["options"]["num_predict"], 100);
  EXPECT_EQ(body["messages"][0], (Json{{"role", "system"}, {"content", "Be brief.\n\nNow."}}));
}

TEST(OllamaProvider, ToolCallsAndTheirResults) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kTools));
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server);
  Context ctx("compute");
  auto r = p->complete(ctx, tools(), {});
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0], (ToolCall{"call_0", "calculate", Json{{"expression", "6*7"}}}));
  EXPECT_EQ(r->tool_calls[1].id, "call_1");
  EXPECT_EQ(r->stop_reason, "tool_use");
  EXPECT_EQ(Json::parse(server.requests().at(0).body)["tools"][0]["function"]["name"], "calculate");

  ContextEntry assistant = ContextEntry::assistant("");
  assistant.tool_calls = r->tool_calls;
  ctx.turn = {assistant, ContextEntry::tool(ToolResult{"call_0", "calculate", "42", false}),
              ContextEntry::tool(ToolResult{"call_1", "calculate", "2", false})};
  ASSERT_TRUE(p->complete(ctx, tools(), {}));
  const Json msgs = Json::parse(server.requests().at(1).body)["messages"];
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[1]["tool_calls"][0],
            Json::parse(R"({"function":{"name":"calculate","arguments":{"expression":"6*7"}}})"));
  EXPECT_EQ(msgs[2], (Json{{"role", "tool"}, {"content", "42"}, {"tool_name", "calculate"}}));
}

TEST(OllamaProvider, StreamsNdjson) {
  FakeHttpServer server;
  server.push(FakeHttpServer::chunked(
      200,
      {R"({"model":"llama3.2","created_at":"2023-08-04T08:52:19.385406455-07:00","message":{"role":"assistant","content":"The"},"done":false})"
       "\n",
       R"({"model":"llama3.2","created_at":"2023-08-04T08:52:19.4Z","message":{"role":"assistant","content":" sky"},"done":false})"
       "\n{\"model\":\"llama3.2\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_"
       "calls\":[{\"function\":{\"name\":\"calculate\",\"arguments\":{\"expression\":\"1\"}}}]},"
       "\"done\":false}\n",
       R"({"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":4883583458,"prompt_eval_count":26,"eval_count":282})"},
      "application/x-ndjson"));
  auto p = make(server);
  std::vector<StreamEvent> events;
  auto r = p->complete(Context("Why is the sky blue?"), tools(),
                       [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "The sky");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->usage.output_tokens, 282u);
  using K = StreamEvent::Kind;
  std::vector<K> kinds;
  for (const auto& e : events) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<K>{K::TextDelta, K::TextDelta, K::ToolCallStart, K::ToolCallDelta,
                                   K::ToolCallEnd, K::Usage, K::Done}));
  EXPECT_EQ(Json::parse(server.requests().at(0).body)["stream"], true);
}

TEST(OllamaProvider, CutStreamsAndErrors) {
  FakeHttpServer server;
  server.push(
      FakeHttpServer::chunked(200,
                              {R"({"model":"llama3.2","message":{"content":"The"},"done":false})"
                               "\n"},
                              "application/x-ndjson", true));
  server.push(
      FakeHttpServer::json(404, R"({"error":"model \"nope\" not found, try pulling it first"})"));
  auto p = make(server);
  auto cut = p->complete(Context("Hi"), {}, [](const StreamEvent&) {});
  ASSERT_FALSE(cut);
  auto missing = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("HTTP 404"), std::string::npos);
  EXPECT_NE(missing.error().message.find("not found, try pulling it first"), std::string::npos)
      << missing.error().message;
}

TEST(OllamaProvider, PlainHttpIsFineForRemoteHosts) {
  kernex::PluginHost host;
  ASSERT_TRUE(
      host.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/libkernex-provider-ollama.so"));
  auto p = host.create_provider("ollama", {{"base_url", "http://gpu-box.lan:11434"}});
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ((*p)->default_model(), "llama3.2");
}

}  // namespace
