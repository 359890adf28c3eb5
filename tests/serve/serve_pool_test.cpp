// Runs on a bounded pool of threads (serve.run_threads): more runs than threads all complete,
// first come first served and in order within each session, never more model calls at once than
// threads; a run waiting for its pool thread is cancelled at once; and a run that waits for a
// person holds no thread (parked), so a pool of 2 with 5 runs awaiting approval still runs others.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "approval_world.hpp"

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

TEST(ServePool, MoreRunsThanThreadsAllCompleteInOrderAndAQueuedRunCancelsAtOnce) {
  FakeLlm llm;
  // "hold" calls keep both pool threads busy until released.
  llm.set_responder([](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    return FakeLlm::Plan{{"reply to ", m},
                         m.rfind("hold", 0) == 0 ? std::optional<std::size_t>(1) : std::nullopt};
  });
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm), "  run_threads: 2\n");
  ASSERT_TRUE(w.start());
  Posts posts(w.port());
  posts.post("h1", "hold-1");
  posts.post("h2", "hold-2");
  ASSERT_TRUE(llm.wait_holding(2, milliseconds(30000)));
  // Five runs in session q, in this order, and one in session r: none has a thread.
  std::vector<std::string> q;
  for (int i = 0; i < 5; ++i) {
    q.push_back("q-" + std::to_string(i));
    posts.post("q", q.back());
    ASSERT_EQ(runs_of(w.port(), "q", q.size()).size(), q.size());
  }
  posts.post("r", "r-0");
  Json r_runs = runs_of(w.port(), "r", 1);
  ASSERT_EQ(r_runs.size(), 1u);
  EXPECT_EQ(r_runs[0].value("status", ""), "queued") << r_runs.dump();
  for (const auto& run : runs_of(w.port(), "q", 5))
    EXPECT_EQ(run.value("status", ""), "queued") << "no thread is free for it";
  EXPECT_EQ(llm.requests(), 2u) << "two threads: two model calls at once";

  // Cancelled while waiting for a thread: it ends now, not when a thread frees up.
  const std::string r_run = r_runs[0].value("run_id", "");
  const auto asked = Clock::now();
  auto cancelled = request(w.port(), "POST", "/v1/runs/" + r_run + "/cancel");
  ASSERT_EQ(cancelled.status, 202) << cancelled.describe();
  EXPECT_EQ(cancelled.json().value("status", ""), "cancelled");
  EXPECT_LT(Clock::now() - asked, milliseconds(5000));
  EXPECT_EQ(request(w.port(), "GET", "/v1/runs/" + r_run).json().value("status", ""), "cancelled");

  llm.release();
  posts.join();
  for (const auto& m : q) {
    auto a = posts.answer(m);
    ASSERT_EQ(a.status, 200) << a.describe();
    EXPECT_EQ(a.json().value("text", ""), "reply to " + m);
  }
  EXPECT_EQ(posts.answer("r-0").json().value("status", ""), "cancelled");
  std::vector<std::string> expected;
  for (const auto& m : q) {
    expected.push_back("user:" + m);
    expected.push_back("assistant:reply to " + m);
  }
  EXPECT_EQ(transcript(w.port(), "q"), expected) << "the session's runs ran in arrival order";
  EXPECT_EQ(llm.requests(), 7u) << "the cancelled run never called the model";
  EXPECT_LE(llm.max_overlap([](const std::string&) { return std::string(); }), 2u);
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
