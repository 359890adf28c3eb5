// The harness itself: FakeLlm speaks what kernex's openai provider understands (through
// `kernex run`), SseReader decodes a chunked event stream incrementally, and a held reply goes on
// when released or notices the client hanging up.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

TEST(ServeHarness, FakeLlmAnswersKernexRunBufferedAndStreamed) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request& r) {
    return FakeLlm::Plan{{"echo: ", r.last_user()}, std::nullopt};
  });
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm));
  for (bool stream : {false, true}) {
    std::vector<std::string> args{"run", "--config", w.config.string(), "--json"};
    if (stream) args.push_back("--stream");
    args.push_back("ping");
    auto o = run_kernex(args, w.dir.path());
    ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
    EXPECT_THAT(o.out, ::testing::HasSubstr("echo: ping")) << o.out;
  }
}

TEST(ServeHarness, SseReaderYieldsEventsAsTheyArriveAndHoldsRelease) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"a", "b", "c"}, 2}; });
  const int port = std::stoi(llm.base_url().substr(llm.base_url().rfind(':') + 1));
  SseReader sse(port, "POST", "/v1/chat/completions", R"({"stream":true,"messages":[]})");
  ASSERT_TRUE(sse.ok());
  std::string text;
  for (int i = 0; i < 3; ++i) {  // role, "a", "b" come before the hold
    auto e = sse.next(milliseconds(5000));
    ASSERT_TRUE(e) << i;
    text += e->json()["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, "ab");
  EXPECT_TRUE(llm.wait_holding(1, milliseconds(5000)));
  EXPECT_FALSE(sse.next(milliseconds(200))) << "nothing passes a hold";
  llm.release();
  auto rest = sse.drain(milliseconds(5000));
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().data, "[DONE]");
  EXPECT_TRUE(sse.ended());
}

TEST(ServeHarness, HeldReplyNoticesTheClientHangingUp) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"a"}, 0}; });
  const int port = std::stoi(llm.base_url().substr(llm.base_url().rfind(':') + 1));
  {
    SseReader sse(port, "POST", "/v1/chat/completions", R"({"stream":true,"messages":[]})");
    ASSERT_TRUE(llm.wait_holding(1, milliseconds(5000)));
  }
  EXPECT_TRUE(llm.wait_hung_up(1, milliseconds(5000)));
}

TEST(ServeHarness, FakeLlmLogsOverlappingCalls) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"a"}, 0}; });
  const std::string body = R"({"stream":true,"messages":[{"role":"user","content":"same"}]})";
  {
    SseReader first(llm.port(), "POST", "/v1/chat/completions", body);
    SseReader second(llm.port(), "POST", "/v1/chat/completions", body);
    ASSERT_TRUE(llm.wait_holding(2, milliseconds(5000)));
    EXPECT_TRUE(llm.wait_ongoing("same", milliseconds(1000)).has_value());
  }
  ASSERT_TRUE(llm.wait_hung_up(2, milliseconds(5000)));
  llm.release();
  SseReader third(llm.port(), "POST", "/v1/chat/completions", body);
  third.drain(milliseconds(5000));
  EXPECT_EQ(llm.calls_for("same"), 3u);
  EXPECT_EQ(llm.max_overlap([](const std::string& m) { return m; }), 2u);
  EXPECT_FALSE(llm.wait_ongoing("same", milliseconds(0)).has_value());
}

// The kill -9 tests find the node that runs a run by the provider connection it holds open.
TEST(ServeHarness, TcpClientPidFindsTheServerHoldingAProviderCall) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"a", "b"}, 1}; });
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm));
  ASSERT_TRUE(w.start());
  SseReader sse(w.port(), "POST", "/v1/sessions/held/messages",
                message_body("held", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  auto client = llm.wait_ongoing("held", milliseconds(30000));
  ASSERT_TRUE(client.has_value());
  EXPECT_EQ(tcp_client_pid(*client, llm.port(), {::getpid(), w.server.pid()}), w.server.pid());
  EXPECT_EQ(tcp_client_pid(*client, llm.port(), {::getpid()}), -1);
  ASSERT_TRUE(w.server.kill9());
  EXPECT_FALSE(w.server.running());
  EXPECT_TRUE(llm.wait_hung_up(1, milliseconds(5000))) << "a killed client's held call ends";
  // The hang-up is counted before the call is marked ended: wait (bounded) for the log to agree.
  const auto deadline = Clock::now() + milliseconds(5000);
  while (llm.wait_ongoing("held", milliseconds(0)).has_value() && Clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_FALSE(llm.wait_ongoing("held", milliseconds(0)).has_value());
}

}  // namespace
