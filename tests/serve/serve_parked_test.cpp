// Issue 33: a run that called the client's tool ends with finish_reason "tool_calls" and is parked
// until the request carrying the tool results resumes it. The parked turn is durable: after
// kill -9 of `kernex serve` between the tool_calls answer and the follow-up, the follow-up still
// goes on from the turn the run left, with the result of the agent's own tool (which the client
// never saw). Parked turns belong to their tenant and session: results sent by another tenant, or
// in another session, are plain context and never continue someone else's turn.
#include <gtest/gtest.h>

#include <mutex>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

Json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}}}}},
              {"required", {"city"}}}}}}};
}

Json call(const std::string& id, const std::string& name, const Json& arguments) {
  return {{"id", id}, {"name", name}, {"arguments", arguments.dump()}};
}

// The model writes notes.txt with the agent's own `write` (call w1), then calls the client's
// get_weather (call_w1), then answers with what the last tool said. Every request body is kept.
struct ParkedWorld {
  FakeLlm llm;
  ServeWorld w;
  std::mutex mutex;
  std::vector<Json> bodies;

  ParkedWorld() {
    llm.set_responder([this](const FakeLlm::Request& r) {
      {
        std::lock_guard lock(mutex);
        bodies.push_back(r.body);
      }
      const Json& last = r.body["messages"].back();
      FakeLlm::Plan p;
      p.chunks = {""};
      if (last.value("role", "") == "user") {
        p.tool_calls = Json::array(
            {call("w1", "write", {{"file_path", "notes.txt"}, {"content", "server side"}})});
      } else if (last.value("tool_call_id", "") == "w1") {
        p.tool_calls = Json::array({call("call_w1", "get_weather", {{"city", "Oslo"}})});
      } else {
        p.chunks = {"It is " + (last["content"].is_string() ? last["content"].get<std::string>()
                                                            : last["content"].dump())};
      }
      return p;
    });
    w.write_config(ServeWorld::openai_provider(llm), "", "toolboxes:\n  - files\n");
  }
  Json last_body() {
    std::lock_guard lock(mutex);
    return bodies.empty() ? Json::object() : bodies.back();
  }
  // Whether the last provider request went on from the parked turn: the agent's own call w1 and
  // its result are in it, before the client's call and result.
  bool resumed_parked_turn() {
    const Json body = last_body();
    int w1 = -1, client = -1, i = 0;
    for (const auto& m : body.value("messages", Json::array())) {
      if (m.value("role", "") == "tool" && m.value("tool_call_id", "") == "w1") w1 = i;
      if (m.value("role", "") == "tool" && m.value("tool_call_id", "") == "call_w1") client = i;
      ++i;
    }
    return w1 >= 0 && client > w1;
  }
};

HttpResponse chat(int port, const Json& messages, const Headers& h = {}) {
  return request(
      port, "POST", "/v1/chat/completions",
      Json{{"model", "kernex"}, {"messages", messages}, {"tools", Json::array({weather_tool()})}}
          .dump(),
      h);
}

// The conversation after the tool_calls answer: the client's call and its result "sunny".
Json follow_up(const Json& messages, const Json& first_answer) {
  Json out = messages;
  out.push_back(first_answer["choices"][0]["message"]);
  out.push_back({{"role", "tool"}, {"tool_call_id", "call_w1"}, {"content", "sunny"}});
  return out;
}

TEST(ServeParked, AChatTurnParkedOnTheClientsToolSurvivesKillNine) {
  ParkedWorld c;
  ASSERT_TRUE(c.w.start());
  const Json messages = Json::array({{{"role", "user"}, {"content", "weather in Oslo?"}}});
  auto first = chat(c.w.port(), messages);
  ASSERT_EQ(first.status, 200) << first.body << c.w.log();
  ASSERT_EQ(first.json()["choices"][0]["finish_reason"], "tool_calls") << first.body;
  ASSERT_EQ(first.json()["choices"][0]["message"]["tool_calls"][0]["id"], "call_w1");

  ASSERT_TRUE(c.w.server.kill9());
  ASSERT_TRUE(c.w.start());
  auto second = chat(c.w.port(), follow_up(messages, first.json()));
  ASSERT_EQ(second.status, 200) << second.body << c.w.log();
  EXPECT_EQ(second.json()["choices"][0]["message"]["content"], "It is sunny") << second.body;
  EXPECT_TRUE(c.resumed_parked_turn())
      << "the follow-up goes on from the parked turn, the agent's own w1 included: "
      << c.last_body()["messages"].dump();
}

TEST(ServeParked, AResponseParkedOnAFunctionCallSurvivesKillNine) {
  ParkedWorld c;
  ASSERT_TRUE(c.w.start());
  const Json tools = Json::array(
      {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}});
  auto first =
      request(c.w.port(), "POST", "/v1/responses",
              Json{{"model", "kernex"}, {"input", "weather in Oslo?"}, {"tools", tools}}.dump());
  ASSERT_EQ(first.status, 200) << first.body << c.w.log();
  bool called = false;
  const Json r1 = first.json();
  for (const auto& item : r1["output"])
    called = called || (item["type"] == "function_call" && item["call_id"] == "call_w1");
  ASSERT_TRUE(called) << first.body;

  ASSERT_TRUE(c.w.server.kill9());
  ASSERT_TRUE(c.w.start());
  auto second = request(
      c.w.port(), "POST", "/v1/responses",
      Json{{"model", "kernex"},
           {"previous_response_id", r1["id"]},
           {"tools", tools},
           {"input",
            Json::array(
                {{{"type", "function_call_output"}, {"call_id", "call_w1"}, {"output", "sunny"}}})}}
          .dump());
  ASSERT_EQ(second.status, 200) << second.body << c.w.log();
  EXPECT_EQ(second.json()["output"][0]["content"][0]["text"], "It is sunny") << second.body;
  EXPECT_TRUE(c.resumed_parked_turn()) << c.last_body()["messages"].dump();
}

// The same call id and result from another tenant, or from the owner in another session, finds
// no parked turn (plain context); the owner in its own session does.
TEST(ServeParked, AParkedTurnBelongsToItsTenantAndSession) {
  ParkedWorld c;
  const Headers alpha = bearer(printed_key(c.w.keys({"add", "alpha"}).out));
  const Headers beta = bearer(printed_key(c.w.keys({"add", "beta"}).out));
  ASSERT_TRUE(c.w.start());
  auto in = [](Headers h, const std::string& session) {
    h.emplace_back("X-Session-Id", session);
    return h;
  };
  const Json messages = Json::array({{{"role", "user"}, {"content", "weather in Oslo?"}}});
  auto first = chat(c.w.port(), messages, in(alpha, "s1"));
  ASSERT_EQ(first.status, 200) << first.body << c.w.log();
  ASSERT_EQ(first.json()["choices"][0]["finish_reason"], "tool_calls") << first.body;
  const Json next = follow_up(messages, first.json());

  for (const auto& [who, session] :
       std::vector<std::pair<Headers, std::string>>{{beta, "s1"}, {alpha, "s2"}, {alpha, ""}}) {
    auto other = chat(c.w.port(), next, session.empty() ? who : in(who, session));
    ASSERT_EQ(other.status, 200) << other.body;
    EXPECT_FALSE(c.resumed_parked_turn())
        << "session '" << session << "': " << c.last_body()["messages"].dump();
  }
  auto own = chat(c.w.port(), next, in(alpha, "s1"));
  ASSERT_EQ(own.status, 200) << own.body;
  EXPECT_TRUE(c.resumed_parked_turn()) << c.last_body()["messages"].dump();
}

}  // namespace
