// Double texting: many messages to one session at once under reject, enqueue and interrupt, and
// the per-tenant concurrent-run limit (429 with Retry-After).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;

constexpr int kMessages = 20;

std::string msg(int i) {
  char b[16];
  std::snprintf(b, sizeof b, "msg-%02d", i);
  return b;
}

class ServeBusy : public ::testing::Test {
 protected:
  void start(const std::string& serve_body = "") {
    w_.write_config(ServeWorld::openai_provider(llm_), serve_body);
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }

  // Sends kMessages POSTs to `session` at once (released together); calls `on_done` as each
  // answer arrives. Returns when all threads have been started; join with finish().
  void fire(const std::string& session, const Json& extra) {
    responses_.assign(kMessages, HttpResponse{});
    for (int i = 0; i < kMessages; ++i) {
      threads_.emplace_back([this, i, session, extra] {
        {
          std::unique_lock lock(mutex_);
          go_cv_.wait(lock, [&] { return go_; });
        }
        auto r = request(port_, "POST", "/v1/sessions/" + session + "/messages",
                         message_body(msg(i), extra), {}, milliseconds(60000));
        std::lock_guard lock(mutex_);
        responses_[i] = std::move(r);
        ++answered_;
        done_cv_.notify_all();
      });
    }
    {
      std::lock_guard lock(mutex_);
      go_ = true;
    }
    go_cv_.notify_all();
  }
  bool wait_answered(int n, milliseconds limit) {
    std::unique_lock lock(mutex_);
    return done_cv_.wait_for(lock, limit, [&] { return answered_ >= n; });
  }
  void finish() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  void TearDown() override {
    llm_.release();
    finish();
  }

  FakeLlm llm_;
  ServeWorld w_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable go_cv_, done_cv_;
  bool go_ = false;
  int answered_ = 0;
  std::vector<HttpResponse> responses_;
  std::vector<std::thread> threads_;
};

FakeLlm::Plan echo(const FakeLlm::Request& r, bool hold) {
  return FakeLlm::Plan{{"reply to ", r.last_user()},
                       hold ? std::optional<std::size_t>(1) : std::nullopt};
}

// Role:content of every saved message, oldest first.
std::vector<std::string> transcript(int port, const std::string& session) {
  std::vector<std::string> out;
  for (const auto& m : session_messages(port, session))
    out.push_back(m.value("role", "") + ":" + content_text(m));
  return out;
}

TEST_F(ServeBusy, RejectAcceptsExactlyOneOfTwentySimultaneousMessages) {
  llm_.set_responder([](const FakeLlm::Request& r) { return echo(r, true); });
  start();
  fire("rej", Json::object());
  ASSERT_TRUE(wait_answered(kMessages - 1, milliseconds(60000)))
      << "the busy session's messages were not refused";
  llm_.release();
  finish();
  int ok = 0, busy = 0;
  std::string accepted;
  for (int i = 0; i < kMessages; ++i) {
    const auto& r = responses_[i];
    if (r.status == 200) {
      ++ok;
      accepted = msg(i);
      EXPECT_EQ(r.json().value("text", ""), "reply to " + msg(i));
    } else {
      EXPECT_EQ(r.status, 409) << r.describe();
      EXPECT_EQ(r.error_code(), "session_busy") << r.describe();
      ++busy;
    }
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(busy, kMessages - 1);
  EXPECT_EQ(llm_.requests(), 1u) << "refused messages never reach the provider";
  EXPECT_THAT(transcript(port_, "rej"),
              ::testing::ElementsAre("user:" + accepted, "assistant:reply to " + accepted));
}

TEST_F(ServeBusy, EnqueueRunsAllTwentyInArrivalOrderNeverInterleaved) {
  std::atomic<int> calls{0};
  // The first run holds until every message has been queued behind it.
  llm_.set_responder([&](const FakeLlm::Request& r) { return echo(r, calls++ == 0); });
  start("  if_busy: enqueue\n");
  fire("enq", Json::object());
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  // Bounded wait until all 20 runs exist (nothing signals "queued" to a non-stream client).
  Json runs;
  const auto deadline = Clock::now() + milliseconds(30000);
  while (Clock::now() < deadline) {
    runs = request(port_, "GET", "/v1/sessions/enq/runs").json();
    if (runs.contains("runs") && runs["runs"].size() == kMessages) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(runs["runs"].size(), static_cast<std::size_t>(kMessages)) << runs.dump();
  int queued = 0, running = 0;
  for (const auto& r : runs["runs"]) {
    queued += r.value("status", "") == "queued";
    running += r.value("status", "") == "running";
  }
  EXPECT_EQ(running, 1) << runs.dump();
  EXPECT_EQ(queued, kMessages - 1) << runs.dump();
  llm_.release();
  finish();

  std::map<std::string, std::string> message_of_run;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(responses_[i].status, 200) << responses_[i].describe();
    Json j = responses_[i].json();
    EXPECT_EQ(j.value("status", ""), "done");
    EXPECT_EQ(j.value("text", ""), "reply to " + msg(i));
    message_of_run[j.value("run_id", "")] = msg(i);
  }
  // Arrival order: the runs list is newest first.
  auto final_runs = request(port_, "GET", "/v1/sessions/enq/runs").json()["runs"];
  std::vector<std::string> arrival;
  for (auto it = final_runs.rbegin(); it != final_runs.rend(); ++it) {
    arrival.push_back(message_of_run[it->value("run_id", "")]);
    EXPECT_EQ(it->value("status", ""), "done");
  }
  std::vector<std::string> expected;
  for (const auto& m : arrival) {
    expected.push_back("user:" + m);
    expected.push_back("assistant:reply to " + m);
  }
  EXPECT_EQ(transcript(port_, "enq"), expected);
  EXPECT_EQ(llm_.requests(), static_cast<std::size_t>(kMessages));
}

TEST_F(ServeBusy, InterruptCancelsEarlierRunsWithoutForkingHistory) {
  llm_.set_responder([](const FakeLlm::Request& r) { return echo(r, true); });
  start();
  fire("int", Json{{"if_busy", "interrupt"}});
  ASSERT_TRUE(wait_answered(kMessages - 1, milliseconds(60000))) << "interrupted runs did not end";
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  llm_.release();
  finish();
  int done = 0;
  std::set<std::string> finished;
  for (int i = 0; i < kMessages; ++i) {
    const auto& r = responses_[i];
    ASSERT_EQ(r.status, 200) << "interrupt never refuses: " << r.describe();
    const std::string status = r.json().value("status", "");
    EXPECT_TRUE(status == "done" || status == "cancelled") << r.body;
    if (status == "done") {
      ++done;
      finished.insert(msg(i));
    }
  }
  EXPECT_EQ(done, 1) << "only the last message's run survives";
  EXPECT_EQ(llm_.hung_up() + 1, llm_.requests())
      << "every provider call but the last one's was abandoned";

  // History is one line: every assistant entry directly follows its own user message, no user
  // message appears twice, and only finished runs have an answer.
  auto t = transcript(port_, "int");
  std::set<std::string> users;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].rfind("user:", 0) == 0) {
      EXPECT_TRUE(users.insert(t[i]).second) << "duplicated " << t[i];
      continue;
    }
    ASSERT_EQ(t[i].rfind("assistant:reply to ", 0), 0u) << t[i];
    const std::string m = t[i].substr(std::string("assistant:reply to ").size());
    ASSERT_GT(i, 0u);
    EXPECT_EQ(t[i - 1], "user:" + m) << "answer not next to its question at " << i;
    EXPECT_TRUE(finished.count(m)) << "a cancelled run's answer was saved: " << m;
  }
  for (const auto& m : finished) {
    EXPECT_NE(std::find(t.begin(), t.end(), "assistant:reply to " + m), t.end()) << m;
  }
  ASSERT_FALSE(finished.empty());
  EXPECT_EQ(t.size() >= 2 ? t.back() : "", "assistant:reply to " + *finished.begin());
}

TEST_F(ServeBusy, ConcurrentRunLimitAnswers429WithRetryAfter) {
  llm_.set_responder([](const FakeLlm::Request& r) { return echo(r, r.last_user() == "first"); });
  start("  limits:\n    default: {concurrent_runs: 1}\n");
  SseReader first(port_, "POST", "/v1/sessions/one/messages",
                  message_body("first", Json{{"stream", true}}));
  ASSERT_TRUE(first.ok()) << first.head().describe();
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  auto r = request(port_, "POST", "/v1/sessions/two/messages", message_body("second"));
  EXPECT_EQ(r.status, 429) << r.describe();
  EXPECT_EQ(r.error_code(), "rate_limited") << r.describe();
  const std::string retry = r.header("retry-after");
  ASSERT_FALSE(retry.empty()) << "429 without Retry-After";
  EXPECT_TRUE(std::all_of(retry.begin(), retry.end(), ::isdigit)) << retry;
  EXPECT_GE(std::atoi(retry.c_str()), 1);
  auto oa = request(port_, "POST", "/v1/chat/completions",
                    Json{{"model", "kernex"},
                         {"messages", Json::array({Json{{"role", "user"}, {"content", "x"}}})}}
                        .dump());
  EXPECT_EQ(oa.status, 429) << "the OpenAI route counts against the same limit: " << oa.describe();
  llm_.release();
  first.drain();
  auto again = request(port_, "POST", "/v1/sessions/two/messages", message_body("second"));
  EXPECT_EQ(again.status, 200) << again.describe();
}

}  // namespace
