// The gemini plugin against recorded generateContent / streamGenerateContent exchanges.
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

constexpr const char* kKey = "AIzaSy-SECRET-KEY";

kernex::Result<std::shared_ptr<kernex::Provider>> create(const Json& config) {
  static kernex::PluginHost host = [] {
    kernex::PluginHost h;
    auto added = h.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/libkernex-provider-gemini.so");
    if (!added) ADD_FAILURE() << added.error().describe();
    return h;
  }();
  return host.create_provider("gemini", config);
}

std::shared_ptr<kernex::Provider> make(const FakeHttpServer& server) {
  auto p = create({{"base_url", server.url()}, {"api_key", kKey}, {"retry_base_ms", 1}});
  EXPECT_TRUE(p) << (p ? "" : p.error().describe());
  return p ? *p : nullptr;
}

std::vector<ToolSpec> tools() {
  return {
      ToolSpec{"calculate",
               "Evaluates arithmetic",
               Json::parse(R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
                       "additionalProperties":false,"properties":{"expression":{"type":["string","null"]}},
                       "required":["expression"]})"),
               {}},
      ToolSpec{"now", "Current time", Json{{"type", "object"}}, {}}};
}

const char* kText =
    R"({"candidates":[{"content":{"parts":[{"text":"Hello there!"}],"role":"model"},"finishReason":"STOP","avgLogprobs":-0.08}],"usageMetadata":{"promptTokenCount":2000,"candidatesTokenCount":4,"totalTokenCount":2024,"cachedContentTokenCount":1500,"thoughtsTokenCount":20},"modelVersion":"gemini-2.5-flash","responseId":"abc"})";

const char* kCall =
    R"({"candidates":[{"content":{"parts":[{"functionCall":{"name":"calculate","args":{"expression":"6*7"}},"thoughtSignature":"CiQB0e2Kb"},{"functionCall":{"name":"now","args":{}}}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":50,"candidatesTokenCount":10,"totalTokenCount":60},"modelVersion":"gemini-2.5-flash"})";

TEST(GeminiProvider, TextRequestShapeAndUsage) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server);
  Context ctx("Hi");
  ctx.system_prompt = "Be kind.";
  ctx.history = {ContextEntry::user("a"), ContextEntry::assistant("b")};
  auto r = p->complete(ctx, tools(), {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Hello there!");
  EXPECT_EQ(r->stop_reason, "end_turn");
  EXPECT_EQ(r->usage, (kernex::Usage{500, 24, 1500, 0, 0.0}));
  EXPECT_EQ(r->model, "gemini-2.5-flash");
  const auto req = server.requests().at(0);
  EXPECT_EQ(req.target, "/v1beta/models/gemini-2.5-flash:generateContent");
  EXPECT_EQ(req.header("x-goog-api-key"), kKey);
  EXPECT_EQ(req.target.find(kKey), std::string::npos);
  const Json body = Json::parse(req.body);
  EXPECT_EQ(body["systemInstruction"], Json::parse(R"({"parts":[{"text":"Be kind."}]})"));
  EXPECT_EQ(body["contents"],
            Json::parse(
                R"([{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},
                                             {"role":"user","parts":[{"text":"Hi"}]}])"));
  const Json& decls = body["tools"][0]["functionDeclarations"];
  ASSERT_EQ(decls.size(), 2u);
  EXPECT_EQ(decls[0]["parameters"],
            Json::parse(R"({"type":"object","properties":{"expression":{"type":"string"}},
                                                   "required":["expression"]})"));
  EXPECT_FALSE(decls[1].contains("parameters"));
}

// Thoughts are asked for by the provider's own option; without it the request has none.
TEST(GeminiProvider, ExtendedThinkingIsAProviderOption) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kText));
  server.push(FakeHttpServer::json(200, kText));
  auto plain = make(server);
  auto thinking = create({{"base_url", server.url()},
                          {"api_key", kKey},
                          {"retry_base_ms", 1},
                          {"extended_thinking", true}});
  ASSERT_TRUE(thinking) << thinking.error().describe();
  ASSERT_TRUE(plain->complete(Context("Hi"), {}, {}));
  ASSERT_TRUE((*thinking)->complete(Context("Hi"), {}, {}));
  const Json off = Json::parse(server.requests().at(0).body);
  const Json on = Json::parse(server.requests().at(1).body);
  EXPECT_FALSE(off.value("generationConfig", Json::object()).contains("thinkingConfig"));
  EXPECT_EQ(on["generationConfig"]["thinkingConfig"], (Json{{"includeThoughts", true}}));
  auto bad = create({{"base_url", server.url()}, {"api_key", kKey}, {"extended_thinking", 1}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().describe().find("extended_thinking"), std::string::npos);
}

TEST(GeminiProvider, FunctionCallsRoundTripWithSignatures) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kCall));
  server.push(FakeHttpServer::json(200, kText));
  auto p = make(server);
  Context ctx("compute");
  auto r = p->complete(ctx, tools(), {});
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].name, "calculate");
  EXPECT_EQ(r->tool_calls[0].arguments, (Json{{"expression", "6*7"}}));
  EXPECT_EQ(r->stop_reason, "tool_use");
  ContextEntry assistant = ContextEntry::assistant("");
  assistant.tool_calls = r->tool_calls;
  assistant.provider_state = r->provider_state;
  ctx.turn = {assistant,
              ContextEntry::tool(ToolResult{r->tool_calls[0].id, "calculate", "42", false}),
              ContextEntry::tool(ToolResult{r->tool_calls[1].id, "now", "no clock", true})};
  ASSERT_TRUE(p->complete(ctx, tools(), {}));
  const Json contents = Json::parse(server.requests().at(1).body)["contents"];
  ASSERT_EQ(contents.size(), 3u);
  EXPECT_EQ(contents[1]["role"], "model");
  EXPECT_EQ(contents[1]["parts"], Json::parse(kCall)["candidates"][0]["content"]["parts"]);
  EXPECT_EQ(contents[2], Json::parse(R"({"role":"user","parts":[
      {"functionResponse":{"name":"calculate","response":{"result":"42"}}},
      {"functionResponse":{"name":"now","response":{"error":"no clock"}}}]})"));
}

TEST(GeminiProvider, StreamsSseChunks) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({
      "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"The answer\"}],\"role\": "
      "\"model\"}}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": "
      "9},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n",
      "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" is 42.\"}],\"role\": "
      "\"model\"},\"finishReason\": \"STOP\"}],\"usageMetadata\": {\"promptTokenCount\": "
      "9,\"candidatesTokenCount\": 5,\"totalTokenCount\": 14},\"modelVersion\": "
      "\"gemini-2.5-flash\"}\r\n\r\n",
  }));
  auto p = make(server);
  std::string streamed;
  std::vector<StreamEvent::Kind> kinds;
  auto r = p->complete(Context("q"), {}, [&](const StreamEvent& e) {
    kinds.push_back(e.kind);
    if (e.kind == StreamEvent::Kind::TextDelta) streamed += e.text;
  });
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "The answer is 42.");
  EXPECT_EQ(streamed, "The answer is 42.");
  EXPECT_EQ(r->usage.output_tokens, 5u);
  EXPECT_EQ(r->provider_state["parts"], Json::parse(R"([{"text":"The answer is 42."}])"));
  EXPECT_EQ(kinds.back(), StreamEvent::Kind::Done);
  EXPECT_EQ(server.requests().at(0).target,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
}

TEST(GeminiProvider, CutStreamsErrorsAndModelIds) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse(
      {"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"The\"}]}}]}\r\n\r\n",
       "data: {\"candi"},
      true));
  server.push(FakeHttpServer::json(
      400,
      R"({"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}})"));
  auto p = make(server);
  ASSERT_FALSE(p->complete(Context("q"), {}, [](const StreamEvent&) {}));
  auto r = p->complete(Context("q"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("INVALID_ARGUMENT: API key not valid"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(r.error().message.find(kKey), std::string::npos);

  for (const char* bad :
       {"../v1beta/openapi", "gemini?key=x", "gemini#frag", "foo/bar", "foo bar"}) {
    Context ctx("q");
    ctx.model = bad;
    auto refused = p->complete(ctx, {}, {});
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().code, kernex::ErrorCode::Config) << bad;
  }
  EXPECT_EQ(server.requests().size(), 2u);  // refused ids never reached the server
  EXPECT_TRUE(create({{"api_key", "k"}, {"model", "models_legacy.v3"}}));
  EXPECT_FALSE(create({{"api_key", "k"}, {"model", "gemini?key=x"}}));
}

}  // namespace
