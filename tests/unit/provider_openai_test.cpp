// The openai plugin (and a preset) against a loopback server answering with recorded
// Chat Completions exchanges, buffered and streamed, plus one full Kernel::run.
#include <gtest/gtest.h>

#include <cmath>

#include "fake_http_server.hpp"
#include "kernex/kernel.hpp"
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

constexpr const char* kKey = "sk-test-SECRET-0123456789";

struct Loaded {
  kernex::PluginHost host;
  std::shared_ptr<kernex::Provider> provider;
};

kernex::Result<std::shared_ptr<kernex::Provider>> create(const std::string& plugin,
                                                         const Json& config) {
  static kernex::PluginHost host = [] {
    kernex::PluginHost h;
    for (const char* name : {"openai", "groq"}) {
      auto added =
          h.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/libkernex-provider-" + name + ".so");
      if (!added) ADD_FAILURE() << added.error().describe();
    }
    return h;
  }();
  return host.create_provider(plugin, config);
}

std::shared_ptr<kernex::Provider> make(const FakeHttpServer& server, Json extra = Json::object()) {
  Json config{{"base_url", server.url("/v1")},
              {"api_key", kKey},
              {"retry_base_ms", 1},
              {"model", "gpt-4o"}};
  for (auto& [k, v] : extra.items()) config[k] = v;
  auto p = create("openai", config);
  EXPECT_TRUE(p) << (p ? "" : p.error().describe());
  return p ? *p : nullptr;
}

std::vector<ToolSpec> tools() {
  return {ToolSpec{"calculate",
                   "Evaluates arithmetic",
                   Json{{"type", "object"}, {"properties", {{"expression", {{"type", "string"}}}}}},
                   {}}};
}

// Every numeric option is finite and in its documented range, or a Config error naming it: huge
// timeout_secs or retry_base_ms overflowed std::chrono and a request outlived its total timeout.
TEST(OpenAiOptions, NumbersOutOfRangeAreErrorsNamingTheOption) {
  const std::vector<std::pair<const char*, Json>> bad = {
      {"timeout_secs", std::nan("")},
      {"timeout_secs", INFINITY},
      {"timeout_secs", -1},
      {"timeout_secs", 0},
      {"timeout_secs", 1e300},
      {"read_timeout_secs", 1e19},
      {"connect_timeout_secs", "5"},
      {"retry_base_ms", 1e30},
      {"retry_base_ms", -1},
      {"retry_base_ms", 2.5},
      {"retry_base_ms", 9223372036854775807LL},
      {"max_retries", 11},
      {"max_retries", 1.5},
      {"max_tokens", 0},
      {"max_tokens", 1e20},
  };
  for (const auto& [key, value] : bad) {
    Json config{{"base_url", "http://127.0.0.1:9/v1"}, {"api_key", kKey}, {key, value}};
    auto p = create("openai", config);
    ASSERT_FALSE(p) << key << "=" << value;
    // The host reports the plugin's Config error as a failed create, cause kept in the text:
    // the expected type and range, or the lower bound a value falls under.
    const std::string text = p.error().describe();
    const std::string named = std::string("openai: option `") + key + "`: ";
    EXPECT_TRUE(text.find(named + "expected") != std::string::npos ||
                text.find(named + "must be positive") != std::string::npos)
        << text;
  }
  auto ok = create("openai", Json{{"base_url", "http://127.0.0.1:9/v1"},
                                  {"timeout_secs", 86400},
                                  {"retry_base_ms", 600000},
                                  {"max_retries", 10}});
  EXPECT_TRUE(ok) << ok.error().describe();
}

const char* kPlain =
    R"({"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion","created":1741569952,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I assist you today?","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"})";

const char* kTwoCalls =
    R"({"id":"chatcmpl-abc","object":"chat.completion","created":1741569952,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_12345xyz","type":"function","function":{"name":"calculate","arguments":"{\"expression\":\"6*7\"}"}},{"id":"call_67890abc","type":"function","function":{"name":"calculate","arguments":"{\"expression\":\"1+1\"}"}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0}}})";

std::string chunk(const std::string& delta, const std::string& finish = "null") {
  return R"(data: {"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":)" +
         delta + R"(,"logprobs":null,"finish_reason":)" + finish + "}]}\n\n";
}

const std::string kUsageChunk =
    R"(data: {"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":12,"total_tokens":1212,"prompt_tokens_details":{"cached_tokens":1024}}})"
    "\n\n";

TEST(OpenAiProvider, PlainTextRequestAndResponse) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  Context ctx("Hi");
  ctx.system_prompt = "Rules. KERNEX_CACHE_BOUNDARY Today is Monday.";
  ctx.history = {ContextEntry::user("earlier"), ContextEntry::assistant("reply")};
  auto r = p->complete(ctx, {}, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Hello! How can I assist you today?");
  EXPECT_EQ(r->stop_reason, "end_turn");
  EXPECT_EQ(r->model, "gpt-4o-2024-08-06");
  EXPECT_EQ(r->provider, "openai");
  EXPECT_EQ(r->usage.input_tokens, 19u);
  EXPECT_EQ(r->usage.output_tokens, 10u);

  const auto req = server.requests().at(0);
  EXPECT_EQ(req.target, "/v1/chat/completions");
  EXPECT_EQ(req.header("authorization"), std::string("Bearer ") + kKey);
  const Json body = Json::parse(req.body);
  EXPECT_EQ(body["model"], "gpt-4o");
  EXPECT_FALSE(body.contains("tools"));
  EXPECT_FALSE(body.contains("stream"));
  ASSERT_EQ(body["messages"].size(), 4u);
  EXPECT_EQ(body["messages"][0],
            (Json{{"role", "system"}, {"content", "Rules.\n\nToday is Monday."}}));
  EXPECT_EQ(body["messages"][1], (Json{{"role", "user"}, {"content", "earlier"}}));
  EXPECT_EQ(body["messages"][2], (Json{{"role", "assistant"}, {"content", "reply"}}));
  EXPECT_EQ(body["messages"][3], (Json{{"role", "user"}, {"content", "Hi"}}));
}

// The kernel's pool leases a twin per run in flight instead of parsing the options again: the twin
// sends exactly what its template would, over connections of its own.
TEST(OpenAiProvider, ATwinSendsWhatItsTemplateWould) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kPlain));
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server, {{"max_tokens", 77}});
  auto twin = p->concurrent_instance();
  ASSERT_NE(twin, nullptr);
  EXPECT_NE(twin.get(), p.get());
  EXPECT_EQ(twin->name(), "openai");
  EXPECT_EQ(twin->default_model(), "gpt-4o");
  ASSERT_TRUE(twin->complete(Context("Hi"), tools(), {}));
  ASSERT_TRUE(p->complete(Context("Hi"), tools(), {}));
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].target, requests[1].target);
  EXPECT_EQ(requests[0].header("authorization"), std::string("Bearer ") + kKey);
  EXPECT_EQ(requests[0].header("authorization"), requests[1].header("authorization"));
  EXPECT_EQ(Json::parse(requests[0].body), Json::parse(requests[1].body));
  EXPECT_EQ(Json::parse(requests[0].body)["max_tokens"], 77);
}

TEST(OpenAiProvider, SeveralToolCallsAndCachedUsage) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kTwoCalls));
  auto p = make(server);
  auto r = p->complete(Context("compute"), tools(), {});
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0],
            (ToolCall{"call_12345xyz", "calculate", Json{{"expression", "6*7"}}}));
  EXPECT_EQ(r->tool_calls[1].id, "call_67890abc");
  EXPECT_EQ(r->stop_reason, "tool_use");
  EXPECT_EQ(r->usage.input_tokens, 86u);  // 2006 prompt tokens, 1920 of them cached
  EXPECT_EQ(r->usage.cache_read_tokens, 1920u);
  EXPECT_EQ(r->usage.output_tokens, 300u);
  const Json body = Json::parse(server.requests().at(0).body);
  ASSERT_EQ(body["tools"].size(), 1u);
  EXPECT_EQ(body["tools"][0]["type"], "function");
  EXPECT_EQ(body["tools"][0]["function"]["name"], "calculate");
  EXPECT_EQ(body["tools"][0]["function"]["parameters"]["properties"]["expression"]["type"],
            "string");
}

// The tools' text comes from a cache shared by the plugin's instances (function_tools_text): each
// call must still send exactly its own toolset, however little it differs from the last one (a
// description, a schema, the order, one tool fewer), and a schema with invalid UTF-8 is sent
// with it replaced, as the rest of the body is.
TEST(OpenAiProvider, EachCallSendsItsOwnToolsetThroughTheSharedCache) {
  const ToolSpec base = tools().at(0);
  ToolSpec described = base;
  described.description = "Evaluates arithmetic, exactly";
  ToolSpec schema = base;
  schema.parameters["properties"]["expression"]["maxLength"] = 200;
  ToolSpec other{"lookup", "Finds a word", Json{{"type", "object"}}, {}};
  ToolSpec bad_utf8{"odd", std::string("caf\xC3"), Json{{"type", "object"}}, {}};
  const std::vector<std::vector<ToolSpec>> sets = {
      {base}, {described},         {schema},   {base, other}, {other, base},
      {base}, {base, other, base}, {bad_utf8}, {base}};
  FakeHttpServer server;
  for (std::size_t i = 0; i < sets.size(); ++i) server.push(FakeHttpServer::json(200, kPlain));
  auto first = make(server), second = make(server);
  for (std::size_t i = 0; i < sets.size(); ++i) {
    Context ctx("compute");
    ctx.generation.parallel_tool_calls = false;
    ASSERT_TRUE((i % 2 ? second : first)->complete(ctx, sets[i], {}));
  }
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), sets.size());
  for (std::size_t i = 0; i < sets.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    const Json body = Json::parse(requests[i].body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << requests[i].body;
    EXPECT_EQ(body["model"], "gpt-4o");
    EXPECT_EQ(body["parallel_tool_calls"], false);
    ASSERT_EQ(body["tools"].size(), sets[i].size());
    for (std::size_t t = 0; t < sets[i].size(); ++t) {
      const Json& f = body["tools"][t]["function"];
      EXPECT_EQ(body["tools"][t]["type"], "function");
      EXPECT_EQ(f["name"], sets[i][t].name);
      EXPECT_EQ(f["parameters"], sets[i][t].parameters);
      if (sets[i][t].name == "odd")
        EXPECT_EQ(f["description"], "caf\xEF\xBF\xBD");  // U+FFFD for the lone byte
      else
        EXPECT_EQ(f["description"], sets[i][t].description);
    }
  }
}

// Equal as JSON values is not the same text: one caller's (one tenant's) schema written with
// 200.0, or -0.0, must not decide how another caller's 200, or 0.0, is sent (a strict validator
// may take maxLength 200.0 for a float), so the shared cache matches number types and signs too.
TEST(OpenAiProvider, TheToolsCacheKeepsEachCallersNumbersAsWritten) {
  const auto with = [](Json value) {
    ToolSpec spec = tools().at(0);
    spec.name = "numbers";
    spec.parameters["properties"]["expression"]["maxLength"] = std::move(value);
    return std::vector<ToolSpec>{spec};
  };
  const std::vector<std::pair<Json, std::string>> calls = {{200.0, "200.0"}, {200, "200"},
                                                           {200u, "200"},    {-0.0, "-0.0"},
                                                           {0.0, "0.0"},     {200.0, "200.0"}};
  FakeHttpServer server;
  for (std::size_t i = 0; i < calls.size(); ++i) server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  for (const auto& [value, text] : calls)
    ASSERT_TRUE(p->complete(Context("compute"), with(value), {}));
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_NE(requests[i].body.find("\"maxLength\":" + calls[i].second + ","), std::string::npos)
        << "call " << i << ": " << requests[i].body;
  }
}

TEST(OpenAiProvider, SendsTheTurnsToolTrafficBack) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  Context ctx("compute");
  ContextEntry assistant = ContextEntry::assistant("");
  assistant.tool_calls = {ToolCall{"call_1", "calculate", Json{{"expression", "6*7"}}}};
  ctx.turn.push_back(assistant);
  ctx.turn.push_back(ContextEntry::tool(ToolResult{"call_1", "calculate", "42", false}));
  ASSERT_TRUE(p->complete(ctx, tools(), {}));
  const Json msgs = Json::parse(server.requests().at(0).body)["messages"];
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1]["role"], "assistant");
  EXPECT_TRUE(msgs[1]["content"].is_null());
  EXPECT_EQ(msgs[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(msgs[1]["tool_calls"][0]["function"]["arguments"], "{\"expression\":\"6*7\"}");
  EXPECT_EQ(msgs[2], (Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}));
}

TEST(OpenAiProvider, StreamsTextWithUsage) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({chunk(R"({"role":"assistant","content":"","refusal":null})"),
                                   chunk(R"({"content":"Hel"})"), chunk(R"({"content":"lo!"})"),
                                   chunk("{}", "\"stop\""), kUsageChunk, "data: [DONE]\n\n"}));
  auto p = make(server);
  std::vector<StreamEvent> events;
  auto r = p->complete(Context("Hi"), {}, [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "Hello!");
  EXPECT_EQ(r->usage.input_tokens, 176u);
  EXPECT_EQ(r->usage.cache_read_tokens, 1024u);
  EXPECT_EQ(r->usage.output_tokens, 12u);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::TextDelta);
  EXPECT_EQ(events[0].text, "Hel");
  EXPECT_EQ(events[1].text, "lo!");
  EXPECT_EQ(events[2].kind, StreamEvent::Kind::Usage);
  EXPECT_EQ(events[2].usage.cache_read_tokens, 1024u);
  EXPECT_EQ(events[2].stop_reason, "end_turn");
  EXPECT_EQ(events[3].kind, StreamEvent::Kind::Done);
  const Json body = Json::parse(server.requests().at(0).body);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

TEST(OpenAiProvider, StreamsToolCallDeltas) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({
      chunk(
          R"({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"calculate","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"expre"}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"ssion\":\"6*7\"}"}}]})"),
      chunk(
          R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"calculate","arguments":"{\"expression\":\"2\"}"}}]})"),
      chunk("{}", "\"tool_calls\""),
      "data: [DONE]\n\n",
  }));
  auto p = make(server);
  std::vector<StreamEvent> events;
  auto r =
      p->complete(Context("compute"), tools(), [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0], (ToolCall{"call_a", "calculate", Json{{"expression", "6*7"}}}));
  EXPECT_EQ(r->tool_calls[1], (ToolCall{"call_b", "calculate", Json{{"expression", "2"}}}));
  EXPECT_EQ(r->stop_reason, "tool_use");
  std::vector<StreamEvent::Kind> kinds;
  std::string args_a;
  for (const auto& e : events) {
    kinds.push_back(e.kind);
    if (e.kind == StreamEvent::Kind::ToolCallDelta && e.tool_call_id == "call_a") args_a += e.text;
  }
  using K = StreamEvent::Kind;
  EXPECT_EQ(kinds,
            (std::vector<K>{K::ToolCallStart, K::ToolCallDelta, K::ToolCallDelta, K::ToolCallStart,
                            K::ToolCallDelta, K::ToolCallEnd, K::ToolCallEnd, K::Usage, K::Done}));
  EXPECT_EQ(args_a, "{\"expression\":\"6*7\"}");
  EXPECT_EQ(events[0].tool_name, "calculate");
}

TEST(OpenAiProvider, AStreamCutMidEventIsAnErrorAndNotRetried) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse(
      {chunk(R"({"content":"Hel"})"), "data: {\"id\":\"chatcmpl-s1\",\"cho"}, true));
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  std::vector<StreamEvent> events;
  auto r = p->complete(Context("Hi"), {}, [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, kernex::ErrorCode::Provider);
  EXPECT_EQ(server.requests().size(), 1u);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().text, "Hel");
  EXPECT_EQ(events.back().kind, StreamEvent::Kind::Error);
}

TEST(OpenAiProvider, AStreamEndingWithoutFinishIsAnError) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({chunk(R"({"content":"Hel"})")}));
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, [](const StreamEvent&) {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("ended before"), std::string::npos) << r.error().message;
}

TEST(OpenAiProvider, ServerIgnoringStreamStillAnswers) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  std::string streamed;
  auto r = p->complete(Context("Hi"), {}, [&](const StreamEvent& e) {
    if (e.kind == StreamEvent::Kind::TextDelta) streamed += e.text;
  });
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(streamed, "Hello! How can I assist you today?");
}

TEST(OpenAiProvider, RetriesA429WithRetryAfterThenSucceeds) {
  FakeHttpServer server;
  server.push(FakeHttpServer::response(
      429,
      R"({"error":{"message":"Rate limit reached for gpt-4o","type":"requests","code":"rate_limit_exceeded"}})",
      "application/json", {{"Retry-After", "1"}}));
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  const auto start = std::chrono::steady_clock::now();
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(OpenAiProvider, Retries500ThenSucceeds) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(
      500, R"({"error":{"message":"The server had an error","type":"server_error"}})"));
  server.push(FakeHttpServer::json(200, kPlain));
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(OpenAiProvider, PersistentErrorsCarryStatusAndProviderMessage) {
  FakeHttpServer server;
  for (int i = 0; i < 4; ++i) {
    server.push(FakeHttpServer::json(
        503, R"({"error":{"message":"Engine overloaded","type":"server_error"}})"));
  }
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, kernex::ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("HTTP 503"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("server_error: Engine overloaded"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(server.requests().size(), 4u);
}

TEST(OpenAiProvider, StalledServerTimesOut) {
  FakeHttpServer server;
  server.push(FakeHttpServer::stall());
  auto p = make(server, {{"timeout_secs", 0.3}, {"max_retries", 0}});
  const auto start = std::chrono::steady_clock::now();
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("timed out"), std::string::npos) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(OpenAiProvider, MalformedJsonIsAnErrorWithAnExcerpt) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(
      200, R"({"id":"chatcmpl-x","choices":[{"index":0,"message":{"role":"assis)"));
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a JSON object"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("chatcmpl-x"), std::string::npos);
}

// nlohmann's dump() and copies recurse: a body nested this deep must be refused at the parse, not
// crash the kernel when the response is later logged or copied.
TEST(OpenAiProvider, DeeplyNestedJsonIsAnErrorNotACrash) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, R"({"id":"chatcmpl-x","choices":)" +
                                            std::string(200000, '[') + std::string(200000, ']') +
                                            "}"));
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a JSON object"), std::string::npos)
      << r.error().message.substr(0, 300);
}

TEST(OpenAiProvider, HtmlErrorPageIsReportedAsSuch) {
  FakeHttpServer server;
  const std::string page =
      "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1>"
      "</center><hr><center>nginx</center></body></html>" +
      std::string(5000, ' ');
  server.push(FakeHttpServer::response(502, page, "text/html"));
  auto p = make(server, {{"max_retries", 0}});
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("HTTP 502"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("HTML page"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("bytes truncated"), std::string::npos) << r.error().message;
  EXPECT_LT(r.error().message.size(), 3000u);
}

TEST(OpenAiProvider, KeysNeverAppearInErrors) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(
      401,
      std::string(R"({"error":{"message":"Incorrect API key provided: )") + kKey +
          R"(. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}})"));
  auto p = make(server);
  auto r = p->complete(Context("Hi"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().describe().find(kKey), std::string::npos) << r.error().describe();
  EXPECT_NE(r.error().message.find("[REDACTED]"), std::string::npos);
  EXPECT_NE(r.error().message.find("HTTP 401"), std::string::npos);
}

TEST(OpenAiProvider, RefusesPlainHttpForRemoteHostsAndMissingKeys) {
  auto plain = create("openai", {{"base_url", "http://api.example.com/v1"}, {"api_key", kKey}});
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().describe().find("https://"), std::string::npos)
      << plain.error().describe();
  EXPECT_EQ(plain.error().describe().find(kKey), std::string::npos);
  auto keyless = create("openai", {{"api_key_env", "KERNEX_TEST_SURELY_UNSET_KEY"}});
  ASSERT_FALSE(keyless);
  EXPECT_NE(keyless.error().describe().find("KERNEX_TEST_SURELY_UNSET_KEY"), std::string::npos);
  auto unknown = create("openai", {{"api_key", "x"}, {"temprature", 1}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().describe().find("temprature"), std::string::npos);
  auto preset = create("openai", {{"api_key", "x"}, {"preset", "nope"}});
  ASSERT_FALSE(preset);
  EXPECT_NE(preset.error().describe().find("groq"), std::string::npos);
  // Loopback servers need neither https nor a key.
  auto local = create("openai", {{"base_url", "http://127.0.0.1:1/v1"},
                                 {"api_key_env", "KERNEX_TEST_SURELY_UNSET_KEY"}});
  EXPECT_TRUE(local);
}

// Issue 33: a self-hosted server on a private network (vLLM in a compose network) over plain
// http, once the operator opts in for that provider; a key is then not required either. The opt-in
// is a boolean, and it says nothing about https hosts.
TEST(OpenAiProvider, AllowInsecureHttpOptsInToPlainHttpForOtherHosts) {
  auto vllm = create("openai", {{"base_url", "http://vllm:8000/v1"},
                                {"api_key_env", "KERNEX_TEST_SURELY_UNSET_KEY"},
                                {"allow_insecure_http", true}});
  EXPECT_TRUE(vllm) << vllm.error().describe();
  auto keyed = create(
      "openai",
      {{"base_url", "http://10.1.2.3:8000/v1"}, {"api_key", kKey}, {"allow_insecure_http", true}});
  EXPECT_TRUE(keyed) << keyed.error().describe();
  auto off = create(
      "openai",
      {{"base_url", "http://vllm:8000/v1"}, {"api_key", kKey}, {"allow_insecure_http", false}});
  ASSERT_FALSE(off);
  EXPECT_NE(off.error().describe().find("allow_insecure_http"), std::string::npos)
      << off.error().describe();
  auto not_bool = create(
      "openai",
      {{"base_url", "http://vllm:8000/v1"}, {"api_key", kKey}, {"allow_insecure_http", "yes"}});
  ASSERT_FALSE(not_bool);
  EXPECT_NE(not_bool.error().describe().find("allow_insecure_http"), std::string::npos);
}

// Provider options go through the typed config reader (kernex/config_fields.hpp): each error
// names the provider and the option, what was expected and what was given; an unknown option
// lists the known ones and suggests the nearest; nothing given crashes the plugin.
TEST(OpenAiOptions, OptionsAreReadThroughTheFieldTables) {
  auto typo = create("openai", {{"api_key", "x"}, {"timeout_sec", 5}});
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().describe().find("openai: option `timeout_sec`: unknown key (expected one "
                                         "of: preset, model, base_url"),
            std::string::npos)
      << typo.error().describe();
  EXPECT_NE(typo.error().describe().find("did you mean `timeout_secs`?"), std::string::npos);
  // A preset plugin takes the common options only.
  auto preset = create("groq", {{"api_key", "x"}, {"preset", "openai"}});
  ASSERT_FALSE(preset);
  EXPECT_NE(preset.error().describe().find("groq: option `preset`: unknown key"), std::string::npos)
      << preset.error().describe();
  auto model = create("openai", {{"api_key", "x"}, {"model", 4}});
  ASSERT_FALSE(model);
  EXPECT_NE(model.error().describe().find("openai: option `model`: expected a string, got 4"),
            std::string::npos)
      << model.error().describe();
  auto list = create("openai", Json::array({1, 2}));
  ASSERT_FALSE(list);
  EXPECT_NE(list.error().describe().find("openai: options: expected a mapping"), std::string::npos)
      << list.error().describe();
  auto huge = create(
      "openai", {{"api_key", "x"}, {"model", std::string(100'000, 'm')}, {"max_retries", "1"}});
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().describe().find("option `max_retries`: expected a non-negative integer, "
                                         "got \"1\""),
            std::string::npos)
      << huge.error().describe();
  auto deep = create("openai", {{"api_key", "x"}, {"base_url", Json{{"a", Json::array({1})}}}});
  ASSERT_FALSE(deep);
  EXPECT_NE(deep.error().describe().find("option `base_url`: expected a string, got a mapping"),
            std::string::npos)
      << deep.error().describe();
  // null keeps the default, as in the rest of kernex.yaml.
  auto nulls = create("openai", {{"base_url", "http://127.0.0.1:9/v1"}, {"model", nullptr}});
  EXPECT_TRUE(nulls) << nulls.error().describe();
}

TEST(OpenAiProvider, PresetPluginsCarryTheirDefaults) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, kPlain));
  auto groq = create("groq", {{"base_url", server.url("/openai/v1")}});
  ASSERT_TRUE(groq) << groq.error().describe();
  EXPECT_EQ((*groq)->name(), "groq");
  EXPECT_EQ((*groq)->default_model(), "llama-3.3-70b-versatile");
  auto r = (*groq)->complete(Context("Hi"), {}, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->provider, "groq");
  EXPECT_EQ(server.requests().at(0).target, "/openai/v1/chat/completions");
  EXPECT_EQ(server.requests().at(0).header("authorization"), "");  // no key configured for loopback
  auto via_option = create("openai", {{"preset", "mistral"}, {"api_key", "x"}});
  ASSERT_TRUE(via_option) << via_option.error().describe();
  EXPECT_EQ((*via_option)->name(), "mistral");
  EXPECT_EQ((*via_option)->default_model(), "mistral-small-latest");
}

// The whole agentic loop with streaming on: a streamed tool call runs the builtin calculator,
// its result goes back to the server, and the streamed answer ends the run.
TEST(OpenAiProvider, KernelRunsTheLoopWithStreaming) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({
      chunk(
          R"({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_calc","type":"function","function":{"name":"calculate","arguments":""}}]})"),
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"expression\":\"6*7\"}"}}]})"),
      chunk("{}", "\"tool_calls\""),
      R"(data: {"id":"c","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":5}})"
      "\n\n",
      "data: [DONE]\n\n",
  }));
  server.push(FakeHttpServer::sse(
      {chunk(R"({"content":"The answer is "})"), chunk(R"({"content":"42."})"),
       chunk("{}", "\"stop\""),
       R"(data: {"id":"c","choices":[],"usage":{"prompt_tokens":70,"completion_tokens":6}})"
       "\n\n",
       "data: [DONE]\n\n"}));
  kernex::Config config;
  config.provider.name = "openai";
  config.provider.config = {
      {"base_url", server.url("/v1")}, {"api_key", kKey}, {"model", "gpt-4o"}};
  config.toolboxes = std::vector<kernex::PluginRef>{kernex::PluginRef{"builtin", Json::object()}};
  config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  auto kernel = kernex::Kernel::create(std::move(config));
  ASSERT_TRUE(kernel) << kernel.error().describe();
  std::string streamed;
  kernex::RunOptions options;
  options.sink = [&](const StreamEvent& e) {
    if (e.kind == StreamEvent::Kind::TextDelta) streamed += e.text;
  };
  auto run = (*kernel)->run(kernex::Request::from_text("test", "What is 6*7?"), options);
  ASSERT_TRUE(run) << run.error().describe();
  EXPECT_EQ(run->text, "The answer is 42.");
  EXPECT_EQ(streamed, "The answer is 42.");
  EXPECT_EQ(run->outcome, kernex::Outcome::EndTurn);
  EXPECT_EQ(run->turns, 2u);
  ASSERT_EQ(run->tool_calls.size(), 1u);
  EXPECT_EQ(run->tool_calls[0].result.content, "42");
  EXPECT_EQ(run->usage.input_tokens, 120u);
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  const Json second = Json::parse(reqs[1].body);
  const Json& msgs = second["messages"];
  EXPECT_EQ(msgs[msgs.size() - 1],
            (Json{{"role", "tool"}, {"tool_call_id", "call_calc"}, {"content", "42"}}));
  EXPECT_EQ(msgs[msgs.size() - 2]["tool_calls"][0]["function"]["name"], "calculate");
  EXPECT_EQ(server.connections(), 1u);  // both turns on one kept-alive connection
}

}  // namespace
