// `kernex serve` through real loopback HTTP: each endpoint's success path, the error bodies and
// statuses of the contract, and the HTTP/1.1 edges (malformed lines, chunked bodies, pipelining,
// size limits).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

class ServeHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string script;
    for (int i = 0; i < 20; ++i) script += replay_text("hi there " + std::to_string(i));
    w_.write_config(w_.replay_provider(script),
                    "  max_body_bytes: 4096\n"
                    "  max_header_bytes: 4096\n");
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }

  void expect_error(const HttpResponse& r, int status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.describe();
    EXPECT_EQ(r.error_code(), code) << r.describe();
    Json j = r.json();
    if (j.is_object() && j.contains("error")) {
      EXPECT_TRUE(j["error"].contains("message") && j["error"]["message"].is_string()) << r.body;
    }
  }

  ServeWorld w_;
  int port_ = 0;
};

TEST_F(ServeHttp, PrintsExactlyTheListeningLine) {
  EXPECT_EQ(w_.server.first_line(),
            "kernex serve: listening on http://127.0.0.1:" + std::to_string(port_));
}

TEST_F(ServeHttp, HealthzAnswersOk) {
  auto r = request(port_, "GET", "/healthz");
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json(), (Json{{"status", "ok"}}));
  EXPECT_THAT(r.header("content-type"), HasSubstr("application/json"));
}

// Every tenant's usage is in /metrics: without serve.metrics (a token or a listener of its own)
// it is off, loopback or not (tests/security/battery3_tenants_test.cpp attacks it).
TEST_F(ServeHttp, MetricsAreOffUnlessConfigured) {
  auto r = request(port_, "GET", "/metrics");
  EXPECT_EQ(r.status, 404) << r.describe();
  EXPECT_EQ(r.error_code(), "not_found");
  EXPECT_THAT(w_.log(), HasSubstr("serve.metrics.token_env"));
}

TEST_F(ServeHttp, NonStreamMessageRunsAndReportsTheRun) {
  auto r = request(port_, "POST", "/v1/sessions/s1/messages", message_body("hello"));
  ASSERT_EQ(r.status, 200) << r.describe();
  Json j = r.json();
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j.value("text", ""), "hi there 0");
  EXPECT_EQ(j.value("session_id", ""), "s1");
  EXPECT_EQ(j.value("status", ""), "done");
  EXPECT_EQ(j.value("outcome", ""), "end_turn");
  EXPECT_TRUE(j.contains("usage")) << r.body;
  const std::string run = j.value("run_id", "");
  ASSERT_FALSE(run.empty()) << r.body;

  auto got = request(port_, "GET", "/v1/runs/" + run);
  ASSERT_EQ(got.status, 200) << got.describe();
  Json g = got.json();
  EXPECT_EQ(g.value("run_id", ""), run);
  EXPECT_EQ(g.value("session_id", ""), "s1");
  EXPECT_EQ(g.value("status", ""), "done");
  ASSERT_TRUE(g.contains("result")) << got.body;
  EXPECT_EQ(g["result"].value("text", ""), "hi there 0");
}

TEST_F(ServeHttp, SessionHistoryAndRunsListFollowTheExchanges) {
  std::vector<std::string> runs;
  for (const char* m : {"first", "second"}) {
    auto r = request(port_, "POST", "/v1/sessions/hist/messages", message_body(m));
    ASSERT_EQ(r.status, 200) << r.describe();
    runs.push_back(r.json().value("run_id", ""));
  }
  auto msgs = session_messages(port_, "hist");
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0].value("role", ""), "user");
  EXPECT_EQ(content_text(msgs[0]), "first");
  EXPECT_EQ(msgs[1].value("role", ""), "assistant");
  EXPECT_EQ(content_text(msgs[1]), "hi there 0");
  EXPECT_EQ(content_text(msgs[2]), "second");
  EXPECT_EQ(content_text(msgs[3]), "hi there 1");
  for (const auto& m : msgs) {
    EXPECT_TRUE(m.contains("seq")) << m.dump();
    EXPECT_TRUE(m.contains("created_at")) << m.dump();
  }

  auto limited = request(port_, "GET", "/v1/sessions/hist/messages?limit=2");
  ASSERT_EQ(limited.status, 200) << limited.describe();
  Json lj = limited.json();
  ASSERT_EQ(lj["messages"].size(), 2u) << limited.body;
  EXPECT_TRUE(lj.contains("next_before"))
      << "a page shorter than the history names the next page: " << limited.body;

  auto list = request(port_, "GET", "/v1/sessions/hist/runs");
  ASSERT_EQ(list.status, 200) << list.describe();
  Json lr = list.json();
  ASSERT_EQ(lr["runs"].size(), 2u) << list.body;
  EXPECT_EQ(lr["runs"][0].value("run_id", ""), runs[1]) << "newest first";
  EXPECT_EQ(lr["runs"][1].value("run_id", ""), runs[0]);
  EXPECT_EQ(lr["runs"][0].value("status", ""), "done");
  EXPECT_TRUE(lr["runs"][0].contains("created_at"));
}

TEST_F(ServeHttp, HistoryCarriesIntoTheNextRunOfTheSession) {
  ASSERT_EQ(
      request(port_, "POST", "/v1/sessions/ctx/messages", message_body("my name is Ada")).status,
      200);
  ASSERT_EQ(
      request(port_, "POST", "/v1/sessions/ctx/messages", message_body("what is my name?")).status,
      200);
  auto other = request(port_, "POST", "/v1/sessions/ctx2/messages", message_body("fresh"));
  ASSERT_EQ(other.status, 200);
  EXPECT_EQ(session_messages(port_, "ctx").size(), 4u);
  EXPECT_EQ(session_messages(port_, "ctx2").size(), 2u) << "sessions do not share history";
}

TEST_F(ServeHttp, DeleteSessionForgetsIt) {
  ASSERT_EQ(request(port_, "POST", "/v1/sessions/gone/messages", message_body("x")).status, 200);
  auto d = request(port_, "DELETE", "/v1/sessions/gone");
  ASSERT_EQ(d.status, 200) << d.describe();
  EXPECT_EQ(d.json().value("deleted", false), true) << d.body;
  EXPECT_TRUE(session_is_empty(port_, "gone"));
}

TEST_F(ServeHttp, ModelsListIsOpenAiShaped) {
  auto r = request(port_, "GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.describe();
  Json j = r.json();
  EXPECT_EQ(j.value("object", ""), "list");
  ASSERT_TRUE(j["data"].is_array() && !j["data"].empty()) << r.body;
  for (const auto& m : j["data"]) {
    EXPECT_TRUE(m["id"].is_string());
    EXPECT_EQ(m.value("object", ""), "model");
    EXPECT_TRUE(m["created"].is_number_integer());
    EXPECT_EQ(m.value("owned_by", ""), "kernex");
  }
}

TEST_F(ServeHttp, ChatCompletionsNonStream) {
  Json body{{"model", "kernex"},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "hey"}}})}};
  auto r = request(port_, "POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.describe();
  Json j = r.json();
  EXPECT_EQ(j.value("object", ""), "chat.completion");
  ASSERT_TRUE(j["choices"].is_array() && j["choices"].size() == 1) << r.body;
  EXPECT_EQ(j["choices"][0]["message"].value("role", ""), "assistant");
  EXPECT_EQ(j["choices"][0]["message"].value("content", ""), "hi there 0");
  EXPECT_EQ(j["choices"][0].value("finish_reason", ""), "stop");
  EXPECT_TRUE(j.contains("usage"));
}

TEST_F(ServeHttp, ChatCompletionsStreamEndsWithDone) {
  Json body{{"model", "kernex"},
            {"stream", true},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "hey"}}})}};
  SseReader sse(port_, "POST", "/v1/chat/completions", body.dump());
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  auto events = sse.drain();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().data, "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    Json c = events[i].json();
    ASSERT_TRUE(c.is_object()) << events[i].data;
    EXPECT_EQ(c.value("object", ""), "chat.completion.chunk");
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content") &&
        c["choices"][0]["delta"]["content"].is_string()) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, "hi there 0");
}

TEST_F(ServeHttp, ChatCompletionsWithSessionKeepsHistory) {
  Json body{{"model", "kernex"},
            {"metadata", {{"session_id", "oa-sess"}}},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "remember me"}}})}};
  ASSERT_EQ(request(port_, "POST", "/v1/chat/completions", body.dump()).status, 200);
  auto msgs = session_messages(port_, "oa-sess");
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(content_text(msgs[0]), "remember me");

  Json body2{{"model", "kernex"},
             {"messages", Json::array({Json{{"role", "user"}, {"content", "again"}}})}};
  ASSERT_EQ(
      request(port_, "POST", "/v1/chat/completions", body2.dump(), {{"X-Session-Id", "oa-sess"}})
          .status,
      200);
  EXPECT_EQ(session_messages(port_, "oa-sess").size(), 4u);
}

// ---- errors ----

TEST_F(ServeHttp, InvalidJsonIs400) {
  expect_error(request(port_, "POST", "/v1/sessions/s/messages", "{not json"), 400, "invalid_json");
  expect_error(request(port_, "POST", "/v1/chat/completions", "[1,2"), 400, "invalid_json");
}

TEST_F(ServeHttp, MissingOrMistypedFieldsAreInvalidRequest) {
  for (const char* body :
       {R"({})", R"({"message": 5})", R"({"message": null})", R"([])", R"("hello")",
        R"({"message": "x", "stream": "yes"})", R"({"message": "x", "skills": "a"})",
        R"({"message": "x", "if_busy": "sometimes"})", R"({"message": "x", "sender": 3})"}) {
    SCOPED_TRACE(body);
    expect_error(request(port_, "POST", "/v1/sessions/s/messages", body), 400, "invalid_request");
  }
  expect_error(request(port_, "POST", "/v1/chat/completions", R"({"model":"kernex"})"), 400,
               "invalid_request");
  expect_error(
      request(port_, "POST", "/v1/chat/completions", R"({"model":"kernex","messages":"hi"})"), 400,
      "invalid_request");
}

TEST_F(ServeHttp, BadSessionIdsAreInvalidSession) {
  // An id is any 1-256 bytes of UTF-8 without control characters (README, Identity).
  for (const std::string& id : {std::string(257, 'a'), std::string("a%0Ab"), std::string("a%00b"),
                                std::string("a%7Fb"), std::string("caf%C3"), std::string("%FF")}) {
    SCOPED_TRACE(id);
    expect_error(request(port_, "POST", "/v1/sessions/" + id + "/messages", message_body("x")), 400,
                 "invalid_session");
  }
  // The longest allowed id and ids that were refused once (punctuation, spaces, "..", UTF-8).
  for (const std::string& id :
       {std::string(250, 'a') + "Z9_.:-", std::string("bad!id"), std::string("a%20b"),
        std::string("%2e%2e"), std::string("caf%C3%A9")}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(request(port_, "POST", "/v1/sessions/" + id + "/messages", message_body("x")).status,
              200);
  }
}

TEST_F(ServeHttp, UnknownRoutesAndRunsAre404) {
  expect_error(request(port_, "GET", "/v1/nope"), 404, "not_found");
  expect_error(request(port_, "GET", "/"), 404, "not_found");
  expect_error(request(port_, "GET", "/v1/runs/no-such-run"), 404, "not_found");
  expect_error(request(port_, "POST", "/v1/runs/no-such-run/cancel"), 404, "not_found");
  expect_error(request(port_, "GET", "/v1/runs/no-such-run/events"), 404, "not_found");
}

TEST_F(ServeHttp, WrongMethodIs405) {
  for (auto [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"PUT", "/v1/sessions/s/messages"},
                                                        {"GET", "/v1/chat/completions"},
                                                        {"POST", "/healthz"},
                                                        {"POST", "/v1/models"},
                                                        {"DELETE", "/v1/runs/x/cancel"}}) {
    SCOPED_TRACE(method + " " + target);
    auto r = request(port_, method, target, method == "GET" || method == "DELETE" ? "" : "{}");
    EXPECT_EQ(r.status, 405) << r.describe();
  }
}

TEST_F(ServeHttp, BodyOverTheLimitIs413) {
  const std::string body = message_body(std::string(10000, 'x'));
  expect_error(request(port_, "POST", "/v1/sessions/s/messages", body), 413, "body_too_large");
  // Announced by Content-Length but not yet sent: refused from the header alone.
  Connection c(port_);
  c.send(
      "POST /v1/sessions/s/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100000000\r\n\r\n");
  EXPECT_EQ(c.read_response(milliseconds(10000)).status, 413);
  EXPECT_EQ(request(port_, "GET", "/healthz").status, 200);
}

TEST_F(ServeHttp, ChunkedBodyOverTheLimitIs413) {
  Connection c(port_);
  std::string req =
      "POST /v1/sessions/s/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 10; ++i) req += "400\r\n" + std::string(1024, ' ') + "\r\n";
  c.send(req);
  EXPECT_EQ(c.read_response(milliseconds(10000)).status, 413);
}

TEST_F(ServeHttp, HeadersOverTheLimitAre431) {
  auto r = request(port_, "GET", "/healthz", "", {{"X-Big", std::string(8000, 'h')}});
  EXPECT_EQ(r.status, 431) << r.describe();
  EXPECT_EQ(request(port_, "GET", "/healthz").status, 200);
}

TEST_F(ServeHttp, MalformedRequestLinesAre400AndTheServerGoesOn) {
  for (const std::string& bad :
       {std::string("THIS IS NOT HTTP\r\n\r\n"), std::string("GET\r\n\r\n"),
        std::string("GET /healthz HTTP/9.9\r\n\r\n"),
        std::string("GET /healthz HTTP/1.1\r\nNo colon header\r\n\r\n"),
        std::string("POST /v1/sessions/s/messages HTTP/1.1\r\nHost: x\r\n"
                    "Content-Length: abc\r\n\r\n"),
        std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11)}) {
    SCOPED_TRACE(bad);
    Connection c(port_);
    c.send(bad);
    auto r = c.read_response(milliseconds(10000));
    // A 400 answer, or at least a closed connection: never a hang, never a success.
    if (r.status != 0) {
      EXPECT_EQ(r.status, 400) << r.describe();
    } else {
      EXPECT_TRUE(c.eof()) << "neither an answer nor a close within 10 s";
    }
  }
  EXPECT_EQ(request(port_, "GET", "/healthz").status, 200);
}

TEST_F(ServeHttp, ChunkedRequestBodyIsAccepted) {
  Connection c(port_);
  const std::string body = message_body("chunked hello");
  std::string req =
      "POST /v1/sessions/chunky/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const std::size_t half = body.size() / 2;
  char size[32];
  std::snprintf(size, sizeof size, "%zx", half);
  req += std::string(size) + "\r\n" + body.substr(0, half) + "\r\n";
  std::snprintf(size, sizeof size, "%zx", body.size() - half);
  req += std::string(size) + "\r\n" + body.substr(half) + "\r\n0\r\n\r\n";
  c.send(req);
  auto r = c.read_response();
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json().value("text", ""), "hi there 0");
  auto msgs = session_messages(port_, "chunky");
  ASSERT_FALSE(msgs.empty());
  EXPECT_EQ(content_text(msgs[0]), "chunked hello");
}

TEST_F(ServeHttp, PipelinedRequestsAreAnsweredInOrder) {
  Connection c(port_);
  std::string reqs =
      build_request("GET", "/healthz", "", {}, false) +
      build_request("GET", "/v1/models", "", {}, false) +
      build_request("POST", "/v1/sessions/pipe/messages", message_body("p"), {}, false) +
      build_request("GET", "/v1/nope", "", {}, true);
  ASSERT_TRUE(c.send(reqs));
  auto a = c.read_response();
  auto b = c.read_response();
  auto d = c.read_response();
  auto e = c.read_response();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.json(), (Json{{"status", "ok"}}));
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(b.json().value("object", ""), "list");
  EXPECT_EQ(d.status, 200) << d.describe();
  EXPECT_EQ(d.json().value("session_id", ""), "pipe");
  EXPECT_EQ(e.status, 404);
}

TEST_F(ServeHttp, KeepAliveServesManyRequestsOnOneConnection) {
  Connection c(port_);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(c.send(build_request("GET", "/healthz", "", {}, false)));
    auto r = c.read_response(milliseconds(10000));
    ASSERT_EQ(r.status, 200) << "request " << i;
  }
}

TEST_F(ServeHttp, EveryLogLineNamesItsRequest) {
  request(port_, "GET", "/healthz");
  request(port_, "GET", "/v1/nope");
  const std::string log = w_.log();
  EXPECT_THAT(log, HasSubstr("req="));
}

}  // namespace
