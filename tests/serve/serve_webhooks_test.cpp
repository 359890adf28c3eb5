// Webhooks through the real `kernex serve`: a run's end reaches a loopback receiver signed, the
// outbox survives kill -9 of the server while the receiver is down, and `kernex serve webhooks
// list` shows what was sent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "serve_harness.hpp"
#include "webhook_receiver.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using kernex::test::FakeHttpServer;
using kernex::test::WebhookReceiver;
using ::testing::EndsWith;

constexpr milliseconds kWait{30'000};

std::string webhooks_section(const std::string& url) {
  return "  webhooks:\n    - url: " + url +
         "\n      secret: whsec-serve\n      events: [run.completed, run.failed]\n"
         "      backoff_base_ms: 50\n      backoff_cap_ms: 200\n";
}

// One streamed run to its end.
void run_to_end(int port, const std::string& session, const std::string& message) {
  SseReader sse(port, "POST", "/v1/sessions/" + session + "/messages",
                message_body(message, Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  auto events = sse.drain();
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().event, "run_end") << events.back().data;
}

Json list_json(ServeWorld& w) {
  auto out = run_kernex({"serve", "webhooks", "--config", w.config.string(), "--data-dir",
                         w.data_dir.string(), "list", "--json"},
                        w.dir.path());
  EXPECT_EQ(out.exit_code, 0) << out.err;
  Json j = Json::parse(out.out, nullptr, false);
  return j.is_array() ? j : Json::array();
}

TEST(ServeWebhooks, RunEndsOutliveAKilledServerAndAReceiverThatWasDown) {
  WebhookReceiver receiver("whsec-serve");
  receiver.up();
  receiver.down();  // keeps its port, refuses connections
  ServeWorld w;
  std::string script;
  for (int i = 0; i < 3; ++i) script += replay_text("answer " + std::to_string(i));
  w.write_config(w.replay_provider(script), webhooks_section(receiver.url()));
  ASSERT_TRUE(w.start());
  for (int i = 0; i < 3; ++i) run_to_end(w.port(), "hooked", "question " + std::to_string(i));

  // Every end is in the outbox, tried and pending, before the server dies without a word.
  const auto deadline = Clock::now() + kWait;
  bool tried = false;
  while (!tried && Clock::now() < deadline) {
    Json rows = list_json(w);
    std::size_t pending_tried = 0;
    for (const auto& r : rows) pending_tried += r["status"] == "pending" && r["attempts"] >= 1;
    tried = rows.size() == 3 && pending_tried >= 1;
  }
  ASSERT_TRUE(tried) << list_json(w).dump();
  ASSERT_TRUE(w.server.kill9());

  receiver.up();
  ASSERT_TRUE(w.start());
  ASSERT_TRUE(receiver.wait_distinct(3, kWait)) << w.log();
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
  std::set<std::string> runs;
  for (const auto& d : receiver.accepted()) {
    const Json body = Json::parse(d.body);
    EXPECT_EQ(body["type"], "run.completed");
    EXPECT_EQ(body["data"]["session_id"], "hooked");
    EXPECT_EQ(body["data"]["tenant"], "local");
    EXPECT_EQ(body["data"]["outcome"], "end_turn");
    EXPECT_EQ(body["data"]["result"]["text"].get<std::string>().rfind("answer ", 0), 0u);
    runs.insert(body["data"]["run_id"].get<std::string>());
  }
  EXPECT_EQ(runs.size(), 3u);
  // The receiver answers before the sender marks the row: wait for the marks, then stop (a stop
  // while an answer is on its way leaves the row pending, to be sent again: at least once).
  Json rows;
  const auto marked_by = Clock::now() + kWait;
  for (bool all = false; !all && Clock::now() < marked_by;) {
    rows = list_json(w);
    all = rows.size() == 3;
    for (const auto& r : rows) all = all && r["status"] == "delivered";
  }
  w.server.stop();
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) EXPECT_EQ(r["status"], "delivered") << r.dump();
}

// A receiver that answers run.completed at once, as a chat bot driven by webhooks does: the run
// reads as ended and its session takes the next message (no 409 session_busy), every time.
TEST(ServeWebhooks, AReceiverActingOnRunCompletedFindsTheRunEndedAndItsSessionFree) {
  constexpr int kRuns = 12;
  WebhookReceiver receiver("whsec-serve");
  receiver.up();
  ServeWorld w;
  std::string script;
  for (int i = 0; i < 2 * kRuns; ++i) script += replay_text("answer " + std::to_string(i));
  w.write_config(w.replay_provider(script), webhooks_section(receiver.url()));
  ASSERT_TRUE(w.start());
  std::mutex mu;
  std::vector<std::string> seen;  // what the receiver found, a line per session's first run
  std::set<std::string> probed;
  receiver.set_policy([&](const FakeHttpServer::Recorded& r, int seen_before) {
    // Not JSON, or no data: an empty session, which the assertions below report.
    const Json parsed = Json::parse(r.body, nullptr, false);
    const Json data = parsed.is_object() ? parsed.value("data", Json::object()) : Json::object();
    const std::string session = data.value("session_id", "");
    {
      std::lock_guard lock(mu);  // the session's second run (the probe) is only acknowledged
      if (seen_before > 0 || !probed.insert(session).second) return 200;
    }
    const auto run = request(w.port(), "GET", "/v1/runs/" + data.value("run_id", ""));
    const auto next =
        request(w.port(), "POST", "/v1/sessions/" + session + "/messages", message_body("next"));
    std::lock_guard lock(mu);
    seen.push_back(session + " status=" + run.json().value("status", "?") +
                   " next=" + std::to_string(next.status));
    return 200;
  });
  for (int i = 0; i < kRuns; ++i) {
    const std::string session = "hooked-" + std::to_string(i);
    ASSERT_EQ(
        request(w.port(), "POST", "/v1/sessions/" + session + "/messages", message_body("first"))
            .status,
        200);
  }
  ASSERT_TRUE(receiver.wait_distinct(2 * kRuns, kWait)) << w.log();
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kRuns));
  for (const auto& line : seen) EXPECT_THAT(line, EndsWith("status=done next=200"));
}

TEST(ServeWebhooks, AMissingSecretVariableStopsTheStart) {
  ServeWorld w;
  w.write_config(w.replay_provider(replay_text("x")),
                 "  webhooks:\n    - url: http://127.0.0.1:9/hook\n"
                 "      secret_env: KX_SERVE_TEST_UNSET_SECRET\n      events: [run.failed]\n");
  auto out = run_kernex({"serve", "--config", w.config.string(), "--listen", "127.0.0.1:0",
                         "--data-dir", w.data_dir.string()},
                        w.dir.path());
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("KX_SERVE_TEST_UNSET_SECRET"), std::string::npos) << out.err;
}

}  // namespace
