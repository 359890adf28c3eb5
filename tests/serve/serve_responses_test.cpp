// Issue 33: OpenAI's Responses API on `kernex serve` (POST /v1/responses plain and streamed,
// previous_response_id, store, GET/DELETE /v1/responses/{id}, tenant scoping, forgetting a
// session) and GET /v1/models/{id}, over raw HTTP against a loopback fake model.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "pg_test_db.hpp"
#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

// A fake model that answers "answer N" and keeps every request body it got.
struct Recorder {
  FakeLlm llm;
  std::mutex mutex;
  std::vector<Json> bodies;
  Recorder() {
    llm.set_responder([this](const FakeLlm::Request& r) {
      std::lock_guard lock(mutex);
      bodies.push_back(r.body);
      return FakeLlm::Plan{{"answer ", std::to_string(bodies.size())}, std::nullopt};
    });
  }
  Json last() {
    std::lock_guard lock(mutex);
    return bodies.empty() ? Json() : bodies.back();
  }
};

// The texts of a chat request's messages, as "role: content".
std::vector<std::string> transcript(const Json& body) {
  std::vector<std::string> out;
  for (const auto& m : body.value("messages", Json::array())) {
    std::string content = m["content"].is_string() ? m["content"].get<std::string>() : "";
    out.push_back(m.value("role", "") + ": " + content);
  }
  return out;
}

class ServeResponses : public ::testing::Test {
 protected:
  void SetUp() override {
    w_.write_config(ServeWorld::openai_provider(model_.llm));
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }
  HttpResponse post(const Json& body, const Headers& h = {}) {
    return request(port_, "POST", "/v1/responses", body.dump(), h);
  }
  Recorder model_;
  ServeWorld w_;
  int port_ = 0;
};

TEST_F(ServeResponses, APlainResponseIsStoredAndReadBack) {
  auto r = post({{"model", "kernex"}, {"input", "hello"}, {"instructions", "be brief"}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json resp = Json::parse(r.body);
  EXPECT_EQ(resp["object"], "response");
  EXPECT_EQ(resp["status"], "completed");
  ASSERT_TRUE(resp["id"].get<std::string>().starts_with("resp_")) << resp.dump();
  ASSERT_EQ(resp["output"].size(), 1u) << resp.dump();
  EXPECT_EQ(resp["output"][0]["type"], "message");
  EXPECT_EQ(resp["output"][0]["role"], "assistant");
  EXPECT_EQ(resp["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], "answer 1");
  EXPECT_EQ(resp["instructions"], "be brief");
  EXPECT_TRUE(resp["usage"]["total_tokens"].is_number()) << resp.dump();
  // The instructions reached the model as system text.
  const Json sent = model_.last();
  EXPECT_EQ(sent["messages"][0]["role"], "system");
  EXPECT_NE(sent["messages"][0]["content"].get<std::string>().find("be brief"), std::string::npos);

  auto got = request(port_, "GET", "/v1/responses/" + resp["id"].get<std::string>());
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(Json::parse(got.body), resp);
  auto missing = request(port_, "GET", "/v1/responses/resp_nope");
  EXPECT_EQ(missing.status, 404) << missing.body;
}

TEST_F(ServeResponses, PreviousResponseIdContinuesTheConversation) {
  auto first = post({{"model", "kernex"}, {"input", "my name is Ada"}});
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string id = Json::parse(first.body)["id"];
  auto second =
      post({{"model", "kernex"},
            {"previous_response_id", id},
            {"input", Json::array({{{"role", "user"}, {"content", "what is my name?"}}})}});
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(Json::parse(second.body)["previous_response_id"], id);
  std::vector<std::string> seen = transcript(model_.last());
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(seen.end() - 3, seen.end()),
            (std::vector<std::string>{"user: my name is Ada", "assistant: answer 1",
                                      "user: what is my name?"}));
}

TEST_F(ServeResponses, StoreFalseKeepsNothing) {
  auto r = post({{"model", "kernex"}, {"input", "secret"}, {"store", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json resp = Json::parse(r.body);
  EXPECT_EQ(resp["store"], false);
  const std::string id = resp["id"];
  EXPECT_EQ(request(port_, "GET", "/v1/responses/" + id).status, 404);
  auto chained = post({{"model", "kernex"}, {"previous_response_id", id}, {"input", "more"}});
  EXPECT_EQ(chained.status, 400) << chained.body;
  EXPECT_EQ(chained.error_code(), "previous_response_not_found") << chained.body;
}

TEST_F(ServeResponses, StreamingSendsTheResponseEvents) {
  SseReader sse(port_, "POST", "/v1/responses",
                Json{{"model", "kernex"}, {"input", "stream please"}, {"stream", true}}.dump());
  ASSERT_TRUE(sse.ok()) << sse.rest_of_body();
  auto events = sse.drain();
  std::vector<std::string> types;
  std::string text;
  std::int64_t sequence = -1;
  Json completed;
  for (const auto& e : events) {
    Json j = e.json();
    ASSERT_TRUE(j.is_object()) << e.data;
    EXPECT_EQ(e.event, j["type"]);
    EXPECT_EQ(j["sequence_number"].get<std::int64_t>(), sequence + 1);
    sequence = j["sequence_number"];
    types.push_back(j["type"]);
    if (j["type"] == "response.output_text.delta") text += j["delta"].get<std::string>();
    if (j["type"] == "response.completed") completed = j["response"];
  }
  ASSERT_GE(types.size(), 8u);
  EXPECT_EQ(types[0], "response.created");
  EXPECT_EQ(types[1], "response.in_progress");
  EXPECT_EQ(types[2], "response.output_item.added");
  EXPECT_EQ(types[3], "response.content_part.added");
  EXPECT_EQ(types.back(), "response.completed");
  EXPECT_NE(std::find(types.begin(), types.end(), "response.output_text.done"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "response.output_item.done"), types.end());
  EXPECT_EQ(text, "answer 1");
  ASSERT_TRUE(completed.is_object());
  EXPECT_EQ(completed["status"], "completed");
  EXPECT_EQ(completed["output"][0]["content"][0]["text"], "answer 1");
  // Stored once streamed: readable, and continued from.
  auto got = request(port_, "GET", "/v1/responses/" + completed["id"].get<std::string>());
  EXPECT_EQ(got.status, 200) << got.body;
}

TEST_F(ServeResponses, UnknownAndUnsupportedFieldsAreRefusedByName) {
  for (const auto& [body, named] : std::vector<std::pair<Json, std::string>>{
           {{{"model", "kernex"}, {"input", "x"}, {"tempreature", 1}}, "tempreature"},
           {{{"model", "kernex"}, {"input", "x"}, {"background", true}}, "background"},
           {{{"model", "kernex"}, {"input", Json::array({{{"type", "reasoning"}}})}},
            "input[0].type"},
           {{{"model", "kernex"},
             {"input", "x"},
             {"tools", Json::array({{{"type", "web_search"}}})}},
            "tools[0].type"},
           {{{"model", "kernex"}}, "input"}}) {
    auto r = post(body);
    EXPECT_EQ(r.status, 400) << body.dump() << r.body;
    EXPECT_NE(r.body.find(named), std::string::npos) << body.dump() << r.body;
  }
}

TEST_F(ServeResponses, ForgettingTheSessionRemovesItsResponses) {
  auto r = post({{"model", "kernex"}, {"input", "in a session"}}, {{"X-Session-Id", "s-forget"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = Json::parse(r.body)["id"];
  ASSERT_EQ(request(port_, "GET", "/v1/responses/" + id).status, 200);
  auto forgotten = request(port_, "DELETE", "/v1/sessions/s-forget");
  ASSERT_EQ(forgotten.status, 200) << forgotten.body;
  EXPECT_EQ(request(port_, "GET", "/v1/responses/" + id).status, 404);
  // DELETE /v1/responses/{id} removes one.
  auto other = post({{"model", "kernex"}, {"input", "again"}});
  const std::string other_id = Json::parse(other.body)["id"];
  EXPECT_EQ(request(port_, "DELETE", "/v1/responses/" + other_id).status, 200);
  EXPECT_EQ(request(port_, "GET", "/v1/responses/" + other_id).status, 404);
}

TEST_F(ServeResponses, ModelsRetrieveAnswersOpenAiShapes) {
  auto known = request(port_, "GET", "/v1/models/kernex");
  ASSERT_EQ(known.status, 200) << known.body;
  Json m = Json::parse(known.body);
  EXPECT_EQ(m["id"], "kernex");
  EXPECT_EQ(m["object"], "model");
  EXPECT_TRUE(m.contains("created") && m.contains("owned_by")) << m.dump();
  auto unknown = request(port_, "GET", "/v1/models/no-such-model");
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_EQ(unknown.error_code(), "model_not_found");
  Json e = Json::parse(unknown.body);
  EXPECT_TRUE(e["error"]["message"].is_string());
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

// The client's function tools: a call to one ends the response with a function_call item (also
// streamed as the function-call events); function_call_output after previous_response_id goes on
// from the parked turn, and the model gets the client's result.
TEST(ServeResponsesTools, AClientFunctionCallRoundTrip) {
  FakeLlm llm;
  std::mutex mutex;
  Json last;
  llm.set_responder([&](const FakeLlm::Request& r) {
    std::lock_guard lock(mutex);
    last = r.body;
    const Json& messages = r.body["messages"];
    if (!messages.empty() && messages.back().value("role", "") == "tool")
      return FakeLlm::Plan{{"it is sunny"}, std::nullopt};
    FakeLlm::Plan plan{std::vector<std::string>{}, std::nullopt};
    plan.tool_calls = Json::array(
        {{{"id", "call_1"}, {"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}});
    return plan;
  });
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm));
  ASSERT_TRUE(w.start());
  const Json tools = Json::array(
      {{{"type", "function"},
        {"name", "get_weather"},
        {"description", "The weather in a city"},
        {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
  auto first =
      request(w.port(), "POST", "/v1/responses",
              Json{{"model", "kernex"}, {"input", "weather in Paris?"}, {"tools", tools}}.dump());
  ASSERT_EQ(first.status, 200) << first.body << w.log();
  Json r1 = Json::parse(first.body);
  EXPECT_EQ(r1["status"], "completed") << r1.dump();
  Json call;
  for (const auto& item : r1["output"])
    if (item["type"] == "function_call") call = item;
  ASSERT_TRUE(call.is_object()) << r1.dump();
  EXPECT_EQ(call["call_id"], "call_1");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["arguments"].get<std::string>()), (Json{{"city", "Paris"}}));

  auto second = request(w.port(), "POST", "/v1/responses",
                        Json{{"model", "kernex"},
                             {"previous_response_id", r1["id"]},
                             {"tools", tools},
                             {"input", Json::array({{{"type", "function_call_output"},
                                                     {"call_id", "call_1"},
                                                     {"output", "sunny, 24C"}}})}}
                            .dump());
  ASSERT_EQ(second.status, 200) << second.body << w.log();
  Json r2 = Json::parse(second.body);
  EXPECT_EQ(r2["output"][0]["content"][0]["text"], "it is sunny") << r2.dump();
  {
    std::lock_guard lock(mutex);
    ASSERT_FALSE(last["messages"].empty());
    EXPECT_EQ(last["messages"].back()["role"], "tool") << last.dump();
    EXPECT_EQ(last["messages"].back()["content"], "sunny, 24C") << last.dump();
  }

  // Streamed: the call comes as output_item.added (function_call), the arguments' delta and
  // done, and output_item.done.
  SseReader sse(
      w.port(), "POST", "/v1/responses",
      Json{{"model", "kernex"}, {"input", "and in Rome?"}, {"tools", tools}, {"stream", true}}
          .dump());
  ASSERT_TRUE(sse.ok()) << sse.rest_of_body();
  std::vector<std::string> types;
  std::string arguments;
  for (const auto& e : sse.drain()) {
    Json j = e.json();
    types.push_back(j.value("type", ""));
    if (j["type"] == "response.function_call_arguments.done") arguments = j["arguments"];
  }
  for (const char* type :
       {"response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"})
    EXPECT_NE(std::find(types.begin(), types.end(), type), types.end()) << type;
  EXPECT_EQ(Json::parse(arguments), (Json{{"city", "Paris"}}));
}

// Stored responses belong to their tenant: another tenant's id is not found, for reading,
// continuing or deleting.
TEST(ServeResponsesTenants, AnotherTenantsResponseIsNotFound) {
  Recorder model;
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(model.llm));
  const std::string a = printed_key(w.keys({"add", "alpha"}).out);
  const std::string b = printed_key(w.keys({"add", "beta"}).out);
  ASSERT_TRUE(w.start());
  auto r = request(w.port(), "POST", "/v1/responses",
                   Json{{"model", "kernex"}, {"input", "mine"}}.dump(), bearer(a));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = Json::parse(r.body)["id"];
  EXPECT_EQ(request(w.port(), "GET", "/v1/responses/" + id, "", bearer(a)).status, 200);
  EXPECT_EQ(request(w.port(), "GET", "/v1/responses/" + id, "", bearer(b)).status, 404);
  EXPECT_EQ(request(w.port(), "DELETE", "/v1/responses/" + id, "", bearer(b)).status, 404);
  auto chained = request(
      w.port(), "POST", "/v1/responses",
      Json{{"model", "kernex"}, {"previous_response_id", id}, {"input", "x"}}.dump(), bearer(b));
  EXPECT_EQ(chained.status, 400) << chained.body;
  EXPECT_EQ(request(w.port(), "GET", "/v1/responses/" + id, "", bearer(a)).status, 200);
}

// The response a client was given the id of (response.created) is stored as its run ends, whether
// or not the client is still there to read the end: the run finishes (on_disconnect: finish) or
// is cancelled (the default) after the client left, and GET answers with what it came to.
HttpResponse stored_response(int port, const std::string& id) {
  const auto deadline = Clock::now() + milliseconds(10000);
  for (;;) {
    auto got = request(port, "GET", "/v1/responses/" + id);
    if (got.status != 404 || Clock::now() > deadline) return got;
    std::this_thread::sleep_for(milliseconds(10));  // polling the store, not standing in for sync
  }
}

// Starts a streamed response, reads response.created and leaves while the model holds.
std::string leave_after_created(ServeWorld& w, FakeLlm& llm) {
  SseReader sse(w.port(), "POST", "/v1/responses",
                Json{{"model", "kernex"}, {"input", "then leave"}, {"stream", true}}.dump());
  if (!sse.ok()) return {};
  auto created = sse.next();
  if (!created || !llm.wait_holding(1, milliseconds(20000))) return {};
  sse.close();
  return created->json()["response"].value("id", "");
}

// Answers `chunks`, holding after the first until released or hung up on.
void hold_after_first(FakeLlm& llm, std::vector<std::string> chunks) {
  llm.set_responder([chunks = std::move(chunks)](const FakeLlm::Request&) {
    FakeLlm::Plan p{chunks};
    p.hold_after = 1;
    return p;
  });
}

TEST(ServeResponsesLeft, AResponseFinishedAfterTheClientLeftIsStored) {
  FakeLlm llm;
  hold_after_first(llm, {"all ", "of it"});
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm), "  openai: {on_disconnect: finish}\n");
  ASSERT_TRUE(w.start());
  const std::string id = leave_after_created(w, llm);
  ASSERT_FALSE(id.empty()) << w.log();
  llm.release();
  auto got = stored_response(w.port(), id);
  ASSERT_EQ(got.status, 200) << got.body << w.log();
  EXPECT_EQ(got.json()["status"], "completed") << got.body;
  EXPECT_EQ(got.json()["output"][0]["content"][0]["text"], "all of it") << got.body;
  // And continued from, as if the client had read it.
  auto next =
      request(w.port(), "POST", "/v1/responses",
              Json{{"model", "kernex"}, {"previous_response_id", id}, {"input", "more"}}.dump());
  EXPECT_EQ(next.status, 200) << next.body;
}

TEST(ServeResponsesLeft, AResponseCancelledBecauseTheClientLeftIsStoredAsCancelled) {
  FakeLlm llm;
  hold_after_first(llm, {"partial ", "never sent"});
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm));
  ASSERT_TRUE(w.start());
  const std::string id = leave_after_created(w, llm);
  ASSERT_FALSE(id.empty()) << w.log();
  auto got = stored_response(w.port(), id);
  ASSERT_EQ(got.status, 200) << got.body << w.log();
  EXPECT_EQ(got.json()["status"], "cancelled") << got.body;
}

// In cluster mode (postgres memory) stored responses live in PostgreSQL: any node reads back,
// continues and forgets a response another node made.
TEST(ServeResponsesCluster, NodesShareStoredResponses) {
  kernex::testing::PgTestDb db;
  if (db.dsn().empty()) {
    if (::testing::Test::HasFailure()) FAIL() << "no test database";
    GTEST_SKIP() << kernex::testing::PgTestDb::skip_reason();
  }
  Recorder model;
  TempDir dir;
  const fs::path config = dir.write(
      "kernex.yaml",
      ServeWorld::openai_provider(model.llm) +
          "memory:\n  name: postgres\n  options:\n    dsn: " + Json(db.dsn()).dump() + "\n");
  ServeProcess nodes[2];
  for (int i = 0; i < 2; ++i) {
    const fs::path data = dir.path() / ("node-" + std::to_string(i));
    fs::create_directories(data);
    ASSERT_TRUE(nodes[i].start(
        {"--config", config.string(), "--listen", "127.0.0.1:0", "--data-dir", data.string()},
        dir.path() / ("node-" + std::to_string(i) + ".stderr")))
        << nodes[i].error();
  }
  auto made = request(nodes[0].port(), "POST", "/v1/responses",
                      Json{{"model", "kernex"}, {"input", "on node zero"}}.dump(),
                      {{"X-Session-Id", "shared"}});
  ASSERT_EQ(made.status, 200) << made.body << nodes[0].log();
  const std::string id = Json::parse(made.body)["id"];
  auto read = request(nodes[1].port(), "GET", "/v1/responses/" + id);
  ASSERT_EQ(read.status, 200) << read.body << "\nnode 0:\n"
                              << nodes[0].log() << "\nnode 1:\n"
                              << nodes[1].log();
  EXPECT_EQ(Json::parse(read.body), Json::parse(made.body));
  auto next =
      request(nodes[1].port(), "POST", "/v1/responses",
              Json{{"model", "kernex"}, {"previous_response_id", id}, {"input", "more"}}.dump());
  ASSERT_EQ(next.status, 200) << next.body;
  std::vector<std::string> seen = transcript(model.last());
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[seen.size() - 3], "user: on node zero");
  ASSERT_EQ(request(nodes[1].port(), "DELETE", "/v1/sessions/shared").status, 200);
  EXPECT_EQ(request(nodes[0].port(), "GET", "/v1/responses/" + id).status, 404);
}

}  // namespace
