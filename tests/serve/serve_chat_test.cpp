// POST /v1/chat/completions as OpenAI documents it, over raw HTTP against `kernex serve` with a
// loopback OpenAI-compatible fake model: every field honoured or refused by name, the client's
// tools round trip (and a parked run goes on with its own tools' results), the request's messages
// are the conversation, `user` is no session, and a client that hangs up cancels its run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <future>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

Json user_msg(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

Json chat_body(Json messages, Json extra = Json::object()) {
  extra["model"] = "kernex";
  extra["messages"] = std::move(messages);
  return extra;
}

Json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Weather in a city"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}}}}},
              {"required", {"city"}}}}}}};
}

// A server on the fake model; every provider request body the fake sees is kept.
struct ChatWorld {
  FakeLlm llm;
  ServeWorld w;
  std::mutex mutex;
  std::vector<Json> bodies;
  std::function<FakeLlm::Plan(const FakeLlm::Request&)> plan = [](const FakeLlm::Request&) {
    return FakeLlm::Plan{};
  };

  explicit ChatWorld(const std::string& serve_body = "") {
    llm.set_responder([this](const FakeLlm::Request& r) {
      std::function<FakeLlm::Plan(const FakeLlm::Request&)> p;
      {
        std::lock_guard lock(mutex);
        bodies.push_back(r.body);
        p = plan;
      }
      return p(r);
    });
    w.write_config(ServeWorld::openai_provider(llm), serve_body);
  }
  bool start() { return w.start(); }
  void set_plan(std::function<FakeLlm::Plan(const FakeLlm::Request&)> p) {
    std::lock_guard lock(mutex);
    plan = std::move(p);
  }
  std::vector<Json> seen() {
    std::lock_guard lock(mutex);
    return bodies;
  }
  HttpResponse post(const Json& body, const Headers& headers = {}) {
    return request(w.port(), "POST", "/v1/chat/completions", body.dump(), headers);
  }
};

TEST(ServeChat, UnknownAndUnsupportedFieldsAreRefusedByName) {
  ChatWorld c;
  ASSERT_TRUE(c.start());
  const std::vector<std::pair<Json, std::string>> cases{
      {{{"frobnicate", 1}}, "frobnicate"},
      {{{"n", 2}}, "n"},
      {{{"logprobs", true}}, "logprobs"},
      {{{"top_logprobs", 3}}, "top_logprobs"},
      {{{"temperature", 3}}, "temperature"},
      {{{"top_p", -0.5}}, "top_p"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"stop", Json::array({"a", "b", "c", "d", "e"})}}, "stop"},
      {{{"audio", {{"voice", "alloy"}}}}, "audio"},
      {{{"logit_bias", {{"50256", -100}}}}, "logit_bias"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format.type"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", Json::array({{{"type", "web_search"}}})}}, "tools[0].type"},
      {{{"user", std::string("a\x01") + "b"}}, "user"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", 7}}}}}}}},
       "response_format.json_schema.schema"},
  };
  for (const auto& [extra, param] : cases) {
    auto r = c.post(chat_body(Json::array({user_msg("hi")}), extra));
    ASSERT_EQ(r.status, 400) << extra.dump() << " " << r.body << c.w.log();
    EXPECT_EQ(r.json()["error"].value("param", ""), param) << r.body;
    EXPECT_NE(r.json()["error"].value("message", "").find(param), std::string::npos) << r.body;
  }
  auto msg = c.post(chat_body(
      Json::array({{{"role", "user"},
                    {"content", Json::array({{{"type", "image_url"}, {"image_url", "x"}}})}}})));
  EXPECT_EQ(msg.status, 400);
  EXPECT_EQ(msg.json()["error"].value("param", ""), "messages[0].content[0].type") << msg.body;
  // Defaults some clients always send are fine; so is null for "not set".
  auto ok = c.post(chat_body(Json::array({user_msg("hi")}), {{"n", 1},
                                                             {"logprobs", false},
                                                             {"store", false},
                                                             {"temperature", nullptr},
                                                             {"stream_options", nullptr},
                                                             {"service_tier", "auto"}}));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(c.llm.requests(), 1u) << "no refused request reached the model";
}

TEST(ServeChat, SamplingFieldsAndResponseFormatReachTheProvider) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request&) { return FakeLlm::Plan{{"{\"city\": \"Oslo\"}"}}; });
  ASSERT_TRUE(c.start());
  const Json schema{{"type", "object"},
                    {"properties", {{"city", {{"type", "string"}}}}},
                    {"required", {"city"}},
                    {"additionalProperties", false}};
  auto r = c.post(
      chat_body(Json::array({user_msg("where?")}),
                {{"temperature", 0.25},
                 {"top_p", 0.5},
                 {"max_completion_tokens", 77},
                 {"stop", "END"},
                 {"seed", 42},
                 {"presence_penalty", 0.5},
                 {"frequency_penalty", -0.5},
                 {"response_format",
                  {{"type", "json_schema"},
                   {"json_schema", {{"name", "place"}, {"schema", schema}, {"strict", true}}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"], "{\"city\": \"Oslo\"}");
  auto seen = c.seen();
  ASSERT_EQ(seen.size(), 1u);
  const Json& b = seen[0];
  EXPECT_EQ(b["temperature"], 0.25);
  EXPECT_EQ(b["top_p"], 0.5);
  EXPECT_EQ(b["max_tokens"], 77);
  EXPECT_EQ(b["stop"], Json::array({"END"}));
  EXPECT_EQ(b["seed"], 42);
  EXPECT_EQ(b["presence_penalty"], 0.5);
  EXPECT_EQ(b["frequency_penalty"], -0.5);
  EXPECT_EQ(b["response_format"]["type"], "json_schema");
  EXPECT_EQ(b["response_format"]["json_schema"]["schema"], schema);
  EXPECT_EQ(b["response_format"]["json_schema"]["strict"], true);

  auto models = request(c.w.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  bool found = false;
  const Json listed = models.json();
  for (const auto& m : listed["data"]) {
    if (m["id"] != "anthropic") continue;
    found = true;
    EXPECT_EQ(m["kernex"]["response_format"], "kernel_checked");
    EXPECT_THAT(m["kernex"]["generation"]["not_sent"].get<std::vector<std::string>>(),
                ::testing::Contains("seed"));
  }
  EXPECT_TRUE(found) << models.body;
}

TEST(ServeChat, AnswerNotMatchingTheSchemaIsAskedAgain) {
  ChatWorld c;
  std::atomic<int> n{0};
  c.set_plan([&](const FakeLlm::Request&) {
    return FakeLlm::Plan{{++n == 1 ? "sure! here it is" : "```json\n{\"age\": 3}\n```"}};
  });
  ASSERT_TRUE(c.start());
  const Json schema{
      {"type", "object"}, {"properties", {{"age", {{"type", "integer"}}}}}, {"required", {"age"}}};
  auto r = c.post(chat_body(
      Json::array({user_msg("age?")}),
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "a"}, {"schema", schema}}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.json()["choices"][0]["message"]["content"].get<std::string>()),
            Json({{"age", 3}}));
  auto seen = c.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[1]["messages"].back()["content"].get<std::string>().find("rejected"),
            std::string::npos)
      << seen[1].dump();
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 6) << "both calls count";
}

TEST(ServeChat, ClientToolRoundTripResumesTheParkedTurn) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request& r) {
    FakeLlm::Plan p;
    const Json& last = r.body["messages"].back();
    if (last["role"] == "tool") {
      p.chunks = {"It is " + last["content"].get<std::string>()};
    } else {
      p.chunks = {""};
      p.tool_calls = Json::array(
          {{{"id", "call_w1"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"Oslo\"}"}}});
    }
    return p;
  });
  ASSERT_TRUE(c.start());
  Json messages = Json::array({user_msg("weather in Oslo?")});
  auto first = c.post(chat_body(messages, {{"tools", Json::array({weather_tool()})},
                                           {"parallel_tool_calls", false},
                                           {"tool_choice", "auto"}}));
  ASSERT_EQ(first.status, 200) << first.body;
  const Json choice = first.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << first.body;
  const Json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_w1");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json({{"city", "Oslo"}}));
  EXPECT_TRUE(choice["message"]["content"].is_null());
  {
    auto seen = c.seen();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_NE(seen[0]["tools"].dump().find("\"get_weather\""), std::string::npos)
        << "the client's tool is offered beside the agent's own: " << seen[0]["tools"].dump();
    EXPECT_EQ(seen[0]["parallel_tool_calls"], false);
  }
  messages.push_back(choice["message"]);
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_w1"}, {"content", "sunny"}});
  auto second = c.post(chat_body(messages, {{"tools", Json::array({weather_tool()})}}));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.json()["choices"][0]["message"]["content"], "It is sunny");
  EXPECT_EQ(second.json()["choices"][0]["finish_reason"], "stop");
  auto seen = c.seen();
  ASSERT_EQ(seen.size(), 2u);
  const Json& sent = seen[1]["messages"];
  ASSERT_GE(sent.size(), 3u) << sent.dump();
  EXPECT_EQ(sent[sent.size() - 2]["tool_calls"][0]["id"], "call_w1") << sent.dump();
  EXPECT_EQ(sent.back()["tool_call_id"], "call_w1");
}

TEST(ServeChat, StreamedToolCallsAreDeltasWithFinishReasonToolCalls) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request&) {
    FakeLlm::Plan p;
    p.chunks = {"checking"};
    p.tool_calls =
        Json::array({{{"id", "a"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"X\"}"}},
                     {{"id", "b"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"Y\"}"}}});
    return p;
  });
  ASSERT_TRUE(c.start());
  SseReader sse(c.w.port(), "POST", "/v1/chat/completions",
                chat_body(Json::array({user_msg("two cities")}),
                          {{"stream", true},
                           {"tools", Json::array({weather_tool()})},
                           {"stream_options", {{"include_usage", true}}}})
                    .dump());
  ASSERT_TRUE(sse.ok());
  auto events = sse.drain();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().data, "[DONE]");
  std::vector<std::string> ids;
  std::string finish;
  bool usage = false;
  for (const auto& e : events) {
    Json j = e.json();
    if (!j.is_object()) continue;
    if (j.contains("usage") && j["usage"].is_object()) usage = j["usage"]["completion_tokens"] == 3;
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const Json& ch = j["choices"][0];
    if (ch["delta"].contains("tool_calls")) {
      const Json& d = ch["delta"]["tool_calls"][0];
      EXPECT_EQ(d["index"], ids.size());
      ids.push_back(d["id"]);
    }
    if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(usage);
}

TEST(ServeChat, ForeignToolHistoryIsPlainContextAndMessagesAreTheConversation) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request&) { return FakeLlm::Plan{{"answer"}}; });
  ASSERT_TRUE(c.start());
  Json messages = Json::array(
      {{{"role", "system"}, {"content", "be brief"}},
       user_msg("first"),
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls", Json::array({{{"id", "x1"},
                                     {"type", "function"},
                                     {"function", {{"name", "lookup"}, {"arguments", "{}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "x1"}, {"content", "found it"}},
       {{"role", "assistant"}, {"content", "done"}},
       user_msg("second")});
  const Headers session{{"X-Session-Id", "chat-1"}};
  for (int i = 0; i < 2; ++i) {  // regenerate: the same conversation again
    auto r = c.post(chat_body(messages), session);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  auto seen = c.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["messages"], seen[1]["messages"]) << "regenerate never grows the history";
  std::size_t users = 0;
  for (const auto& m : seen[1]["messages"]) {
    users += m["role"] == "user" ? 1 : 0;
    EXPECT_FALSE(m.contains("tool_calls")) << "foreign calls are plain context: " << m.dump();
    EXPECT_NE(m["role"], "tool");
  }
  EXPECT_EQ(users, 2u) << seen[1]["messages"].dump();
  EXPECT_NE(seen[1]["messages"].dump().find("found it"), std::string::npos);
}

TEST(ServeChat, UserIsNoSessionAndNamedSessionsFollowIfBusy) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request& r) {
    FakeLlm::Plan p{{"ok"}};
    if (r.last_user() == "hold") p.hold_after = 0;
    return p;
  });
  ASSERT_TRUE(c.start());
  const Json user{{"user", "alice@example.com"}};
  auto held = std::async(std::launch::async,
                         [&] { return c.post(chat_body(Json::array({user_msg("hold")}), user)); });
  ASSERT_TRUE(c.llm.wait_holding(1, milliseconds(20000)));
  // A chat UI's title request beside the answer: same user, never refused.
  auto title = c.post(chat_body(Json::array({user_msg("title please")}), user));
  EXPECT_EQ(title.status, 200) << title.body;
  c.llm.release();
  EXPECT_EQ(held.get().status, 200);
}

TEST(ServeChat, BusyNamedSessionSays409WithAHeaderThisEndpointTakes) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request& r) {
    FakeLlm::Plan p{{"ok"}};
    if (r.last_user() == "slow") p.hold_after = 0;
    return p;
  });
  ASSERT_TRUE(c.start());
  const Headers s{{"X-Session-Id", "busy-1"}};
  auto first = std::async(std::launch::async,
                          [&] { return c.post(chat_body(Json::array({user_msg("slow")})), s); });
  ASSERT_TRUE(c.llm.wait_holding(1, milliseconds(20000)));
  auto refused = c.post(chat_body(Json::array({user_msg("again")})), s);
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_NE(refused.body.find("X-Kernex-If-Busy"), std::string::npos) << refused.body;
  EXPECT_EQ(refused.body.find("if_busy:"), std::string::npos) << "no field this endpoint refuses";
  Headers queued = s;
  queued.emplace_back("X-Kernex-If-Busy", "enqueue");
  auto later = std::async(std::launch::async, [&] {
    return c.post(chat_body(Json::array({user_msg("queued")})), queued);
  });
  auto other = c.post(
      chat_body(Json::array({user_msg("other")}), {{"metadata", {{"session_id", "busy-2"}}}}));
  EXPECT_EQ(other.status, 200) << "another named session is not busy: " << other.body;
  c.llm.release();
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(later.get().status, 200);
  auto bad = c.post(chat_body(Json::array({user_msg("x")})), {{"X-Kernex-If-Busy", "maybe"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["error"].value("param", ""), "X-Kernex-If-Busy");
}

// The run's status, once it is terminal (or "" after `limit`).
std::string final_status(int port, const std::string& run_id, milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    auto r = request(port, "GET", "/v1/runs/" + run_id);
    const std::string s = r.json().value("status", "");
    if (s == "done" || s == "cancelled" || s == "failed") return s;
    std::this_thread::sleep_for(milliseconds(10));  // polling a status, not standing in for sync
  }
  return "";
}

TEST(ServeChat, ClientThatHangsUpCancelsItsRunStreamingOrNot) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request&) {
    FakeLlm::Plan p{{"partial ", "rest"}};
    p.hold_after = 1;
    return p;
  });
  ASSERT_TRUE(c.start());
  std::vector<double> took_ms;
  for (int i = 0; i < 4; ++i) {
    const bool stream = i % 2 == 0;
    const std::string session = "gone-" + std::to_string(i);
    Connection conn(c.w.port());
    ASSERT_TRUE(conn.connected());
    conn.send(build_request(
        "POST", "/v1/chat/completions",
        chat_body(Json::array({user_msg("hang up " + std::to_string(i))}), {{"stream", stream}})
            .dump(),
        {{"X-Session-Id", session}}, false));
    ASSERT_TRUE(c.llm.wait_holding(1, milliseconds(20000)));
    const std::size_t hung = c.llm.hung_up();
    const auto t0 = Clock::now();
    conn.close();
    ASSERT_TRUE(c.llm.wait_hung_up(hung + 1, milliseconds(5000)))
        << "the provider request was not aborted\n"
        << c.w.log();
    took_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    auto runs = request(c.w.port(), "GET", "/v1/sessions/" + session + "/runs");
    ASSERT_EQ(runs.status, 200) << runs.body;
    const std::string run_id = runs.json()["runs"][0].value("run_id", "");
    EXPECT_EQ(final_status(c.w.port(), run_id, milliseconds(5000)), "cancelled");
    auto run = request(c.w.port(), "GET", "/v1/runs/" + run_id);
    EXPECT_EQ(run.json()["result"]["outcome"], "cancelled") << run.body;
    EXPECT_EQ(run.json()["result"]["text"], "partial ") << "the partial answer is kept";
  }
  std::sort(took_ms.begin(), took_ms.end());
  std::printf("hang-up to provider request aborted: fastest %.1f ms, slowest %.1f ms\n",
              took_ms.front(), took_ms.back());
  EXPECT_LT(took_ms.back(), 250.0) << "slowest cancel after hang-up: " << took_ms.back() << " ms";
}

TEST(ServeChat, OnDisconnectFinishLetsTheRunEnd) {
  ChatWorld c("  openai: {on_disconnect: finish}\n");
  c.set_plan([](const FakeLlm::Request&) {
    FakeLlm::Plan p{{"all ", "of it"}};
    p.hold_after = 1;
    return p;
  });
  ASSERT_TRUE(c.start());
  {
    Connection conn(c.w.port());
    conn.send(
        build_request("POST", "/v1/chat/completions",
                      chat_body(Json::array({user_msg("finish me")}), {{"stream", true}}).dump(),
                      {{"X-Session-Id", "fin"}}, false));
    ASSERT_TRUE(c.llm.wait_holding(1, milliseconds(20000)));
  }
  c.llm.release();
  auto runs = request(c.w.port(), "GET", "/v1/sessions/fin/runs");
  const std::string run_id = runs.json()["runs"][0].value("run_id", "");
  EXPECT_EQ(final_status(c.w.port(), run_id, milliseconds(10000)), "done");
  EXPECT_EQ(request(c.w.port(), "GET", "/v1/runs/" + run_id).json()["result"]["text"], "all of it");
}

TEST(ServeChat, CancelledStreamSaysCancelledNotLength) {
  ChatWorld c;
  c.set_plan([](const FakeLlm::Request&) {
    FakeLlm::Plan p{{"some ", "more"}};
    p.hold_after = 1;
    return p;
  });
  ASSERT_TRUE(c.start());
  SseReader sse(c.w.port(), "POST", "/v1/chat/completions",
                chat_body(Json::array({user_msg("cancel me")}), {{"stream", true}}).dump());
  ASSERT_TRUE(sse.ok());
  auto first = sse.next();
  ASSERT_TRUE(first);
  const std::string run_id = first->json().value("id", "").substr(std::string("chatcmpl-").size());
  ASSERT_TRUE(c.llm.wait_holding(1, milliseconds(20000)));
  auto cancel = request(c.w.port(), "POST", "/v1/runs/" + run_id + "/cancel");
  EXPECT_EQ(cancel.status, 202) << cancel.body;
  std::string finish;
  for (const auto& e : sse.drain()) {
    Json j = e.json();
    if (j.is_object() && j.contains("choices") && !j["choices"].empty() &&
        j["choices"][0]["finish_reason"].is_string())
      finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "cancelled");
}

// A provider key whose tail is the chunks' `object` (and the model echoing the key whole): serve's
// redaction takes the key out of the text and leaves every chunk's structure as OpenAI wrote it.
TEST(ServeChat, AKeyEndingInAProtocolNameNeverChangesTheStream) {
  const std::string key = "sk-proj-Zx81mNq4Lw0vBt6Rc2Yp-chat.completion.chunk";
  FakeLlm llm;
  llm.set_responder([&](const FakeLlm::Request&) {
    return FakeLlm::Plan{{"your key is ", key, " and the object is chat.completion.chunk"}};
  });
  ServeWorld w;
  w.write_config("provider:\n  name: openai\n  options:\n    base_url: " + llm.base_url() +
                 "\n    api_key: " + key + "\n");
  ASSERT_TRUE(w.start());
  SseReader sse(w.port(), "POST", "/v1/chat/completions",
                chat_body(Json::array({user_msg("echo")}), {{"stream", true}}).dump());
  ASSERT_TRUE(sse.ok());
  auto events = sse.drain();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().data, "[DONE]");
  std::string text;
  std::size_t chunks = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e.data.find(key), std::string::npos) << e.data;
    Json j = e.json();
    if (!j.is_object()) continue;
    ++chunks;
    EXPECT_EQ(j["object"], "chat.completion.chunk") << e.data;
    EXPECT_TRUE(j["id"].is_string() && j["id"].get<std::string>().starts_with("chatcmpl"))
        << e.data;
    if (!j["choices"].empty() && j["choices"][0]["delta"]["content"].is_string())
      text += j["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_GT(chunks, 1u);
  EXPECT_EQ(text.find(key), std::string::npos) << text;
  EXPECT_NE(text.find("[REDACTED]"), std::string::npos) << text;
}

}  // namespace
