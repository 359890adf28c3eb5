// Runs on a bounded pool of threads (serve.run_threads): more runs than threads doing blocking
// work all complete, first come first served and in order within each session; a run waiting for
// its pool thread is cancelled at once; a run that waits on its model holds no thread (it runs on
// a fiber), nor does one that waits for a person (parked), so a pool of 2 with 50 runs waiting on
// the model or 5 awaiting approval still runs others. The model is reached over http:// and over
// https:// (a loopback TLS front the server trusts): connect, handshake and reads all park.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "approval_world.hpp"
#include "test_ca.hpp"
#include "tls_front.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

// Non-streaming POSTs, each answered on its own thread.
class Posts {
 public:
  explicit Posts(int port) : port_(port) {}
  ~Posts() { join(); }
  void post(const std::string& session, const std::string& message) {
    threads_.emplace_back([this, session, message] {
      auto r =
          request(port_, "POST", "/v1/sessions/" + session + "/messages",
                  message_body(message, Json{{"if_busy", "enqueue"}}), {}, milliseconds(120000));
      std::lock_guard lock(mutex_);
      answers_[message] = std::move(r);
    });
  }
  void join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  HttpResponse answer(const std::string& message) {
    std::lock_guard lock(mutex_);
    return answers_[message];
  }

 private:
  int port_;
  std::mutex mutex_;
  std::map<std::string, HttpResponse> answers_;
  std::vector<std::thread> threads_;
};

// The session's runs (newest first) once there are `n`, or what there was at the deadline.
Json runs_of(int port, const std::string& session, std::size_t n) {
  Json runs = Json::array();
  const auto deadline = Clock::now() + milliseconds(30000);
  while (Clock::now() < deadline) {
    auto r = request(port, "GET", "/v1/sessions/" + session + "/runs");
    if (r.status == 200 && r.json()["runs"].size() >= n) return r.json()["runs"];
    std::this_thread::sleep_for(milliseconds(10));  // polling the API: nothing signals a store
  }
  return runs;
}

std::vector<std::string> transcript(int port, const std::string& session) {
  std::vector<std::string> out;
  for (const auto& m : session_messages(port, session))
    out.push_back(m.value("role", "") + ":" + content_text(m));
  return out;
}

// Two runs that wait for a person without parking hold both threads (blocking work, as a tool's
// process would): the runs after them queue for a thread, first come first served.
TEST(ServePool, MoreRunsThanThreadsAllCompleteInOrderAndAQueuedRunCancelsAtOnce) {
  ApprovalWorld a;
  std::string script;
  for (const std::string word : {"hold1", "hold2"})
    script += tally_call(word, word) + replay_text("finished " + word, word);
  std::vector<std::string> q;
  for (int i = 0; i < 5; ++i) {
    q.push_back("q-" + std::to_string(i));
    script += replay_text("reply to " + q.back(), q.back());
  }
  script += replay_text("reply to r-0", "r-0");
  ASSERT_TRUE(a.configure(script, "  run_threads: 2\n  approvals:\n    park: false\n"));
  ASSERT_TRUE(a.w.start());
  const int port = a.w.port();
  std::vector<std::unique_ptr<SseReader>> holders;
  std::vector<std::string> approvals;
  for (const std::string word : {"hold1", "hold2"}) {
    holders.push_back(
        std::make_unique<SseReader>(port, "POST", "/v1/sessions/" + word + "/messages",
                                    message_body("please tally " + word, {{"stream", true}})));
    ASSERT_TRUE(holders.back()->ok()) << holders.back()->head().describe();
    std::vector<SseEvent> seen;
    ASSERT_TRUE(read_until(*holders.back(), "approval_requested", seen)) << a.w.log();
    approvals.push_back(event_named(seen, "approval_requested").value("approval_id", ""));
  }
  // Five runs in session q, in this order, and one in session r: none has a thread.
  Posts posts(port);
  for (std::size_t i = 0; i < q.size(); ++i) {
    posts.post("q", q[i]);
    ASSERT_EQ(runs_of(port, "q", i + 1).size(), i + 1);
  }
  posts.post("r", "r-0");
  Json r_runs = runs_of(port, "r", 1);
  ASSERT_EQ(r_runs.size(), 1u);
  EXPECT_EQ(r_runs[0].value("status", ""), "queued") << r_runs.dump();
  for (const auto& run : runs_of(port, "q", 5))
    EXPECT_EQ(run.value("status", ""), "queued") << "no thread is free for it";
  EXPECT_EQ(a.provider_calls(), 2u) << "two threads: only the holders asked the model";

  // Cancelled while waiting for a thread: it ends now, not when a thread frees up.
  const std::string r_run = r_runs[0].value("run_id", "");
  const auto asked = Clock::now();
  auto cancelled = request(port, "POST", "/v1/runs/" + r_run + "/cancel");
  ASSERT_EQ(cancelled.status, 202) << cancelled.describe();
  EXPECT_EQ(cancelled.json().value("status", ""), "cancelled");
  EXPECT_LT(Clock::now() - asked, milliseconds(5000));
  EXPECT_EQ(request(port, "GET", "/v1/runs/" + r_run).json().value("status", ""), "cancelled");

  for (const auto& id : approvals) {
    auto d = request(port, "POST", "/v1/approvals/" + id, R"({"decision": "approve"})");
    ASSERT_EQ(d.status, 200) << d.describe();
  }
  posts.join();
  for (const auto& m : q) {
    auto answer = posts.answer(m);
    ASSERT_EQ(answer.status, 200) << answer.describe();
    EXPECT_EQ(answer.json().value("text", ""), "reply to " + m);
  }
  EXPECT_EQ(posts.answer("r-0").json().value("status", ""), "cancelled");
  std::vector<std::string> expected;
  for (const auto& m : q) {
    expected.push_back("user:" + m);
    expected.push_back("assistant:reply to " + m);
  }
  EXPECT_EQ(transcript(port, "q"), expected) << "the session's runs ran in arrival order";
  EXPECT_EQ(a.provider_calls(), 9u) << "the cancelled run never called the model";
  EXPECT_EQ(count_of(a.tallied(), "hold1"), 1u);
}

// The provider block reaching `llm` over http://, or over https:// through a TLS front whose CA
// the server trusts (SSL_CERT_FILE, which it inherits).
class ModelLink {
 public:
  ModelLink(const FakeLlm& llm, bool https, const ServeWorld& w) {
    block_ = ServeWorld::openai_provider(llm);
    if (!https) return;
    ::setenv("SSL_CERT_FILE", ca_.write_pem((w.dir.path() / "ca.pem").string()).c_str(), 1);
    front_.emplace(ca_.issue("IP:127.0.0.1"), llm.port());
    block_.replace(block_.find(llm.base_url()), llm.base_url().size(), front_->url("/v1"));
  }
  const std::string& provider_block() const { return block_; }

 private:
  std::string block_;
  kernex::test::TestCa ca_;
  std::optional<kernex::test::TlsFront> front_;
};

// Runs waiting on their model hold no thread (each runs on a fiber; its HTTP wait parks it): a
// model that answers nothing until all 50 requests arrived would deadlock a pool of 2 otherwise.
void fifty_runs_wait_on_two_threads(bool https) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request& r) {
    return FakeLlm::Plan{{"reply to ", r.last_user()}, std::optional<std::size_t>(1)};
  });
  ServeWorld w;
  const ModelLink link(llm, https, w);
  // 32 stacks made ahead: the burst's runs take them, then fresh ones.
  w.write_config(link.provider_block(), "  run_threads: 2\n  run_stack_reserve: 32\n");
  ASSERT_TRUE(w.start());
  Posts posts(w.port());
  for (int i = 0; i < 50; ++i) posts.post("s" + std::to_string(i), "m" + std::to_string(i));
  ASSERT_TRUE(llm.wait_holding(50, milliseconds(120000)))
      << llm.holding() << " of 50 model calls at once\n"
      << w.log();
  llm.release();
  posts.join();
  for (int i = 0; i < 50; ++i) {
    auto a = posts.answer("m" + std::to_string(i));
    ASSERT_EQ(a.status, 200) << a.describe();
    EXPECT_EQ(a.json().value("text", ""), "reply to m" + std::to_string(i));
  }
  // Clean exit: under ASan a leak (OpenSSL's per-thread state, say) would fail it.
  EXPECT_EQ(w.server.stop(), std::optional<int>(0)) << w.log();
}

TEST(ServePool, FiftyRunsWaitingOnTheirModelHoldNoneOfTwoThreads) {
  fifty_runs_wait_on_two_threads(false);
}

TEST(ServePool, FiftyRunsWaitingOnTheirModelOverHttpsHoldNoneOfTwoThreads) {
  fifty_runs_wait_on_two_threads(true);
}

// A run suspended on its model ends at once on a cancel: the stop shuts its socket down, which
// wakes the wait.
void cancel_a_run_waiting_on_its_model(bool https) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request& r) {
    return FakeLlm::Plan{{"partial ", r.last_user()}, std::optional<std::size_t>(1)};
  });
  ServeWorld w;
  const ModelLink link(llm, https, w);
  w.write_config(link.provider_block(), "  run_threads: 1\n");
  ASSERT_TRUE(w.start());
  Posts posts(w.port());
  posts.post("c", "cancel me");
  ASSERT_TRUE(llm.wait_holding(1, milliseconds(60000))) << w.log();
  Json runs = runs_of(w.port(), "c", 1);
  ASSERT_EQ(runs.size(), 1u);
  const std::string run = runs[0].value("run_id", "");
  const auto asked = Clock::now();
  auto cancelled = request(w.port(), "POST", "/v1/runs/" + run + "/cancel");
  ASSERT_EQ(cancelled.status, 202) << cancelled.describe();
  posts.join();
  EXPECT_LT(Clock::now() - asked, milliseconds(10000));
  auto answer = posts.answer("cancel me");
  EXPECT_EQ(answer.json().value("status", ""), "cancelled") << answer.describe();
  EXPECT_TRUE(llm.wait_hung_up(1, milliseconds(30000))) << "the model call was abandoned";
  // The one thread is free again: the next run completes.
  llm.release();
  auto next = request(w.port(), "POST", "/v1/sessions/d/messages", message_body("next"), {},
                      milliseconds(60000));
  ASSERT_EQ(next.status, 200) << next.describe();
}

TEST(ServePool, ACancelledRunWaitingOnItsModelEndsAtOnce) {
  cancel_a_run_waiting_on_its_model(false);
}

TEST(ServePool, ACancelledRunWaitingOnItsModelOverHttpsEndsAtOnce) {
  cancel_a_run_waiting_on_its_model(true);
}

TEST(ServePool, RunsAwaitingApprovalHoldNoThread) {
  ApprovalWorld a;
  std::string script;
  for (int i = 0; i < 5; ++i) {
    const std::string word = "wait" + std::to_string(i);
    script += tally_call(word, word) + replay_text("finished " + word, word);
  }
  script += replay_text("free run answered", "free");
  ASSERT_TRUE(a.configure(script, "  run_threads: 2\n  approvals:\n    park: true\n"));
  ASSERT_TRUE(a.w.start());
  const int port = a.w.port();
  std::vector<std::unique_ptr<SseReader>> waiting;
  std::vector<std::vector<SseEvent>> seen(5);
  std::vector<std::string> approvals;
  for (int i = 0; i < 5; ++i) {
    const std::string word = "wait" + std::to_string(i);
    waiting.push_back(
        std::make_unique<SseReader>(port, "POST", "/v1/sessions/" + word + "/messages",
                                    message_body("please tally " + word, {{"stream", true}})));
    ASSERT_TRUE(waiting.back()->ok()) << waiting.back()->head().describe();
    ASSERT_TRUE(read_until(*waiting.back(), "approval_requested", seen[i])) << a.w.log();
    approvals.push_back(event_named(seen[i], "approval_requested").value("approval_id", ""));
  }
  // Five runs wait for a person, the pool has two threads: another run still completes.
  auto free = request(port, "POST", "/v1/sessions/free/messages", message_body("free"), {},
                      milliseconds(30000));
  ASSERT_EQ(free.status, 200) << free.describe() << a.w.log();
  EXPECT_EQ(free.json().value("text", ""), "free run answered");
  EXPECT_TRUE(a.tallied().empty());

  // Cancelled while parked: it ends at once, its approval denied.
  auto cancel = request(
      port, "POST",
      "/v1/runs/" + event_named(seen[4], "approval_requested").value("run_id", "") + "/cancel");
  ASSERT_EQ(cancel.status, 202) << cancel.describe();
  ASSERT_TRUE(read_until(*waiting[4], "run_end", seen[4]));
  EXPECT_EQ(seen[4].back().json().value("outcome", ""), "cancelled");
  EXPECT_EQ(event_named(seen[4], "approval_resolved").value("status", ""), "denied");

  for (int i = 0; i < 4; ++i) {
    auto d = request(port, "POST", "/v1/approvals/" + approvals[i], R"({"decision": "approve"})");
    ASSERT_EQ(d.status, 200) << d.describe();
  }
  for (int i = 0; i < 4; ++i) {
    const std::string word = "wait" + std::to_string(i);
    ASSERT_TRUE(read_until(*waiting[i], "run_end", seen[i])) << a.w.log();
    EXPECT_EQ(seen[i].back().json().value("text", ""), "finished " + word);
    EXPECT_EQ(count_of(a.tallied(), word), 1u) << word;
  }
  EXPECT_EQ(count_of(a.tallied(), "wait4"), 0u);
}

TEST(ServePool, AnApprovalThatExpiresWhileParkedDeniesAndTheRunEnds) {
  ApprovalWorld a;
  ASSERT_TRUE(a.configure(tally_call("late") + replay_text("finished late"),
                          "  run_threads: 1\n  approvals:\n    timeout_s: 1\n    park: true\n"));
  ASSERT_TRUE(a.w.start());
  SseReader sse(a.w.port(), "POST", "/v1/sessions/late/messages",
                message_body("please tally late", {{"stream", true}}));
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "run_end", seen)) << ::testing::PrintToString(names(seen));
  EXPECT_EQ(event_named(seen, "approval_resolved").value("status", ""), "expired");
  EXPECT_EQ(seen.back().json().value("text", ""), "finished late");
  EXPECT_TRUE(a.tallied().empty());
}

}  // namespace
