// Followers that stop reading (serve.stream): each costs at most its buffer (buffer_bytes), is
// dropped once it read nothing for slow_timeout_s, and resumes with Last-Event-ID losing nothing,
// whether the run is still in memory or read back from serve.db after a restart (a page at a
// time). The same bound holds for the OpenAI endpoint's stream:true. The counts come from the
// server's own account on /metrics (kernex_stream_*), and the cost from the process's peak RSS.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "follower_support.hpp"
#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

constexpr const char* kTokenEnv = "KERNEX_FOLLOWERS_TEST_METRICS_TOKEN";
constexpr const char* kToken = "followers-test-metrics-token-0123456789";
constexpr std::size_t kBound = 64u << 10;  // serve.stream.buffer_bytes of these tests
constexpr int kFollowers = 20;

// The peak resident set since the last reset_peak (VmHWM), and the reset itself.
std::uint64_t peak_rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
bool reset_peak(pid_t pid) {
  std::ofstream out("/proc/" + std::to_string(pid) + "/clear_refs");
  out << "5";
  return static_cast<bool>(out);
}

class ServeFollowers : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv(kTokenEnv, kToken, 1);
    // Freed buffers would otherwise sit in ASan's quarantine and count as resident: the server
    // reuses what it frees, as it does in a release build.
    const char* asan = std::getenv("ASAN_OPTIONS");
    saved_asan_ = asan ? asan : "";
    ::setenv("ASAN_OPTIONS", (saved_asan_ + ":quarantine_size_mb=0").c_str(), 1);
    // "go": a long answer, 2500 deltas of ~1.5 KB (3.8 MB, under the memory store's cap on one
    // message), and the same text again in run_end: a ~8 MB event log, more than the kernel's
    // socket buffers take from a stream nobody reads (~3 MB); anything else: "ok".
    llm_.set_responder([](const FakeLlm::Request& r) {
      FakeLlm::Plan plan;
      if (r.last_user() != "go") return plan;
      plan.chunks.clear();
      for (int i = 0; i < 2500; ++i)
        plan.chunks.push_back("<" + std::to_string(i) + ">" + std::string(1500, 'a' + i % 26));
      return plan;
    });
    w_.write_config(ServeWorld::openai_provider(llm_),
                    "  stream:\n    buffer_bytes: " + std::to_string(kBound) +
                        "\n    slow_timeout_s: 1\n  metrics:\n    token_env: " + kTokenEnv + "\n");
    ASSERT_TRUE(w_.start());
  }
  void TearDown() override { ::setenv("ASAN_OPTIONS", saved_asan_.c_str(), 1); }

  double metric(const std::string& name) { return scrape(w_.port(), kToken, name); }

  // Every event of the run, read by a client that keeps up (the body whole, then parsed in one
  // pass: an 8 MB log event by event as it arrives costs minutes under ASan).
  std::vector<SseEvent> read_all(const std::string& run, const std::string& last_id = "") {
    Headers h{{"Accept", "text/event-stream"}};
    if (!last_id.empty()) h.emplace_back("Last-Event-ID", last_id);
    Connection c(w_.port());
    EXPECT_TRUE(c.send(build_request("GET", "/v1/runs/" + run + "/events", "", h)));
    HttpResponse r = c.read_response(milliseconds(120000));
    EXPECT_EQ(r.status, 200) << r.describe();
    EXPECT_TRUE(r.header("x-harness-truncated").empty()) << "the stream ended with its last chunk";
    return parse_sse(r.body);
  }

  // kFollowers followers of `run` that never read: each is dropped, the server's peak holding
  // stays within kFollowers buffers, and each resumes from the last event it got to the end.
  void stuck_round(const std::string& run, const std::vector<SseEvent>& all) {
    const pid_t pid = w_.server.pid();
    const double drops_before = metric("kernex_stream_slow_disconnects");
    ASSERT_GE(drops_before, 0) << "the metrics token opens /metrics";
    ASSERT_TRUE(reset_peak(pid));
    const std::uint64_t rss_before = rss_bytes(pid);
    std::vector<std::unique_ptr<StuckFollower>> stuck;
    for (int i = 0; i < kFollowers; ++i) {
      stuck.push_back(std::make_unique<StuckFollower>(
          w_.port(), "GET", "/v1/runs/" + run + "/events", "", Headers{}));
      ASSERT_TRUE(stuck.back()->ok());
    }
    // Another tenant's session is served while they are stuck.
    auto other = request(w_.port(), "POST", "/v1/sessions/other/messages", message_body("hello"));
    EXPECT_EQ(other.status, 200) << other.describe();
    ASSERT_TRUE(wait_metric(w_.port(), kToken, "kernex_stream_slow_disconnects",
                            [&](double v) { return v >= drops_before + kFollowers; }))
        << "every follower that never reads is dropped; log:\n"
        << w_.log();
    const double peak = metric("kernex_stream_buffered_bytes_peak");
    EXPECT_GT(peak, 0);
    EXPECT_LE(peak, static_cast<double>(kFollowers * kBound))
        << "followers together never held more than their buffers";
    const std::uint64_t grown = peak_rss(pid) - std::min(peak_rss(pid), rss_before);
    EXPECT_LE(grown, kFollowers * kBound + (24u << 20))
        << "resident memory grew by " << grown << " bytes for " << kFollowers << " followers";

    for (std::size_t n = 0; n < stuck.size(); ++n) {
      std::string raw;
      ASSERT_TRUE(stuck[n]->drain(raw, milliseconds(60000))) << "the server closed the connection";
      PartialStream got = parse_partial(raw);
      EXPECT_EQ(got.status, 200);
      EXPECT_FALSE(got.complete) << "a dropped follower's stream is cut, not ended";
      ASSERT_LT(got.events.size(), all.size());
      for (std::size_t i = 0; i < got.events.size(); ++i) {
        ASSERT_EQ(got.events[i].id, all[i].id);
        ASSERT_EQ(got.events[i].data, all[i].data);
      }
      if (n % 10 != 0) continue;  // two resume: reading 8 MB twenty times adds nothing
      const std::string last = got.events.empty() ? "0" : got.events.back().id;
      auto rest = read_all(run, last);
      ASSERT_EQ(got.events.size() + rest.size(), all.size()) << "resumed after " << last;
      for (std::size_t i = 0; i < rest.size(); ++i) {
        ASSERT_EQ(rest[i].id, all[got.events.size() + i].id);
        ASSERT_EQ(rest[i].data, all[got.events.size() + i].data);
      }
    }
  }

  FakeLlm llm_;
  ServeWorld w_;
  std::string saved_asan_;
};

// One run, followed while it is in memory, then after a restart from serve.db (a page at a time).
TEST_F(ServeFollowers, StuckFollowersCostTheirBufferAndResumeWithEveryEvent) {
  auto done = request(w_.port(), "POST", "/v1/sessions/big/messages", message_body("go"), Headers{},
                      milliseconds(120000));
  ASSERT_EQ(done.status, 200) << done.describe();
  const std::string run = done.json().value("run_id", "");
  const auto all = read_all(run);
  expect_well_formed(all, "big");
  ASSERT_GT(all.size(), 2500u);
  // A stream read to its end is off the gauges by then, not microseconds after.
  EXPECT_EQ(metric("kernex_stream_followers"), 0);
  EXPECT_EQ(metric("kernex_stream_buffered_bytes"), 0);

  stuck_round(run, all);
  EXPECT_EQ(metric("kernex_stream_followers"), 0) << "every stream ended";
  EXPECT_EQ(metric("kernex_stream_buffered_bytes"), 0) << "and gave its buffer back";

  ASSERT_TRUE(w_.server.stop().has_value());
  ASSERT_TRUE(w_.start());
  const auto stored = read_all(run);
  ASSERT_EQ(stored.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(stored[i].id, all[i].id);
    ASSERT_EQ(stored[i].event, all[i].event);
    ASSERT_EQ(stored[i].data, all[i].data);
  }
  stuck_round(run, all);
  // A Last-Event-ID at or past the end: nothing more, and the stream ends.
  EXPECT_TRUE(read_all(run, all.back().id).empty());
  EXPECT_TRUE(read_all(run, "99999999").empty());
}

TEST_F(ServeFollowers, OpenAiStreamIsBoundedToo) {
  const std::string body =
      Json{{"model", "kernex"},
           {"stream", true},
           {"messages", Json::array({Json{{"role", "user"}, {"content", "go"}}})}}
          .dump();
  std::vector<std::unique_ptr<StuckFollower>> stuck;
  for (int i = 0; i < 2; ++i) {
    stuck.push_back(std::make_unique<StuckFollower>(w_.port(), "POST", "/v1/chat/completions", body,
                                                    Headers{}));
    ASSERT_TRUE(stuck.back()->ok());
  }
  ASSERT_TRUE(wait_metric(w_.port(), kToken, "kernex_stream_slow_disconnects", [](double v) {
    return v >= 2;
  })) << w_.log();
  const double peak = metric("kernex_stream_buffered_bytes_peak");
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, static_cast<double>(2 * kBound));
  for (auto& f : stuck) {
    std::string raw;
    ASSERT_TRUE(f->drain(raw, milliseconds(60000)));
    PartialStream got = parse_partial(raw);
    EXPECT_EQ(got.status, 200);
    EXPECT_FALSE(got.complete);
    EXPECT_EQ(raw.find("[DONE]"), std::string::npos);
  }
}

}  // namespace
