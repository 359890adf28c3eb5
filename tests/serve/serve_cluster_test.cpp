// `kernex serve` scaled out: several nodes (processes, each with its own data dir) share one
// PostgreSQL database through the postgres memory plugin and `serve.cluster`. Any node answers any
// request; a run executes on the one node that claimed it (lease renewed while it runs), others
// follow and cancel it; kill -9 of the running node hands the run to another node after the lease
// (on_lost: retry -> attempt 2, or interrupt -> failed "interrupted"). Each test gets a fresh
// database (tests/support/pg_test_db.hpp) and skips without KERNEX_TEST_PG_DSN.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "approval_world.hpp"
#include "pg_test_db.hpp"
#include "serve_harness.hpp"
#include "webhook_receiver.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using kernex::testing::PgTestDb;
using ::testing::ElementsAre;

constexpr int kLeaseSeconds = 2;
// kill -9 trials per run; KERNEX_CLUSTER_TRIALS=50 for a longer soak.
constexpr int kDefaultTrials = 10;

int trials() {
  const char* env = std::getenv("KERNEX_CLUSTER_TRIALS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : kDefaultTrials;
}

std::string run_id_of(const std::vector<SseEvent>& events) {
  for (const auto& e : events) {
    if (e.event == "run_start") return e.json().value("run_id", "");
  }
  return "";
}

// Event ids strictly increase (a retried run's stream goes on after the first attempt's events).
void expect_increasing_ids(const std::vector<SseEvent>& events) {
  long long last = 0;
  for (const auto& e : events) {
    const long long id = std::atoll(e.id.c_str());
    EXPECT_GT(id, last) << "event " << e.event << " id '" << e.id << "' after " << last;
    last = id;
  }
}

std::vector<std::string> transcript(int port, const std::string& session) {
  std::vector<std::string> out;
  for (const auto& m : session_messages(port, session))
    out.push_back(m.value("role", "") + ":" + content_text(m));
  return out;
}

Json get_run(int port, const std::string& run) {
  auto r = request(port, "GET", "/v1/runs/" + run);
  EXPECT_EQ(r.status, 200) << "GET /v1/runs/" << run << ": " << r.describe();
  return r.json().is_object() ? r.json() : Json::object();
}

// A string field, or "" (also when it is missing or not a string).
std::string str(const Json& j, const std::string& key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}
long long num(const Json& j, const std::string& key) {
  return j.is_object() && j.contains(key) && j[key].is_number_integer() ? j[key].get<long long>()
                                                                        : -1;
}

FakeLlm::Plan answer(const std::string& message, bool hold) {
  return FakeLlm::Plan{{"answer to ", message},
                       hold ? std::optional<std::size_t>(1) : std::nullopt};
}

// Several `kernex serve` nodes on one config (postgres memory, serve.cluster), each with its own
// data dir.
class ServeCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (db_.dsn().empty()) {
      if (HasFailure()) FAIL() << "no test database";
      GTEST_SKIP() << PgTestDb::skip_reason();
    }
  }
  void TearDown() override {
    llm_.release();  // held runs finish, so nodes stop at once on SIGTERM
    for (auto& n : nodes_) {
      if (n) n->signal(SIGCONT);  // a node a failed test left paused
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  // Writes the shared config and starts `n` nodes (in parallel: each waits for its listening line).
  // `extra`: more top-level YAML; `serve_extra`: more of the serve: section (indented).
  void start(int n, const std::string& on_lost = "retry", const std::string& extra = "",
             const std::string& serve_extra = "") {
    const std::string y =
        ServeWorld::openai_provider(llm_) +
        "memory:\n  name: postgres\n  options:\n    dsn: " + Json(db_.dsn()).dump() + "\n" + extra +
        "serve:\n  cluster:\n    lease_s: " + std::to_string(kLeaseSeconds) +
        "\n    on_lost: " + on_lost + "\n    max_attempts: " + std::to_string(max_attempts_) +
        "\n" + serve_extra;
    config_ = dir_.write("kernex.yaml", y);
    nodes_.resize(static_cast<std::size_t>(n));
    std::vector<std::thread> starting;
    for (int i = 0; i < n; ++i) starting.emplace_back([this, i] { start_node(i); });
    for (auto& t : starting) t.join();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(nodes_[static_cast<std::size_t>(i)] &&
                  nodes_[static_cast<std::size_t>(i)]->port() > 0)
          << "node " << i << " did not start";
    }
  }
  // (Re)starts node `i` as a fresh process with a fresh data dir.
  bool start_node(int i) {
    const int generation = generation_++;
    const fs::path data = dir_.path() / ("node-" + std::to_string(generation));
    fs::create_directories(data);
    // Skills trusted once (trust_skills) are trusted by every node.
    if (const fs::path trust = dir_.path() / "trust" / "trusted-skills.json"; fs::exists(trust))
      fs::copy_file(trust, data / "trusted-skills.json");
    auto node = std::make_unique<ServeProcess>();
    const bool ok = node->start(
        {"--config", config_.string(), "--listen", "127.0.0.1:0", "--data-dir", data.string()},
        dir_.path() / ("node-" + std::to_string(generation) + ".stderr"));
    if (!ok) ADD_FAILURE() << "node " << i << ": " << node->error();
    nodes_[static_cast<std::size_t>(i)] = std::move(node);
    return ok;
  }
  ServeProcess& node(int i) { return *nodes_[static_cast<std::size_t>(i)]; }
  int port(int i) { return node(i).port(); }

  // The node whose provider call for `message` is going on (held): its index, or -1.
  int holder(const std::string& message) {
    auto client = llm_.wait_ongoing(message, milliseconds(30000));
    if (!client) {
      ADD_FAILURE() << "no provider call for '" << message << "'\n" << logs();
      return -1;
    }
    std::vector<pid_t> pids;
    for (auto& n : nodes_) pids.push_back(n && n->running() ? n->pid() : -1);
    const pid_t pid = tcp_client_pid(*client, llm_.port(), pids);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (pid > 0 && pids[i] == pid) return static_cast<int>(i);
    }
    ADD_FAILURE() << "no node owns the provider connection from port " << *client;
    return -1;
  }

  // Every node's stderr, for failure messages.
  std::string logs() const {
    std::string out;
    for (int g = 0; g < generation_.load(); ++g) {
      out += "--- node-" + std::to_string(g) + ".stderr\n" +
             slurp(dir_.path() / ("node-" + std::to_string(g) + ".stderr")).substr(0, 4000);
    }
    return out;
  }

  // Sends every (node, session, message) POST at once (released together). wait_answered/finish.
  struct Post {
    int node;
    std::string session, message;
  };
  void fire(const std::vector<Post>& posts, const Json& extra) {
    responses_.assign(posts.size(), HttpResponse{});
    for (std::size_t i = 0; i < posts.size(); ++i) {
      const int p = port(posts[i].node);
      threads_.emplace_back([this, i, p, post = posts[i], extra] {
        {
          std::unique_lock lock(mutex_);
          go_cv_.wait(lock, [&] { return go_; });
        }
        auto r = request(p, "POST", "/v1/sessions/" + post.session + "/messages",
                         message_body(post.message, extra), {}, milliseconds(90000));
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
  bool wait_answered(std::size_t n, milliseconds limit) {
    std::unique_lock lock(mutex_);
    return done_cv_.wait_for(lock, limit, [&] { return answered_ >= n; });
  }
  void finish() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  int max_attempts_ = 3;
  PgTestDb db_;
  FakeLlm llm_;
  TempDir dir_;
  fs::path config_;
  std::atomic<int> generation_{0};  // names each started node's data dir and log
  std::vector<std::unique_ptr<ServeProcess>> nodes_;

  std::mutex mutex_;
  std::condition_variable go_cv_, done_cv_;
  bool go_ = false;
  std::size_t answered_ = 0;
  std::vector<HttpResponse> responses_;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------------------------
// 1. Shared sessions, runs and history

TEST_F(ServeCluster, AnyNodeReadsWhatAnotherNodeRan) {
  std::mutex seen_mutex;
  std::vector<std::string> context_of_again;
  llm_.set_responder([&](const FakeLlm::Request& r) {
    if (r.last_user() == "again") {
      std::lock_guard lock(seen_mutex);
      for (const auto& m : r.body["messages"]) {
        if (m.value("role", "") == "system") continue;
        context_of_again.push_back(m.value("role", "") + ":" +
                                   (m.contains("content") ? m["content"].dump() : ""));
      }
    }
    return answer(r.last_user(), false);
  });
  ASSERT_NO_FATAL_FAILURE(start(2));
  auto posted = request(port(0), "POST", "/v1/sessions/shared/messages", message_body("hello"));
  ASSERT_EQ(posted.status, 200) << posted.describe() << logs();
  EXPECT_EQ(str(posted.json(), "text"), "answer to hello");
  const std::string run = str(posted.json(), "run_id");
  ASSERT_FALSE(run.empty()) << posted.body;

  EXPECT_THAT(transcript(port(1), "shared"),
              ElementsAre("user:hello", "assistant:answer to hello"));
  Json r = get_run(port(1), run);
  EXPECT_EQ(str(r, "status"), "done") << r.dump();
  EXPECT_EQ(str(r, "session_id"), "shared") << r.dump();
  EXPECT_FALSE(str(r, "node").empty()) << "GET run names the node that ran it: " << r.dump();
  EXPECT_EQ(num(r, "attempt"), 1) << r.dump();
  EXPECT_EQ(get_run(port(0), run), r) << "both nodes tell the same run";
  auto runs = request(port(1), "GET", "/v1/sessions/shared/runs");
  ASSERT_EQ(runs.status, 200) << runs.describe();
  ASSERT_EQ(runs.json()["runs"].size(), 1u) << runs.body;
  EXPECT_EQ(str(runs.json()["runs"][0], "run_id"), run);

  // The next message, on the other node, sees the first exchange as context.
  auto again = request(port(1), "POST", "/v1/sessions/shared/messages", message_body("again"));
  ASSERT_EQ(again.status, 200) << again.describe() << logs();
  EXPECT_EQ(str(again.json(), "text"), "answer to again");
  {
    std::lock_guard lock(seen_mutex);
    EXPECT_THAT(context_of_again,
                ElementsAre("user:\"hello\"", "assistant:\"answer to hello\"", "user:\"again\""));
  }
  EXPECT_THAT(transcript(port(0), "shared"),
              ElementsAre("user:hello", "assistant:answer to hello", "user:again",
                          "assistant:answer to again"));

  auto deleted = request(port(1), "DELETE", "/v1/sessions/shared");
  EXPECT_EQ(deleted.status, 200) << deleted.describe();
  EXPECT_TRUE(session_is_empty(port(0), "shared"))
      << "a session deleted on one node is gone on the other";
}

// A session deleted on one node leaves no row holding its words in any table of the database
// (runs, events, memory and its search columns), while another session's stay.
TEST_F(ServeCluster, ForgetLeavesNoRowOfTheSessionInPostgres) {
  llm_.set_responder([](const FakeLlm::Request& r) { return answer(r.last_user(), false); });
  ASSERT_NO_FATAL_FAILURE(start(2));
  const std::string word = "quokkafjord7731", kept = "wombatlagoon4410";
  ASSERT_EQ(request(port(0), "POST", "/v1/sessions/alice%40example.com/messages",
                    message_body("remember " + word))
                .status,
            200)
      << logs();
  ASSERT_EQ(
      request(port(0), "POST", "/v1/sessions/bob/messages", message_body("keep " + kept)).status,
      200);
  // Rows of every table of the database whose text holds `w`.
  const auto rows_holding = [&](const std::string& w) {
    std::string n;
    db_.exec(
        "SELECT coalesce(sum((xpath('/row/c/text()', query_to_xml(format('SELECT count(*) AS "
        "c FROM %I.%I t WHERE t::text LIKE %L', table_schema, table_name, '%" +
            w +
            "%'), false, true, '')))[1]::text::int), 0) FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
        &n);
    return std::atoi(n.c_str());
  };
  ASSERT_GT(rows_holding(word), 0) << "the scan must see the words where they are";
  auto deleted = request(port(1), "DELETE", "/v1/sessions/alice%40example.com");
  ASSERT_EQ(deleted.status, 200) << deleted.describe();
  EXPECT_EQ(rows_holding(word), 0);
  EXPECT_EQ(rows_holding("alice@example.com"), 0) << "no row of a plain chat names the session";
  EXPECT_GT(rows_holding(kept), 0) << "another session's rows stay";
}

// ---------------------------------------------------------------------------------------------
// 2, 3. Following and cancelling a run that executes on another node

TEST_F(ServeCluster, FollowerOnAnotherNodeSeesEveryEventInOrder) {
  llm_.set_responder([](const FakeLlm::Request&) {
    return FakeLlm::Plan{{"al", "pha", " be", "ta", " gam", "ma"}, 3};
  });
  ASSERT_NO_FATAL_FAILURE(start(2));
  SseReader owner(port(0), "POST", "/v1/sessions/follow/messages",
                  message_body("go", Json{{"stream", true}}));
  ASSERT_TRUE(owner.ok()) << owner.head().describe() << logs();
  std::vector<SseEvent> owned;
  ASSERT_TRUE(read_until(owner, "run_start", owned));
  const std::string run = run_id_of(owned);
  const int h = holder("go");
  ASSERT_GE(h, 0);
  const int other = 1 - h;

  SseReader follower(port(other), "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(follower.ok()) << follower.head().describe();
  std::vector<SseEvent> followed;
  // What the running node produced before the hold reaches the other node's client.
  ASSERT_TRUE(read_until(follower, "text_delta", followed, milliseconds(10000)))
      << "node " << other << " never relayed the live events of node " << h << ": "
      << ::testing::PrintToString(names(followed)) << logs();
  EXPECT_EQ(str(get_run(port(other), run), "status"), "running");
  llm_.release();
  auto rest = follower.drain(milliseconds(30000));
  followed.insert(followed.end(), rest.begin(), rest.end());
  expect_well_formed(followed, "follow");
  ASSERT_FALSE(followed.empty());
  EXPECT_EQ(followed.back().event, "run_end") << ::testing::PrintToString(names(followed));
  EXPECT_EQ(cat_text(followed), "alpha beta gamma");
  EXPECT_EQ(followed.back().json().value("text", ""), "alpha beta gamma");
  EXPECT_TRUE(follower.ended()) << "the stream ends after run_end";

  auto owner_rest = owner.drain(milliseconds(30000));
  owned.insert(owned.end(), owner_rest.begin(), owner_rest.end());
  ASSERT_EQ(owned.size(), followed.size()) << ::testing::PrintToString(names(owned));
  for (std::size_t i = 0; i < owned.size(); ++i) {
    EXPECT_EQ(owned[i].id, followed[i].id);
    EXPECT_EQ(owned[i].event, followed[i].event);
    EXPECT_EQ(owned[i].json(), followed[i].json());
  }
  Json r = get_run(port(other), run);
  EXPECT_EQ(str(r, "status"), "done") << r.dump();
  EXPECT_EQ(num(r, "attempt"), 1) << r.dump();
  EXPECT_EQ(llm_.requests(), 1u);
}

TEST_F(ServeCluster, CancelOnAnotherNodeEndsTheRunPromptly) {
  llm_.set_responder([](const FakeLlm::Request& r) {
    return r.last_user() == "talk" ? FakeLlm::Plan{{"Hel", "lo", " never"}, 2}
                                   : answer(r.last_user(), false);
  });
  ASSERT_NO_FATAL_FAILURE(start(2));
  SseReader owner(port(0), "POST", "/v1/sessions/cx/messages",
                  message_body("talk", Json{{"stream", true}}));
  ASSERT_TRUE(owner.ok()) << owner.head().describe() << logs();
  std::vector<SseEvent> owned;
  ASSERT_TRUE(read_until(owner, "run_start", owned));
  const std::string run = run_id_of(owned);
  const int h = holder("talk");
  ASSERT_GE(h, 0);
  const int other = 1 - h;
  SseReader follower(port(other), "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(follower.ok()) << follower.head().describe();
  std::vector<SseEvent> followed;
  ASSERT_TRUE(read_until(follower, "text_delta", followed, milliseconds(10000))) << logs();

  const auto asked = Clock::now();
  auto c = request(port(other), "POST", "/v1/runs/" + run + "/cancel");
  ASSERT_EQ(c.status, 202) << c.describe();
  EXPECT_EQ(str(c.json(), "run_id"), run);
  ASSERT_TRUE(read_until(follower, "run_end", followed, milliseconds(10000)))
      << ::testing::PrintToString(names(followed)) << logs();
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - asked).count();
  EXPECT_LT(took, 2000) << "run_end reached the cancelling node's client " << took
                        << " ms after cancel";
  EXPECT_EQ(followed.back().json().value("outcome", ""), "cancelled") << followed.back().data;
  EXPECT_TRUE(llm_.wait_hung_up(1, milliseconds(2000)))
      << "node " << h << " did not abandon the provider call";
  EXPECT_TRUE(follower.drain(milliseconds(2000)).empty());
  EXPECT_TRUE(follower.ended());

  ASSERT_TRUE(read_until(owner, "run_end", owned, milliseconds(5000)))
      << ::testing::PrintToString(names(owned));
  EXPECT_EQ(owned.back().json().value("outcome", ""), "cancelled");
  EXPECT_EQ(str(get_run(port(0), run), "status"), "cancelled");
  EXPECT_EQ(str(get_run(port(1), run), "status"), "cancelled");
  // The session is free again, from either node.
  auto next = request(port(other), "POST", "/v1/sessions/cx/messages", message_body("again"));
  EXPECT_EQ(next.status, 200) << next.describe();
  EXPECT_EQ(str(next.json(), "text"), "answer to again");
}

// ---------------------------------------------------------------------------------------------
// 4. One active run per session across nodes

std::string numbered(const std::string& prefix, int i) {
  char b[16];
  std::snprintf(b, sizeof b, "-%02d", i);
  return prefix + b;
}

TEST_F(ServeCluster, RejectAcceptsOneMessageAcrossNodes) {
  constexpr int kMessages = 10;
  llm_.set_responder([](const FakeLlm::Request& r) { return answer(r.last_user(), true); });
  ASSERT_NO_FATAL_FAILURE(start(2));
  std::vector<Post> posts;
  for (int i = 0; i < kMessages; ++i) posts.push_back({i % 2, "rej", numbered("rej", i)});
  fire(posts, Json{{"if_busy", "reject"}});
  ASSERT_TRUE(wait_answered(kMessages - 1, milliseconds(60000)))
      << "the busy session's messages were not refused on both nodes\n"
      << logs();
  llm_.release();
  finish();
  int ok = 0, busy = 0;
  std::string accepted;
  for (int i = 0; i < kMessages; ++i) {
    const auto& r = responses_[static_cast<std::size_t>(i)];
    SCOPED_TRACE(posts[static_cast<std::size_t>(i)].message + " on node " +
                 std::to_string(posts[static_cast<std::size_t>(i)].node));
    if (r.status == 200) {
      ++ok;
      accepted = posts[static_cast<std::size_t>(i)].message;
      EXPECT_EQ(str(r.json(), "text"), "answer to " + accepted);
    } else {
      EXPECT_EQ(r.status, 409) << r.describe();
      EXPECT_EQ(r.error_code(), "session_busy") << r.describe();
      ++busy;
    }
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(busy, kMessages - 1);
  EXPECT_EQ(llm_.requests(), 1u) << "refused messages never reach the provider";
  EXPECT_THAT(transcript(port(1), "rej"),
              ElementsAre("user:" + accepted, "assistant:answer to " + accepted));
}

TEST_F(ServeCluster, EnqueueRunsEachSessionInArrivalOrderNeverTwoAtOnce) {
  constexpr int kPerSession = 8;
  const std::vector<std::string> sessions{"qa", "qb"};
  std::mutex first_mutex;
  std::set<std::string> started;  // sessions whose first provider call was made
  // Each session's first run holds until every message has been queued behind it.
  llm_.set_responder([&](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    bool first;
    {
      std::lock_guard lock(first_mutex);
      first = started.insert(m.substr(0, 2)).second;
    }
    return answer(m, first);
  });
  ASSERT_NO_FATAL_FAILURE(start(2));
  std::vector<Post> posts;
  for (int i = 0; i < kPerSession; ++i) {
    for (std::size_t s = 0; s < sessions.size(); ++s) {
      posts.push_back({static_cast<int>((static_cast<std::size_t>(i) + s) % 2), sessions[s],
                       numbered(sessions[s], i)});
    }
  }
  fire(posts, Json{{"if_busy", "enqueue"}});
  ASSERT_TRUE(llm_.wait_holding(sessions.size(), milliseconds(30000))) << logs();
  // Bounded wait until every run exists (nothing signals "queued" to a non-stream client).
  std::map<std::string, Json> runs;
  const auto deadline = Clock::now() + milliseconds(30000);
  for (bool all = false; !all && Clock::now() < deadline;) {
    all = true;
    for (const auto& s : sessions) {
      runs[s] = request(port(0), "GET", "/v1/sessions/" + s + "/runs").json();
      all = all && runs[s].contains("runs") && runs[s]["runs"].size() == kPerSession;
    }
    if (!all) std::this_thread::sleep_for(milliseconds(20));
  }
  for (const auto& s : sessions) {
    ASSERT_EQ(runs[s]["runs"].size(), static_cast<std::size_t>(kPerSession))
        << s << ": " << runs[s].dump();
    int queued = 0, running = 0;
    for (const auto& r : runs[s]["runs"]) {
      queued += r.value("status", "") == "queued";
      running += r.value("status", "") == "running";
    }
    EXPECT_EQ(running, 1) << s << ": " << runs[s].dump();
    EXPECT_EQ(queued, kPerSession - 1) << s << ": " << runs[s].dump();
  }
  llm_.release();
  finish();

  std::map<std::string, std::string> message_of_run;
  for (std::size_t i = 0; i < posts.size(); ++i) {
    ASSERT_EQ(responses_[i].status, 200) << posts[i].message << ": " << responses_[i].describe();
    Json j = responses_[i].json();
    EXPECT_EQ(str(j, "status"), "done") << j.dump();
    EXPECT_EQ(str(j, "text"), "answer to " + posts[i].message);
    message_of_run[str(j, "run_id")] = posts[i].message;
  }
  for (const auto& s : sessions) {
    SCOPED_TRACE("session " + s);
    // Arrival order: the runs list is newest first.
    auto final_runs = request(port(1), "GET", "/v1/sessions/" + s + "/runs").json()["runs"];
    std::vector<std::string> expected;
    for (auto it = final_runs.rbegin(); it != final_runs.rend(); ++it) {
      EXPECT_EQ(it->value("status", ""), "done");
      const std::string m = message_of_run[it->value("run_id", "")];
      expected.push_back("user:" + m);
      expected.push_back("assistant:answer to " + m);
    }
    EXPECT_EQ(transcript(port(0), s), expected);
  }
  EXPECT_EQ(llm_.max_overlap([](const std::string& m) { return m.substr(0, 2); }), 1u)
      << "two runs of one session called the provider at once";
  EXPECT_EQ(llm_.requests(), posts.size());
}

// ---------------------------------------------------------------------------------------------
// 5, 6. kill -9 of the node running a run

TEST_F(ServeCluster, KillNineOfTheRunningNodeRetriesTheRunElsewhere) {
  // The first call for a message holds until the caller dies; the retry answers at once.
  std::mutex first_mutex;
  std::set<std::string> seen;
  llm_.set_responder([&](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    std::lock_guard lock(first_mutex);
    return answer(m, seen.insert(m).second);
  });
  constexpr int kNodes = 3;
  ASSERT_NO_FATAL_FAILURE(start(kNodes));
  const int n = trials();
  for (int k = 0; k < n; ++k) {
    SCOPED_TRACE("trial " + std::to_string(k) + " of " + std::to_string(n));
    const std::string session = "trial" + std::to_string(k),
                      message = "question " + std::to_string(k);
    const int entry = k % kNodes;
    SseReader sse(port(entry), "POST", "/v1/sessions/" + session + "/messages",
                  message_body(message, Json{{"stream", true}}));
    ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
    std::vector<SseEvent> acked;
    ASSERT_TRUE(read_until(sse, "text_delta", acked))
        << ::testing::PrintToString(names(acked)) << logs();
    const std::string run = run_id_of(acked);
    ASSERT_FALSE(run.empty());
    const int h = holder(message);
    ASSERT_GE(h, 0);
    const int survivor = (h + 1) % kNodes;
    Json before = get_run(port(survivor), run);
    EXPECT_EQ(str(before, "status"), "running") << before.dump();
    EXPECT_EQ(num(before, "attempt"), 1) << before.dump();
    const std::string first_node = str(before, "node");
    EXPECT_FALSE(first_node.empty()) << before.dump();

    const std::size_t hung = llm_.hung_up();
    const auto killed = Clock::now();
    ASSERT_TRUE(node(h).kill9()) << "node " << h << " outlived kill -9";
    ASSERT_TRUE(llm_.wait_hung_up(hung + 1, milliseconds(10000)))
        << "the dead node's provider call did not end";
    ASSERT_TRUE(start_node(h)) << "replacement for node " << h;

    SseReader follow(port(survivor), "GET", "/v1/runs/" + run + "/events", "");
    ASSERT_TRUE(follow.ok()) << follow.head().describe();
    auto events = follow.drain(milliseconds(60000));
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - killed).count();
    ASSERT_FALSE(events.empty());
    ASSERT_TRUE(events.back().event == "run_end") << ::testing::PrintToString(names(events)) << "\n"
                                                  << events.back().data << "\n"
                                                  << logs();
    EXPECT_LT(took, 20000) << "the run ended " << took << " ms after kill -9 (lease "
                           << kLeaseSeconds << " s)";
    EXPECT_EQ(events.front().event, "run_start");
    expect_increasing_ids(events);
    std::size_t retry_at = events.size();
    int retries = 0, ends = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      ends += events[i].event == "run_end" || events[i].event == "error";
      if (events[i].event != "run_retry") continue;
      ++retries;
      retry_at = i;
      Json d = events[i].json();
      EXPECT_EQ(str(d, "run_id"), run) << d.dump();
      EXPECT_EQ(num(d, "attempt"), 2) << d.dump();
      EXPECT_FALSE(str(d, "reason").empty()) << d.dump();
    }
    EXPECT_EQ(retries, 1) << ::testing::PrintToString(names(events));
    EXPECT_EQ(ends, 1) << ::testing::PrintToString(names(events));
    EXPECT_EQ(cat_text(events, retry_at), "answer to " + message)
        << "the new attempt's text after run_retry";
    EXPECT_EQ(events.back().json().value("outcome", ""), "end_turn") << events.back().data;
    EXPECT_EQ(events.back().json().value("text", ""), "answer to " + message) << events.back().data;

    Json after = get_run(port(survivor), run);
    EXPECT_EQ(str(after, "status"), "done") << after.dump();
    EXPECT_EQ(num(after, "attempt"), 2) << after.dump();
    EXPECT_FALSE(str(after, "node").empty()) << after.dump();
    EXPECT_NE(str(after, "node"), first_node) << "the dead node cannot have finished the run";
    EXPECT_THAT(transcript(port(h), session),
                ElementsAre("user:" + message, "assistant:answer to " + message))
        << "the acknowledged message and its answer, exactly once";
    EXPECT_EQ(llm_.calls_for(message), 2u);
    EXPECT_EQ(llm_.max_overlap([](const std::string& m) { return m; }), 1u)
        << "one run's message was being answered for two nodes at once";
    if (entry != h) {
      // The client that posted on a surviving node stays with the run through the retry.
      auto rest = sse.drain(milliseconds(30000));
      acked.insert(acked.end(), rest.begin(), rest.end());
      EXPECT_EQ(acked.back().event, "run_end") << ::testing::PrintToString(names(acked));
      EXPECT_EQ(std::count_if(acked.begin(), acked.end(),
                              [](const SseEvent& e) { return e.event == "run_retry"; }),
                1)
          << ::testing::PrintToString(names(acked));
    }
    if (HasFailure()) return;  // the first failing trial says it all
  }
}

// Every attempt dies: after max_attempts (3) the run fails as interrupted instead of going round
// forever.
TEST_F(ServeCluster, RetriesStopAtMaxAttempts) {
  llm_.set_responder([](const FakeLlm::Request& r) { return answer(r.last_user(), true); });
  constexpr int kNodes = 3;
  ASSERT_NO_FATAL_FAILURE(start(kNodes));
  SseReader sse(port(0), "POST", "/v1/sessions/cursed/messages",
                message_body("cursed", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
  std::vector<SseEvent> acked;
  ASSERT_TRUE(read_until(sse, "run_start", acked)) << logs();
  const std::string run = run_id_of(acked);
  for (int attempt = 1; attempt <= 3; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    const int h = holder("cursed");  // the call of this attempt (the killed ones have ended)
    ASSERT_GE(h, 0);
    EXPECT_EQ(num(get_run(port((h + 1) % kNodes), run), "attempt"), attempt);
    ASSERT_TRUE(node(h).kill9());
    ASSERT_TRUE(llm_.wait_hung_up(static_cast<std::size_t>(attempt), milliseconds(10000)));
    ASSERT_TRUE(start_node(h));
  }
  SseReader follow(port(0), "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(follow.ok()) << follow.head().describe();
  auto events = follow.drain(milliseconds(60000));
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().event, "error") << ::testing::PrintToString(names(events)) << "\n"
                                          << logs();
  EXPECT_EQ(str(events.back().json(), "code"), "interrupted") << events.back().data;
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const SseEvent& e) { return e.event == "run_retry"; }),
            2)
      << ::testing::PrintToString(names(events));
  Json r = get_run(port(1), run);
  EXPECT_EQ(str(r, "status"), "failed") << r.dump();
  EXPECT_EQ(num(r, "attempt"), 3) << r.dump();
  EXPECT_EQ(llm_.calls_for("cursed"), 3u);
  EXPECT_EQ(llm_.max_overlap([](const std::string& m) { return m; }), 1u);
}

// Not a death but a pause (SIGSTOP, as a long GC or VM stall would): the lease runs out, another
// node retries the run, and the paused node, resumed with its provider reply now complete, must
// not commit a second answer or events to the finished run.
TEST_F(ServeCluster, APausedNodeThatLostItsLeaseCommitsNothing) {
  std::mutex first_mutex;
  std::set<std::string> seen;
  llm_.set_responder([&](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    std::lock_guard lock(first_mutex);
    return answer(m, seen.insert(m).second);
  });
  ASSERT_NO_FATAL_FAILURE(start(2));
  SseReader sse(port(0), "POST", "/v1/sessions/pause/messages",
                message_body("stalled", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
  std::vector<SseEvent> acked;
  ASSERT_TRUE(read_until(sse, "text_delta", acked)) << logs();
  const std::string run = run_id_of(acked);
  const int h = holder("stalled");
  ASSERT_GE(h, 0);
  const int other = 1 - h;
  node(h).signal(SIGSTOP);
  SseReader follow(port(other), "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(follow.ok()) << follow.head().describe();
  auto events = follow.drain(milliseconds(60000));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "run_end") << ::testing::PrintToString(names(events)) << logs();
  EXPECT_EQ(events.back().json().value("text", ""), "answer to stalled");

  // Resume the paused node with its reply complete, then let it drain and exit: whatever it did
  // with the run, it did before it exited.
  llm_.release();
  node(h).signal(SIGCONT);
  auto status = node(h).stop(milliseconds(30000));
  EXPECT_TRUE(status.has_value()) << "the resumed node did not exit on SIGTERM";

  SseReader replay(port(other), "GET", "/v1/runs/" + run + "/events", "");
  auto again = replay.drain(milliseconds(30000));
  ASSERT_EQ(names(again), names(events)) << "the run's events changed after it ended";
  for (std::size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].data, events[i].data);
  Json r = get_run(port(other), run);
  EXPECT_EQ(str(r, "status"), "done") << r.dump();
  EXPECT_EQ(num(r, "attempt"), 2) << r.dump();
  EXPECT_EQ(str(r.contains("result") ? r["result"] : Json::object(), "text"), "answer to stalled")
      << r.dump();
  EXPECT_THAT(transcript(port(other), "pause"),
              ElementsAre("user:stalled", "assistant:answer to stalled"))
      << "the paused node's late answer was saved too";
}

TEST_F(ServeCluster, KillNineWithOnLostInterruptFailsTheRun) {
  llm_.set_responder(
      [](const FakeLlm::Request& r) { return answer(r.last_user(), r.last_user() == "doomed"); });
  ASSERT_NO_FATAL_FAILURE(start(2, "interrupt"));
  SseReader sse(port(0), "POST", "/v1/sessions/intr/messages",
                message_body("doomed", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
  std::vector<SseEvent> acked;
  ASSERT_TRUE(read_until(sse, "text_delta", acked)) << logs();
  const std::string run = run_id_of(acked);
  const int h = holder("doomed");
  ASSERT_GE(h, 0);
  const int other = 1 - h;
  const auto killed = Clock::now();
  ASSERT_TRUE(node(h).kill9());
  ASSERT_TRUE(llm_.wait_hung_up(1, milliseconds(10000)));

  SseReader follow(port(other), "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(follow.ok()) << follow.head().describe();
  auto events = follow.drain(milliseconds(60000));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - killed).count();
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().event, "error") << ::testing::PrintToString(names(events)) << "\n"
                                          << logs();
  EXPECT_LT(took, 20000) << "the run failed " << took << " ms after kill -9 (lease "
                         << kLeaseSeconds << " s)";
  Json err = events.back().json();
  EXPECT_EQ(str(err, "code"), "interrupted") << err.dump();
  EXPECT_EQ(str(err, "run_id"), run) << err.dump();
  expect_increasing_ids(events);
  for (const auto& e : events)
    EXPECT_NE(e.event, "run_retry") << "on_lost: interrupt never retries";
  EXPECT_EQ(llm_.calls_for("doomed"), 1u);
  Json r = get_run(port(other), run);
  EXPECT_EQ(str(r, "status"), "failed") << r.dump();

  // The session is not left busy, and the failed run never got an answer.
  auto next = request(port(other), "POST", "/v1/sessions/intr/messages", message_body("after"));
  ASSERT_EQ(next.status, 200) << next.describe();
  EXPECT_EQ(str(next.json(), "text"), "answer to after");
  auto t = transcript(port(other), "intr");
  EXPECT_EQ(std::count(t.begin(), t.end(), "assistant:answer to doomed"), 0)
      << ::testing::PrintToString(t);
  ASSERT_GE(t.size(), 2u);
  EXPECT_EQ(t[t.size() - 2], "user:after");
  EXPECT_EQ(t.back(), "assistant:answer to after");
}

// ---------------------------------------------------------------------------------------------
// Webhooks and tenant limits in cluster mode (server/src/cluster_outbox, cluster_limits)

// A tenant limited to one run at a time gets one across both nodes; each run's end reaches the
// webhook endpoint once, whichever node ran it and whichever node sends it.
TEST_F(ServeCluster, WebhooksAndLimitsHoldAcrossNodes) {
  kernex::test::WebhookReceiver receiver("whsec-test");
  receiver.up();
  llm_.set_responder(
      [](const FakeLlm::Request& r) { return answer(r.last_user(), r.last_user() == "held"); });
  ASSERT_NO_FATAL_FAILURE(start(2, "retry", "",
                                "  limits:\n    default:\n      concurrent_runs: 1\n"
                                "  webhooks:\n    - url: " +
                                    receiver.url() +
                                    "\n      secret: whsec-test\n      events: [run.completed]\n"
                                    "      backoff_base_ms: 10\n      backoff_cap_ms: 50\n"));
  fire({{0, "a", "held"}}, Json::object());
  ASSERT_GE(holder("held"), 0);
  auto refused = request(port(1), "POST", "/v1/sessions/b/messages", message_body("no room"));
  EXPECT_EQ(refused.status, 429) << refused.describe() << logs();
  EXPECT_FALSE(refused.header("retry-after").empty()) << refused.describe();
  llm_.release();
  ASSERT_TRUE(wait_answered(1, milliseconds(30000)));
  finish();
  ASSERT_EQ(responses_[0].status, 200) << responses_[0].describe() << logs();
  auto second = request(port(1), "POST", "/v1/sessions/b/messages", message_body("room now"));
  ASSERT_EQ(second.status, 200) << second.describe() << logs();
  ASSERT_TRUE(receiver.wait_distinct(2, milliseconds(30000))) << logs();
  EXPECT_EQ(receiver.duplicates(), 0u);
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
  std::set<std::string> runs;
  for (const auto& d : receiver.accepted()) {
    EXPECT_EQ(d.type, "run.completed");
    runs.insert(Json::parse(d.body)["data"].value("run_id", ""));
  }
  EXPECT_EQ(runs, (std::set<std::string>{str(responses_[0].json(), "run_id"),
                                         str(second.json(), "run_id")}));
}

// ---------------------------------------------------------------------------------------------
// Journals and approvals in PostgreSQL: a run asking a person holds no node; any node takes the
// decision and any node resumes the run from its journal; a tool never runs twice.

// The tally fixture skill (a tool appending one line per run to tally.txt) trusted for every node
// (start_node copies the trust file), and the config lines that offer it under `ask: [tally]`.
std::string tally_config(const TempDir& dir) {
  const std::string skills = std::string(KERNEX_SERVE_FIXTURES) + "/skills";
  const std::string lines = "skill_dirs:\n  - " + skills +
                            "\ntoolboxes:\n  - name: script\n    options:\n      timeout: 60\n" +
                            "permissions:\n  ask:\n    - tally\n";
  const fs::path trust = dir.path() / "trust";
  fs::create_directories(trust);
  const fs::path cfg =
      dir.write("trust.yaml", "memory: sqlite\ndata_dir: " + trust.string() + "\n" + lines);
  auto r = run_kernex({"skills", "trust", "--config", cfg.string(), skills + "/tally"}, dir.path());
  if (r.exit_code != 0) ADD_FAILURE() << "skills trust: " << r.out << r.err;
  return lines;
}

// "please tally W": the model calls tally(W), then, given the tool's result, answers "finished
// W".
std::string tally_word(const FakeLlm::Request& r) {
  const std::string m = r.last_user();
  return m.substr(m.rfind(' ') + 1);
}
bool tool_answered(const FakeLlm::Request& r) {  // a tool result after the last user message
  bool answered = false;
  if (!r.body.contains("messages")) return false;
  for (const auto& msg : r.body.at("messages")) {
    const std::string role = msg.value("role", "");
    if (role == "user") answered = false;
    if (role == "tool") answered = true;
  }
  return answered;
}
void play_tally(FakeLlm& llm) {
  llm.set_responder([](const FakeLlm::Request& r) {
    return FakeLlm::Plan{tool_answered(r) ? std::vector<std::string>{"finished " + tally_word(r)}
                                          : std::vector<std::string>{},
                         std::nullopt};
  });
  // "please stall ... W" calls stall instead (it blocks until its process is killed); the
  // message names the tally skill, whose tools are offered when a message mentions it.
  llm.set_tool_caller([](const FakeLlm::Request& r) {
    if (tool_answered(r)) return std::vector<Json>{};
    const std::string word = tally_word(r);
    if (r.last_user().starts_with("please stall "))
      return std::vector<Json>{
          Json{{"id", "s-" + word}, {"name", "stall"}, {"arguments", Json::object()}}};
    return std::vector<Json>{
        Json{{"id", "t-" + word}, {"name", "tally"}, {"arguments", {{"word", word}}}}};
  });
}

// The run's row as the database has it: "status lease" (lease "-" when none is held).
std::string stored_run(const PgTestDb& db, const std::string& run) {
  std::string v;
  db.exec(
      "SELECT status || ' ' || CASE WHEN lease_until IS NULL THEN '-' ELSE 'held' END FROM "
      "serve_runs WHERE id = '" +
          run + "'",
      &v);
  return v;
}

// Polls the database (no event says it) until the run is stored as `want`, for up to 10 s.
bool stored_as(const PgTestDb& db, const std::string& run, const std::string& want) {
  const auto deadline = Clock::now() + milliseconds(10000);
  while (Clock::now() < deadline) {
    if (stored_run(db, run) == want) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

std::size_t count_line(const std::vector<std::string>& lines, const std::string& line) {
  return static_cast<std::size_t>(std::count(lines.begin(), lines.end(), line));
}

TEST_F(ServeCluster, AnApprovalIsDecidedOnAnyNodeWhileTheRunHoldsNoNode) {
  play_tally(llm_);
  ASSERT_NO_FATAL_FAILURE(start(3, "retry", tally_config(dir_)));
  SseReader sse(port(0), "POST", "/v1/sessions/apr/messages",
                message_body("please tally w1", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "approval_requested", seen))
      << ::testing::PrintToString(names(seen)) << logs();
  const Json asked = event_named(seen, "approval_requested");
  const std::string id = str(asked, "approval_id"), run = str(asked, "run_id");
  EXPECT_EQ(str(asked, "tool"), "tally");
  // Waiting costs no node anything: no lease, and every node shows the wait.
  ASSERT_TRUE(stored_as(db_, run, "awaiting_approval -")) << stored_run(db_, run) << logs();
  EXPECT_EQ(str(get_run(port(1), run), "status"), "awaiting_approval");
  auto pending = request(port(2), "GET", "/v1/sessions/apr/approvals");
  ASSERT_EQ(pending.status, 200) << pending.describe();
  ASSERT_EQ(pending.json()["approvals"].size(), 1u) << pending.body;
  EXPECT_EQ(str(pending.json()["approvals"][0], "approval_id"), id);
  EXPECT_TRUE(lines_of_files_named(dir_.path(), "tally.txt").empty())
      << "the tool ran before approval";

  auto decided = request(port(2), "POST", "/v1/approvals/" + id, R"({"decision": "approve"})");
  ASSERT_EQ(decided.status, 200) << decided.describe();
  EXPECT_EQ(str(decided.json(), "status"), "approved");
  ASSERT_TRUE(read_until(sse, "run_end", seen)) << ::testing::PrintToString(names(seen)) << logs();
  EXPECT_EQ(str(seen.back().json(), "text"), "finished w1") << seen.back().data;
  expect_increasing_ids(seen);
  // The resumed attempt replayed its journal: what the suspended one emitted is not emitted
  // again, and the put-off call's denial never shows.
  for (const char* once : {"run_start", "tool_call", "approval_requested", "approval_resolved",
                           "tool_result", "run_end"}) {
    EXPECT_EQ(
        std::count_if(seen.begin(), seen.end(), [&](const SseEvent& e) { return e.event == once; }),
        1)
        << once << " in " << ::testing::PrintToString(names(seen));
  }
  EXPECT_FALSE(event_named(seen, "tool_result").value("is_error", true)) << logs();
  // From another node, with the Last-Event-ID a client had before the park: exactly the rest.
  std::size_t asked_at = 0;
  while (asked_at < seen.size() && seen[asked_at].event != "approval_requested") ++asked_at;
  ASSERT_LT(asked_at, seen.size());
  SseReader tail(port(1), "GET", "/v1/runs/" + run + "/events", "",
                 {{"Last-Event-ID", seen[asked_at].id}});
  ASSERT_TRUE(tail.ok()) << tail.head().describe();
  const auto rest = tail.drain(milliseconds(10000));
  ASSERT_EQ(rest.size(), seen.size() - asked_at - 1) << ::testing::PrintToString(names(rest));
  for (std::size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].id, seen[asked_at + 1 + i].id);
    EXPECT_EQ(rest[i].data, seen[asked_at + 1 + i].data);
  }
  EXPECT_EQ(str(event_named(seen, "approval_resolved"), "status"), "approved");
  EXPECT_EQ(stored_run(db_, run), "done -");
  EXPECT_EQ(count_line(lines_of_files_named(dir_.path(), "tally.txt"), "w1"), 1u);
  const auto t = transcript(port(1), "apr");
  EXPECT_EQ(count_line(t, "user:please tally w1"), 1u) << ::testing::PrintToString(t);
  EXPECT_EQ(count_line(t, "assistant:finished w1"), 1u) << ::testing::PrintToString(t);
  EXPECT_EQ(request(port(0), "POST", "/v1/approvals/" + id, R"({"decision": "deny"})").status, 409);
}

// approval.requested and approval.resolved go through the webhook outbox in PostgreSQL: each
// reaches the endpoint exactly once (one event id, one delivery), whichever node asked, decided,
// resumed or sent it.
TEST_F(ServeCluster, ApprovalWebhooksAreDeliveredOnceAcrossNodes) {
  kernex::test::WebhookReceiver receiver("whsec-test");
  receiver.up();
  play_tally(llm_);
  ASSERT_NO_FATAL_FAILURE(
      start(3, "retry", tally_config(dir_),
            "  webhooks:\n    - url: " + receiver.url() +
                "\n      secret: whsec-test\n      events: [approval.requested, "
                "approval.resolved, run.completed]\n      backoff_base_ms: 10\n"
                "      backoff_cap_ms: 50\n"));
  SseReader sse(port(0), "POST", "/v1/sessions/hooks/messages",
                message_body("please tally h1", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "approval_requested", seen)) << logs();
  const std::string id = str(event_named(seen, "approval_requested"), "approval_id");
  const std::string run = str(event_named(seen, "approval_requested"), "run_id");
  ASSERT_TRUE(stored_as(db_, run, "awaiting_approval -")) << stored_run(db_, run) << logs();
  auto decided = request(port(2), "POST", "/v1/approvals/" + id, R"({"decision": "approve"})");
  ASSERT_EQ(decided.status, 200) << decided.describe();
  ASSERT_TRUE(read_until(sse, "run_end", seen)) << ::testing::PrintToString(names(seen)) << logs();
  ASSERT_TRUE(receiver.wait_distinct(3, milliseconds(30000)))
      << receiver.accepted().size() << " events\n"
      << logs();
  EXPECT_EQ(receiver.duplicates(), 0u);
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
  std::vector<std::string> types;
  for (const auto& d : receiver.accepted()) {
    types.push_back(d.type);
    const Json data = Json::parse(d.body)["data"];
    EXPECT_EQ(data.value("run_id", ""), run) << d.body;
    if (d.type != "run.completed") {
      EXPECT_EQ(data.value("approval_id", ""), id) << d.body;
    }
  }
  // In order per run: asked, decided, ended.
  EXPECT_THAT(types, ElementsAre("approval.requested", "approval.resolved", "run.completed"));
  std::string rows;
  db_.exec("SELECT count(*) FROM serve_webhook_outbox WHERE type LIKE 'approval.%'", &rows);
  EXPECT_EQ(rows, "2") << "one row per approval event and endpoint";
}

// A chat completion parked on the client's tool call by one node is resumed by the follow-up on
// another node, after the first node's kill -9: the turn goes on with the agent's own tool result,
// which only the parked run had.
TEST_F(ServeCluster, AParkedChatTurnIsResumedOnAnotherNode) {
  std::mutex mutex;
  Json last;
  llm_.set_responder([&](const FakeLlm::Request& r) {
    std::lock_guard lock(mutex);
    last = r.body;
    const Json& m = r.body["messages"].back();
    FakeLlm::Plan p;
    p.chunks = {""};
    if (m.value("role", "") == "user") {
      p.tool_calls = Json::array({{{"id", "w1"},
                                   {"name", "write"},
                                   {"arguments", R"({"file_path":"n.txt","content":"x"})"}}});
    } else if (m.value("tool_call_id", "") == "w1") {
      p.tool_calls = Json::array(
          {{{"id", "call_w1"}, {"name", "get_weather"}, {"arguments", R"({"city":"Oslo"})"}}});
    } else {
      p.chunks = {"It is " + m.value("content", "")};
    }
    return p;
  });
  ASSERT_NO_FATAL_FAILURE(start(2, "retry", "toolboxes:\n  - files\n"));
  const Json tool{{"type", "function"},
                  {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}};
  Json messages = Json::array({{{"role", "user"}, {"content", "weather in Oslo?"}}});
  auto chat = [&](int node) {
    return request(
        port(node), "POST", "/v1/chat/completions",
        Json{{"model", "kernex"}, {"messages", messages}, {"tools", Json::array({tool})}}.dump());
  };
  auto first = chat(0);
  ASSERT_EQ(first.status, 200) << first.describe() << logs();
  ASSERT_EQ(first.json()["choices"][0]["finish_reason"], "tool_calls") << first.body;
  ASSERT_TRUE(node(0).kill9());
  messages.push_back(first.json()["choices"][0]["message"]);
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_w1"}, {"content", "sunny"}});
  auto second = chat(1);
  ASSERT_EQ(second.status, 200) << second.describe() << logs();
  EXPECT_EQ(second.json()["choices"][0]["message"]["content"], "It is sunny") << second.body;
  std::lock_guard lock(mutex);
  bool own_result = false;
  for (const auto& m : last["messages"])
    own_result =
        own_result || (m.value("role", "") == "tool" && m.value("tool_call_id", "") == "w1");
  EXPECT_TRUE(own_result) << "the parked turn, w1 included: " << last["messages"].dump();
}

// kill -9 of the node running a tool: another node resumes the run from its journal. The model's
// first answer is replayed (not asked again), and the tool, started and never finished, is
// reported as interrupted and not run again.
TEST_F(ServeCluster, KillNineDuringAToolResumesFromTheJournalWithoutRunningItAgain) {
  play_tally(llm_);
  ASSERT_NO_FATAL_FAILURE(start(3, "retry", tally_config(dir_)));
  SseReader sse(port(0), "POST", "/v1/sessions/stall/messages",
                message_body("please stall the tally s1", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe() << logs();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "tool_call", seen))
      << ::testing::PrintToString(names(seen)) << logs();
  const std::string run = run_id_of(seen);
  // The stall tool noted its start: the node running it is the run's.
  const auto deadline = Clock::now() + milliseconds(20000);
  while (lines_of_files_named(dir_.path(), "stall.txt").empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(20));
  if (lines_of_files_named(dir_.path(), "stall.txt").size() != 1u) {
    for (const auto& e : sse.drain(milliseconds(3000))) seen.push_back(e);
    std::string shown;
    for (const auto& e : seen) shown += e.event + " " + e.data + "\n";
    FAIL() << "the stall tool did not start once:\n" << shown << logs();
  }
  const std::string first_node = str(get_run(port(0), run), "node");
  int h = -1;
  for (int i = 0; i < 3; ++i) {
    if (first_node.find("-" + std::to_string(node(i).pid()) + "-") != std::string::npos) h = i;
  }
  ASSERT_GE(h, 0) << "no node is " << first_node;
  ASSERT_TRUE(node(h).kill9());
  const int survivor = (h + 1) % 3;
  SseReader follow(port(survivor), "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(follow.ok()) << follow.head().describe();
  auto events = follow.drain(milliseconds(60000));
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().event, "run_end") << ::testing::PrintToString(names(events)) << logs();
  EXPECT_EQ(str(events.back().json(), "text"), "finished s1") << events.back().data;
  expect_increasing_ids(events);
  Json interrupted;
  for (const auto& e : events) {
    if (e.event == "tool_result") interrupted = e.json();
  }
  EXPECT_THAT(str(interrupted, "content"), ::testing::HasSubstr("interrupted")) << interrupted;
  EXPECT_EQ(lines_of_files_named(dir_.path(), "stall.txt").size(), 1u) << "the tool ran again";
  // The first answer came from the journal: one call for it, one for the answer after the tool.
  EXPECT_EQ(llm_.calls_for("please stall the tally s1"), 2u);
  EXPECT_EQ(num(get_run(port(survivor), run), "attempt"), 2);
  const auto t = transcript(port(survivor), "stall");
  EXPECT_EQ(count_line(t, "user:please stall the tally s1"), 1u) << ::testing::PrintToString(t);
}

// Chaos: three nodes; runs whose tool (appending to a file) needs an approval, approved from any
// node; kill -9 of a random node every few seconds. At the end every acknowledged run is done,
// every tool ran at most once (exactly once unless the kill fell between its start and its
// result: the run then reports it interrupted), every exchange is saved exactly once, and event
// ids only grew. KERNEX_CHAOS_TRIALS=N runs N rounds (default 1, about 30 s).
int chaos_trials() {
  const char* env = std::getenv("KERNEX_CHAOS_TRIALS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : 1;
}

struct ChaosFigures {
  int runs = 0, acknowledged = 0, done = 0, tools_ran = 0, twice = 0, interrupted = 0, kills = 0,
      exchanges_twice = 0;
};

class ServeChaos : public ServeCluster {
 protected:
  static constexpr int kNodes = 3, kRuns = 6;
  static constexpr auto kChaos = milliseconds(15000), kEvery = milliseconds(3000);

  // A live node's port, from node `pick` on (0: none is up).
  int live_port(unsigned pick) {
    std::lock_guard lock(nodes_mutex_);
    for (unsigned k = 0; k < kNodes; ++k) {
      const auto& n = nodes_[(pick + k) % kNodes];
      if (n && n->running() && n->port() > 0) return n->port();
    }
    return 0;
  }
  unsigned pick() {
    std::lock_guard lock(nodes_mutex_);
    return rng_();
  }
  void kill_one() {
    std::lock_guard lock(nodes_mutex_);
    const int i = static_cast<int>(rng_() % kNodes);
    if (node(i).kill9()) ++figures_.kills;
    start_node(i);
  }

  // Posts the session's message until a node acknowledges it (its run id), or finds that an
  // unacknowledged post made a run anyway; "" when neither happened in time.
  std::pair<std::string, bool> submit(const std::string& session, const std::string& word) {
    const auto deadline = Clock::now() + milliseconds(30000);
    while (Clock::now() < deadline) {
      const int p = live_port(pick());
      if (p == 0) continue;
      SseReader sse(p, "POST", "/v1/sessions/" + session + "/messages",
                    message_body("please tally " + word, Json{{"stream", true}}));
      std::vector<SseEvent> seen;
      if (sse.ok() && read_until(sse, "run_start", seen)) return {run_id_of(seen), true};
      auto runs = request(live_port(pick()), "GET", "/v1/sessions/" + session + "/runs");
      if (runs.status == 200 && !runs.json()["runs"].empty())
        return {str(runs.json()["runs"][0], "run_id"), false};
    }
    return {"", false};
  }

  // Approves whatever the sessions wait for, on any node, until `stop`.
  void approve_loop(const std::vector<std::string>& sessions, const std::atomic<bool>& stop) {
    while (!stop) {
      for (const auto& s : sessions) {
        auto pending = request(live_port(pick()), "GET", "/v1/sessions/" + s + "/approvals");
        if (pending.status != 200) continue;
        const Json listed = pending.json();
        for (const auto& a : listed["approvals"])
          request(live_port(pick()), "POST", "/v1/approvals/" + str(a, "approval_id"),
                  R"({"decision": "approve"})");
      }
      std::this_thread::sleep_for(milliseconds(100));  // polling cadence, not synchronisation
    }
  }

  bool ended(const std::string& run) {
    auto r = request(live_port(pick()), "GET", "/v1/runs/" + run);
    const std::string status = r.status == 200 ? str(r.json(), "status") : "";
    return status == "done" || status == "failed" || status == "cancelled";
  }

  void check_run(const std::string& session, const std::string& word, const std::string& run,
                 bool acknowledged);
  void round(int trial);

  std::mutex nodes_mutex_;
  std::mt19937 rng_{std::random_device{}()};
  ChaosFigures figures_;
};

void ServeChaos::check_run(const std::string& session, const std::string& word,
                           const std::string& run, bool acknowledged) {
  SCOPED_TRACE("run " + run + " (" + word + ")");
  Json r = get_run(live_port(pick()), run);
  if (acknowledged) {
    EXPECT_EQ(str(r, "status"), "done") << r.dump() << logs();
  }
  figures_.done += str(r, "status") == "done";
  SseReader follow(live_port(pick()), "GET", "/v1/runs/" + run + "/events", "");
  auto events = follow.drain(milliseconds(30000));
  expect_increasing_ids(events);
  bool interrupted = false;
  for (const auto& e : events) {
    if (e.event == "tool_result" &&
        e.json().value("content", "").find("interrupted") != std::string::npos)
      interrupted = true;
  }
  const std::size_t ran = count_line(lines_of_files_named(dir_.path(), "tally.txt"), word);
  EXPECT_LE(ran, 1u) << "tool of " << word << " ran " << ran << " times";
  if (!interrupted) {
    EXPECT_EQ(ran, 1u) << ::testing::PrintToString(names(events));
  }
  figures_.tools_ran += static_cast<int>(ran);
  figures_.twice += ran > 1;
  figures_.interrupted += interrupted;
  const auto t = transcript(live_port(pick()), session);
  const std::size_t saved = count_line(t, "user:please tally " + word);
  EXPECT_EQ(saved, 1u) << ::testing::PrintToString(t);
  figures_.exchanges_twice += saved > 1;
}

void ServeChaos::round(int trial) {
  std::vector<std::string> sessions, words;
  for (int k = 0; k < kRuns; ++k) {
    const std::string id = "r" + std::to_string(trial) + "w" + std::to_string(k);
    sessions.push_back("chaos-" + id);
    words.push_back(id);
  }
  std::atomic<bool> stop_killing = false, stop_approving = false;
  std::thread killer([&] {
    for (auto until = Clock::now() + kChaos; Clock::now() < until && !stop_killing;) {
      std::this_thread::sleep_for(kEvery);  // the chaos's cadence
      kill_one();
    }
  });
  std::thread approver([&] { approve_loop(sessions, stop_approving); });
  std::vector<std::pair<std::string, bool>> runs(kRuns);
  std::vector<std::thread> clients;
  for (int k = 0; k < kRuns; ++k)
    clients.emplace_back([&, k] { runs[k] = submit(sessions[k], words[k]); });
  for (auto& t : clients) t.join();
  killer.join();
  const auto deadline = Clock::now() + milliseconds(60000);
  for (const auto& [run, acked] : runs) {
    while (!run.empty() && !ended(run) && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(100));
  }
  stop_approving = true;
  approver.join();
  for (int k = 0; k < kRuns; ++k) {
    ++figures_.runs;
    figures_.acknowledged += runs[k].second;
    if (runs[k].first.empty()) continue;
    check_run(sessions[k], words[k], runs[k].first, runs[k].second);
  }
}

TEST_F(ServeChaos, KillNineOfRandomNodesWhileRunsAwaitApprovalsAndRunTools) {
  max_attempts_ = 50;  // a run may be on a killed node many times; it must still finish
  play_tally(llm_);
  ASSERT_NO_FATAL_FAILURE(start(kNodes, "retry", tally_config(dir_)));
  const int n = chaos_trials();
  for (int trial = 0; trial < n && !HasFailure(); ++trial) {
    SCOPED_TRACE("chaos trial " + std::to_string(trial) + " of " + std::to_string(n));
    round(trial);
  }
  const auto& f = figures_;
  std::cout << "chaos: " << n << " trial(s), " << f.runs << " runs (" << f.acknowledged
            << " acknowledged, " << f.done << " done), " << f.kills << " kill -9, " << f.tools_ran
            << " tool runs, " << f.interrupted << " interrupted, " << f.twice
            << " tools run twice, " << f.exchanges_twice << " exchanges saved twice\n";
  EXPECT_EQ(f.twice, 0);
  EXPECT_EQ(f.exchanges_twice, 0);
}

}  // namespace
