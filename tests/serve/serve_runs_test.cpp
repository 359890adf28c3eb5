// Runs through `kernex serve`: the SSE event stream (order, ids, replay and reconnect with
// Last-Event-ID), cancelling a run while the provider streams and while a sandboxed tool sleeps,
// draining on SIGTERM, and dropping slow (slowloris) clients.
#include <dirent.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <set>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string run_id_of(const std::vector<SseEvent>& events) {
  for (const auto& e : events) {
    if (e.event == "run_start") return e.json().value("run_id", "");
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// SSE with the replay provider

class ServeSse : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string script =
        replay_tool_call("word_count", Json{{"text", "one two three"}}, "wc1", "count") +
        replay_text("three words", "count");
    for (int i = 0; i < 10; ++i) script += replay_text("plain answer " + std::to_string(i));
    w_.write_config(w_.replay_provider(script), "", "toolboxes:\n  - builtin\n");
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }
  ServeWorld w_;
  int port_ = 0;
};

TEST_F(ServeSse, StreamedRunEventsComeInContractOrder) {
  SseReader sse(port_, "POST", "/v1/sessions/sse1/messages",
                message_body("count these", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  EXPECT_THAT(sse.head().header("content-type"), HasSubstr("text/event-stream"));
  auto events = sse.drain();
  expect_well_formed(events, "sse1");
  auto n = names(events);
  auto pos = [&](const std::string& name) {
    return std::find(n.begin(), n.end(), name) - n.begin();
  };
  ASSERT_LT(pos("tool_call"), static_cast<long>(n.size())) << ::testing::PrintToString(n);
  ASSERT_LT(pos("tool_result"), static_cast<long>(n.size())) << ::testing::PrintToString(n);
  ASSERT_LT(pos("text_delta"), static_cast<long>(n.size())) << ::testing::PrintToString(n);
  EXPECT_LT(pos("tool_call"), pos("tool_result"));
  EXPECT_LT(pos("tool_result"), pos("text_delta"));
  EXPECT_EQ(n.back(), "run_end");

  Json call = events[pos("tool_call")].json();
  EXPECT_EQ(call.value("id", ""), "wc1");
  EXPECT_EQ(call.value("name", ""), "word_count");
  EXPECT_EQ(call["arguments"], (Json{{"text", "one two three"}}));
  Json result = events[pos("tool_result")].json();
  EXPECT_EQ(result.value("id", ""), "wc1");
  EXPECT_EQ(result.value("name", ""), "word_count");
  EXPECT_FALSE(result.value("is_error", true));
  EXPECT_THAT(result.value("content", ""), HasSubstr("3"));

  EXPECT_EQ(cat_text(events), "three words");
  Json end = events.back().json();
  EXPECT_EQ(end.value("outcome", ""), "end_turn");
  EXPECT_EQ(end.value("text", ""), "three words");
  EXPECT_TRUE(end.contains("usage") && end["usage"].is_object()) << events.back().data;
  EXPECT_TRUE(end.contains("cost_usd")) << events.back().data;
  if (pos("usage") < static_cast<long>(n.size())) {
    Json u = events[pos("usage")].json();
    EXPECT_TRUE(u.contains("input_tokens") && u.contains("output_tokens") && u.contains("cost_usd"))
        << u.dump();
  }
}

TEST_F(ServeSse, AcceptHeaderAloneSelectsTheStream) {
  // SseReader sends Accept: text/event-stream; the body does not ask for a stream.
  SseReader sse(port_, "POST", "/v1/sessions/sse2/messages", message_body("hello"));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  EXPECT_THAT(sse.head().header("content-type"), HasSubstr("text/event-stream"));
  auto events = sse.drain();
  expect_well_formed(events, "sse2");
  EXPECT_EQ(cat_text(events), "plain answer 0");
}

TEST_F(ServeSse, EventsEndpointReplaysAFinishedRunExactly) {
  SseReader live(port_, "POST", "/v1/sessions/sse3/messages",
                 message_body("count these", Json{{"stream", true}}));
  ASSERT_TRUE(live.ok());
  auto events = live.drain();
  const std::string run = run_id_of(events);
  ASSERT_FALSE(run.empty());

  SseReader replay(port_, "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(replay.ok()) << replay.head().describe();
  auto again = replay.drain();
  ASSERT_EQ(again.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(again[i].event, events[i].event);
    EXPECT_EQ(again[i].id, events[i].id);
    EXPECT_EQ(again[i].json(), events[i].json());
  }
  EXPECT_TRUE(replay.ended()) << "the replay ends after run_end";

  // From the middle: exactly the events after the given id.
  SseReader tail(port_, "GET", "/v1/runs/" + run + "/events", "", {{"Last-Event-ID", "2"}});
  ASSERT_TRUE(tail.ok());
  auto rest = tail.drain();
  ASSERT_EQ(rest.size(), events.size() - 2);
  for (std::size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].id, events[i + 2].id);

  SseReader query(port_, "GET", "/v1/runs/" + run + "/events?last_event_id=3", "");
  ASSERT_TRUE(query.ok());
  auto rest3 = query.drain();
  ASSERT_EQ(rest3.size(), events.size() - 3);
  if (!rest3.empty()) {
    EXPECT_EQ(rest3.front().id, "4");
  }
}

TEST_F(ServeSse, NonStreamRunCanBeFollowedOverEvents) {
  auto r = request(port_, "POST", "/v1/sessions/sse4/messages", message_body("hello"));
  ASSERT_EQ(r.status, 200);
  const std::string run = r.json().value("run_id", "");
  SseReader sse(port_, "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  auto events = sse.drain();
  expect_well_formed(events, "sse4");
  EXPECT_EQ(events.back().json().value("text", ""), r.json().value("text", "?"));
}

// ---------------------------------------------------------------------------------------------
// Live runs with a provider that holds mid-stream

class ServeLive : public ::testing::Test {
 protected:
  void start(const std::string& serve_body = "") {
    w_.write_config(ServeWorld::openai_provider(llm_), serve_body);
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }
  FakeLlm llm_;
  ServeWorld w_;
  int port_ = 0;
};

TEST_F(ServeLive, ReconnectWithLastEventIdLosesAndDuplicatesNothing) {
  llm_.set_responder([](const FakeLlm::Request&) {
    return FakeLlm::Plan{{"al", "pha", " be", "ta", " gam", "ma"}, 3};
  });
  start();
  std::vector<SseEvent> first;
  std::string run;
  {
    SseReader sse(port_, "POST", "/v1/sessions/rc/messages",
                  message_body("go", Json{{"stream", true}}));
    ASSERT_TRUE(sse.ok()) << sse.head().describe();
    ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
    // Everything sent before the hold: run_start and at least one text delta.
    ASSERT_TRUE(read_until(sse, "text_delta", first));
    run = run_id_of(first);
    ASSERT_FALSE(run.empty());
    sse.close();  // the client drops mid-run
  }
  const std::string last = first.back().id;
  SseReader again(port_, "GET", "/v1/runs/" + run + "/events", "", {{"Last-Event-ID", last}});
  ASSERT_TRUE(again.ok()) << again.head().describe();
  llm_.release();
  auto second = again.drain();
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second.back().event, "run_end");

  SseReader full(port_, "GET", "/v1/runs/" + run + "/events", "");
  auto all = full.drain();
  expect_well_formed(all, "rc");
  std::vector<SseEvent> joined = first;
  joined.insert(joined.end(), second.begin(), second.end());
  ASSERT_EQ(joined.size(), all.size()) << "first: " << ::testing::PrintToString(names(first))
                                       << " second: " << ::testing::PrintToString(names(second));
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(joined[i].id, all[i].id);
    EXPECT_EQ(joined[i].event, all[i].event);
    EXPECT_EQ(joined[i].data, all[i].data);
  }
  EXPECT_EQ(cat_text(all), "alpha beta gamma");
  EXPECT_EQ(all.back().json().value("text", ""), "alpha beta gamma");
}

TEST_F(ServeLive, ManyFollowersOfOneLiveRunSeeTheSameEvents) {
  llm_.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"x", "y", "z"}, 1}; });
  start();
  SseReader owner(port_, "POST", "/v1/sessions/fan/messages",
                  message_body("go", Json{{"stream", true}}));
  ASSERT_TRUE(owner.ok());
  std::vector<SseEvent> head;
  ASSERT_TRUE(read_until(owner, "run_start", head));
  const std::string run = run_id_of(head);
  std::vector<std::unique_ptr<SseReader>> followers;
  for (int i = 0; i < 5; ++i) {
    followers.push_back(
        std::make_unique<SseReader>(port_, "GET", "/v1/runs/" + run + "/events", ""));
    ASSERT_TRUE(followers.back()->ok());
  }
  llm_.release();
  auto rest = owner.drain();
  head.insert(head.end(), rest.begin(), rest.end());
  expect_well_formed(head, "fan");
  for (auto& f : followers) {
    auto got = f->drain();
    ASSERT_EQ(got.size(), head.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].data, head[i].data);
  }
}

TEST_F(ServeLive, CancelDuringProviderStreamEndsTheRunPromptly) {
  llm_.set_responder([](const FakeLlm::Request&) {
    return FakeLlm::Plan{{"Hel", "lo", " never"}, 2};
  });
  start();
  SseReader sse(port_, "POST", "/v1/sessions/cx/messages",
                message_body("talk", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "text_delta", seen));
  const std::string run = run_id_of(seen);

  const auto asked = Clock::now();
  auto c = request(port_, "POST", "/v1/runs/" + run + "/cancel");
  ASSERT_EQ(c.status, 202) << c.describe();
  EXPECT_EQ(c.json().value("run_id", ""), run);
  EXPECT_TRUE(c.json().contains("status")) << c.body;
  ASSERT_TRUE(read_until(sse, "run_end", seen, milliseconds(5000)))
      << ::testing::PrintToString(names(seen));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - asked);
  EXPECT_LT(took.count(), 1000) << "run_end came " << took.count() << " ms after cancel";
  EXPECT_EQ(seen.back().json().value("outcome", ""), "cancelled") << seen.back().data;
  EXPECT_TRUE(llm_.wait_hung_up(1, milliseconds(2000))) << "the provider request was not abandoned";
  EXPECT_TRUE(sse.drain(milliseconds(2000)).empty());
  EXPECT_TRUE(sse.ended()) << "the stream ends after run_end";

  auto g = request(port_, "GET", "/v1/runs/" + run);
  EXPECT_EQ(g.json().value("status", ""), "cancelled") << g.body;
  // The session is free again: the next message runs.
  llm_.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"fine"}, std::nullopt}; });
  auto next = request(port_, "POST", "/v1/sessions/cx/messages", message_body("again"));
  EXPECT_EQ(next.status, 200) << next.describe();
  EXPECT_EQ(next.json().value("text", ""), "fine");
}

TEST_F(ServeLive, CancelOfANonStreamRunAnswersItsWaitingClient) {
  llm_.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"a", "b"}, 1}; });
  start();
  HttpResponse waited;
  std::thread client([&] {
    waited = request(port_, "POST", "/v1/sessions/nx/messages", message_body("wait"), {},
                     milliseconds(20000));
  });
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  auto runs = request(port_, "GET", "/v1/sessions/nx/runs");
  ASSERT_EQ(runs.status, 200) << runs.describe();
  ASSERT_FALSE(runs.json()["runs"].empty());
  const std::string run = runs.json()["runs"][0].value("run_id", "");
  EXPECT_EQ(runs.json()["runs"][0].value("status", ""), "running");
  EXPECT_EQ(request(port_, "POST", "/v1/runs/" + run + "/cancel").status, 202);
  client.join();
  ASSERT_EQ(waited.status, 200) << waited.describe();
  EXPECT_EQ(waited.json().value("status", ""), "cancelled");
  EXPECT_EQ(waited.json().value("outcome", ""), "cancelled");
}

TEST_F(ServeLive, DeleteSessionCancelsItsActiveRun) {
  llm_.set_responder([](const FakeLlm::Request&) { return FakeLlm::Plan{{"a", "b"}, 1}; });
  start();
  SseReader sse(port_, "POST", "/v1/sessions/del/messages",
                message_body("talk", Json{{"stream", true}}));
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  auto d = request(port_, "DELETE", "/v1/sessions/del");
  EXPECT_EQ(d.status, 200) << d.describe();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "run_end", seen, milliseconds(5000)));
  EXPECT_EQ(seen.back().json().value("outcome", ""), "cancelled");
  EXPECT_TRUE(session_is_empty(port_, "del"));
}

// ---------------------------------------------------------------------------------------------
// Cancel while a sandboxed tool sleeps

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Live (not zombie) processes whose command line contains `token`.
std::set<pid_t> processes_with(const std::string& token) {
  std::set<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(token) == std::string::npos) continue;
    const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
    out.insert(pid);
  }
  ::closedir(d);
  return out;
}

bool alive(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z';
}

// Children of `pid` (e.g. the script's `sleep`).
std::set<pid_t> children_of(pid_t pid) {
  std::set<pid_t> out;
  std::istringstream in(
      read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t c; in >> c;) out.insert(c);
  return out;
}

TEST(ServeToolCancel, CancelWhileAToolSleepsKillsItAndEndsTheRun) {
  ServeWorld w;
  const std::string token = "naptoken" + std::to_string(::getpid()) + "x" +
                            std::to_string(Clock::now().time_since_epoch().count() % 100000);
  const std::string script =
      replay_tool_call("nap", Json{{"token", token}}, "n1") + replay_text("unreachable");
  w.write_config(w.replay_provider(script), "",
                 "skill_dirs:\n  - " + std::string(KERNEX_SERVE_FIXTURES) + "/skills\n" +
                     "toolboxes:\n  - name: script\n    options:\n      workspace: " +
                     w.workspace.string() + "\n      timeout: 60\n");
  // The fixture lies below the checkout, a writable location: loaded only once trusted.
  auto trust = run_kernex({"skills", "trust", "--config", w.config.string(),
                           std::string(KERNEX_SERVE_FIXTURES) + "/skills/sleepy"},
                          w.dir.path());
  ASSERT_EQ(trust.exit_code, 0) << trust.out << trust.err;
  ASSERT_TRUE(w.start());
  SseReader sse(w.port(), "POST", "/v1/sessions/nap/messages",
                message_body("please be sleepy", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "tool_call", seen))
      << ::testing::PrintToString(names(seen)) << w.log();
  const std::string run = run_id_of(seen);

  // Bounded wait for the tool's process (there is no event for "the process started").
  std::set<pid_t> pids;
  const auto deadline = Clock::now() + milliseconds(20000);
  while (Clock::now() < deadline) {
    pids = processes_with(token);
    bool has_child = false;
    for (pid_t p : pids) has_child = has_child || !children_of(p).empty();
    if (has_child) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_FALSE(pids.empty()) << "the nap tool never started; log:\n" << w.log();
  std::set<pid_t> all = pids;
  for (pid_t p : pids) {
    auto c = children_of(p);
    all.insert(c.begin(), c.end());
  }

  const auto asked = Clock::now();
  ASSERT_EQ(request(w.port(), "POST", "/v1/runs/" + run + "/cancel").status, 202);
  ASSERT_TRUE(read_until(sse, "run_end", seen, milliseconds(5000)))
      << ::testing::PrintToString(names(seen));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - asked);
  EXPECT_LT(took.count(), 1000) << "run_end came " << took.count() << " ms after cancel";
  EXPECT_EQ(seen.back().json().value("outcome", ""), "cancelled");
  for (pid_t p : all)
    EXPECT_FALSE(alive(p)) << "tool process " << p << " outlived the cancelled run";
  EXPECT_TRUE(processes_with(token).empty());
}

// ---------------------------------------------------------------------------------------------
// SIGTERM drain

// Bounded wait until the server, signalled, stops taking new runs: a new message is refused
// (503) or the connection is (the listener closed). Before the signal lands, a probe runs in a
// session of its own.
void wait_not_accepting(int port) {
  const auto deadline = Clock::now() + milliseconds(5000);
  while (Clock::now() < deadline) {
    auto r = request(port, "POST", "/v1/sessions/probe/messages", message_body("probe"), {},
                     milliseconds(2000));
    if (r.status != 200) {
      EXPECT_TRUE(r.status == 0 || r.status == 503) << r.describe();
      return;
    }
  }
  ADD_FAILURE() << "the server still started new runs 5 s after SIGTERM";
}

TEST_F(ServeLive, SigtermLetsTheRunningRunFinishAndKeepsItsExchange) {
  llm_.set_responder([](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    return FakeLlm::Plan{{"answer to ", m},
                         m == "during" ? std::optional<std::size_t>(1) : std::nullopt};
  });
  start("  shutdown_grace_ms: 20000\n");
  ASSERT_EQ(request(port_, "POST", "/v1/sessions/drain/messages", message_body("before")).status,
            200);
  SseReader sse(port_, "POST", "/v1/sessions/drain/messages",
                message_body("during", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "run_start", seen));
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));

  w_.server.signal(SIGTERM);
  wait_not_accepting(port_);
  llm_.release();
  ASSERT_TRUE(read_until(sse, "run_end", seen, milliseconds(20000)))
      << ::testing::PrintToString(names(seen));
  EXPECT_EQ(seen.back().json().value("outcome", ""), "end_turn") << seen.back().data;
  EXPECT_EQ(seen.back().json().value("text", ""), "answer to during");
  auto status = w_.server.wait(milliseconds(20000));
  ASSERT_TRUE(status.has_value()) << "the server did not exit after its last run";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;

  ASSERT_TRUE(w_.start());
  auto msgs = session_messages(w_.port(), "drain");
  std::vector<std::string> texts;
  for (const auto& m : msgs) texts.push_back(m.value("role", "") + ":" + content_text(m));
  EXPECT_THAT(texts, ::testing::ElementsAre("user:before", "assistant:answer to before",
                                            "user:during", "assistant:answer to during"));
}

TEST_F(ServeLive, SigtermCancelsRunsStillGoingAfterTheGrace) {
  llm_.set_responder([](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    return FakeLlm::Plan{{"answer to ", m},
                         m == "stuck" ? std::optional<std::size_t>(1) : std::nullopt};
  });
  start("  shutdown_grace_ms: 300\n");
  ASSERT_EQ(request(port_, "POST", "/v1/sessions/grace/messages", message_body("before")).status,
            200);
  SseReader sse(port_, "POST", "/v1/sessions/grace/messages",
                message_body("stuck", Json{{"stream", true}}));
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "run_start", seen));
  const auto signalled = Clock::now();
  auto status = w_.server.stop(milliseconds(10000));
  ASSERT_TRUE(status.has_value()) << "the server outlived its grace by 10 s";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - signalled).count(), 5000);
  // The stream, if the server got to finish it, says cancelled.
  read_until(sse, "run_end", seen, milliseconds(1000));
  if (seen.back().event == "run_end") {
    EXPECT_EQ(seen.back().json().value("outcome", ""), "cancelled");
  }

  ASSERT_TRUE(w_.start());
  auto msgs = session_messages(w_.port(), "grace");
  ASSERT_GE(msgs.size(), 2u);
  EXPECT_EQ(content_text(msgs[0]), "before");
  EXPECT_EQ(content_text(msgs[1]), "answer to before");
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_NE(content_text(msgs[i]), "answer to stuck") << "the cancelled run never got its answer";
  }
}

// ---------------------------------------------------------------------------------------------
// Slow clients

class ServeSlow : public ::testing::Test {
 protected:
  void SetUp() override {
    w_.write_config(w_.replay_provider(replay_text("ok")), "  header_timeout_ms: 500\n");
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }
  // Trickles `bytes` one at a time (one per 100 ms, paced by waiting for the close) and returns
  // the ms until the server dropped the connection, or -1 if it never did.
  long trickle(const std::string& bytes) {
    Connection c(port_);
    const auto begin = Clock::now();
    for (char ch : bytes) {
      if (!c.send(std::string(1, ch))) break;
      if (c.wait_closed(Clock::now() + milliseconds(100))) break;
    }
    if (!c.wait_closed(Clock::now() + milliseconds(3000))) return -1;
    const std::string got = c.buffered();
    if (!got.empty()) {
      EXPECT_THAT(got, ::testing::StartsWith("HTTP/1.1 408")) << got;
    }
    return std::chrono::duration_cast<milliseconds>(Clock::now() - begin).count();
  }
  ServeWorld w_;
  int port_ = 0;
};

TEST_F(ServeSlow, SlowlorisHeadersAreDroppedWhileOthersAreServed) {
  std::atomic<bool> done{false};
  std::atomic<int> served{0}, failed{0};
  std::thread others([&] {
    while (!done) {
      auto r = request(port_, "GET", "/healthz", "", {}, milliseconds(2000));
      (r.status == 200 ? served : failed)++;
    }
  });
  const long ms = trickle(
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(60, 'z') + "\r\n\r\n");
  done = true;
  others.join();
  EXPECT_GE(ms, 400) << "dropped before header_timeout_ms";
  EXPECT_GE(ms, 0) << "never dropped";
  EXPECT_LT(ms, 3000) << "header_timeout_ms is 500";
  EXPECT_GT(served.load(), 0);
  EXPECT_EQ(failed.load(), 0);
}

TEST_F(ServeSlow, SlowBodyIsDroppedToo) {
  const std::string body = message_body("x") + std::string(80, ' ');
  const long ms = trickle(
      "POST /v1/sessions/s/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_GE(ms, 0) << "never dropped";
  EXPECT_LT(ms, 3000);
  EXPECT_EQ(request(port_, "GET", "/healthz").status, 200);
}

TEST_F(ServeSlow, ManyIdleHalfOpenConnectionsDoNotBlockService) {
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(std::make_unique<Connection>(port_));
    idle.back()->send("GET /hea");
  }
  EXPECT_EQ(request(port_, "GET", "/healthz", "", {}, milliseconds(5000)).status, 200);
  for (auto& c : idle) EXPECT_TRUE(c->wait_closed(Clock::now() + milliseconds(5000)));
}

}  // namespace

namespace {

using namespace kernex::serve_test;
using kernex::Json;

// kill -9 mid-run: the acknowledged run is in serve.db, so the next server runs it again and the
// session's history gets its exchange; a run queued behind it (enqueue) runs after it.
TEST_F(ServeLive, KillNineLosesNoAcknowledgedRun) {
  std::atomic<bool> hold{true};
  llm_.set_responder([&hold](const FakeLlm::Request& r) {
    const std::string m = r.last_user();
    return FakeLlm::Plan{{"answer to ", m},
                         hold && m == "during" ? std::optional<std::size_t>(1) : std::nullopt};
  });
  start();
  ASSERT_EQ(request(port_, "POST", "/v1/sessions/crash/messages", message_body("before")).status,
            200);
  SseReader sse(port_, "POST", "/v1/sessions/crash/messages",
                message_body("during", Json{{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "run_start", seen));
  const std::string during = run_id_of(seen);
  ASSERT_TRUE(llm_.wait_holding(1, milliseconds(30000)));
  SseReader queued(port_, "POST", "/v1/sessions/crash/messages",
                   message_body("after", Json{{"stream", true}, {"if_busy", "enqueue"}}));
  ASSERT_TRUE(queued.ok()) << queued.head().describe();

  w_.server.signal(SIGKILL);
  ASSERT_TRUE(w_.server.wait(milliseconds(10000)).has_value());
  hold = false;
  llm_.release();
  ASSERT_TRUE(w_.start());
  port_ = w_.port();
  // The resumed run ends; its events can be followed under the same id.
  SseReader follow(port_, "GET", "/v1/runs/" + during + "/events", "");
  ASSERT_TRUE(follow.ok()) << follow.head().describe();
  auto events = follow.drain();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "run_end");
  EXPECT_EQ(events.back().json().value("text", ""), "answer to during");
  // And the queued one after it (newest first in the runs list), followed to its end.
  auto runs = request(port_, "GET", "/v1/sessions/crash/runs", "");
  ASSERT_EQ(runs.status, 200) << runs.describe();
  ASSERT_EQ(runs.json()["runs"].size(), 3u) << runs.body;
  const std::string after = runs.json()["runs"][0].value("run_id", "");
  SseReader follow_after(port_, "GET", "/v1/runs/" + after + "/events", "");
  ASSERT_TRUE(follow_after.ok()) << follow_after.head().describe();
  auto after_events = follow_after.drain();
  ASSERT_FALSE(after_events.empty());
  EXPECT_EQ(after_events.back().json().value("text", ""), "answer to after");
  std::vector<std::string> texts;
  for (const auto& m : session_messages(port_, "crash"))
    texts.push_back(m.value("role", "") + ":" + content_text(m));
  EXPECT_THAT(texts, ::testing::ElementsAre("user:before", "assistant:answer to before",
                                            "user:during", "assistant:answer to during",
                                            "user:after", "assistant:answer to after"));
}

// serve.db's write lock, held by another connection (as a backup or a long checkpoint would):
// the server's writer cannot commit a new run's row while it is held.
class WriteLock {
 public:
  explicit WriteLock(const fs::path& db) {
    if (sqlite3_open(db.c_str(), &db_) != SQLITE_OK) return;
    held_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~WriteLock() {
    release();
    sqlite3_close(db_);
  }
  bool held() const { return held_; }
  void release() {
    if (held_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    held_ = false;
  }

 private:
  sqlite3* db_ = nullptr;
  bool held_ = false;
};

// A stream's 200 acknowledges its run: it leaves only once the run's row is committed, so a
// kill -9 can never lose a run a client was told of (RunManager::submit only queues the row).
TEST_F(ServeLive, AStreamIsAcknowledgedOnlyOnceItsRunIsStored) {
  llm_.set_responder([](const FakeLlm::Request& r) {
    return FakeLlm::Plan{{"answer to ", r.last_user()}, std::nullopt};
  });
  start();
  ASSERT_EQ(request(port_, "POST", "/v1/sessions/ack/messages", message_body("first")).status, 200);
  WriteLock lock(w_.data_dir / "serve.db");
  ASSERT_TRUE(lock.held());
  // The native API and Chat Completions (whose stream head names the completion) alike.
  Connection native(port_), chat(port_);
  ASSERT_TRUE(native.connected() && chat.connected());
  native.send(build_request("POST", "/v1/sessions/ack/messages",
                            message_body("second", Json{{"stream", true}}),
                            {{"Accept", "text/event-stream"}}));
  const Json chat_body{{"model", "kernex"},
                       {"stream", true},
                       {"messages", Json::array({{{"role", "user"}, {"content", "third"}}})}};
  chat.send(build_request("POST", "/v1/chat/completions", chat_body.dump()));
  HttpResponse early;
  EXPECT_FALSE(native.read_head(early, Clock::now() + milliseconds(700)))
      << "acknowledged before its row could be stored: " << early.status;
  EXPECT_FALSE(chat.read_head(early, Clock::now() + milliseconds(100)))
      << "a completion named before its run's row could be stored: " << early.status;
  lock.release();
  const HttpResponse streamed = native.read_response(milliseconds(30000));
  ASSERT_EQ(streamed.status, 200) << streamed.describe();
  EXPECT_THAT(streamed.body, HasSubstr("answer to second"));
  EXPECT_THAT(streamed.body, HasSubstr("run_end"));
  const HttpResponse completed = chat.read_response(milliseconds(30000));
  ASSERT_EQ(completed.status, 200) << completed.describe();
  EXPECT_THAT(completed.body, HasSubstr("\"content\":\"third\""));
  EXPECT_THAT(completed.body, HasSubstr("[DONE]"));
}

// The row cannot be stored at all (the lock outlasts the writer's busy timeout): the run never
// starts, the client gets a 500 store_failed rather than a 200, and the next run is stored.
TEST_F(ServeLive, AStreamWhoseRunCannotBeStoredIsRefused) {
  std::atomic<int> calls{0};
  llm_.set_responder([&calls](const FakeLlm::Request& r) {
    ++calls;
    return FakeLlm::Plan{{"answer to ", r.last_user()}, std::nullopt};
  });
  start();
  ASSERT_EQ(request(port_, "POST", "/v1/sessions/lost/messages", message_body("first")).status,
            200);
  const int before = calls.load();
  {
    WriteLock lock(w_.data_dir / "serve.db");
    ASSERT_TRUE(lock.held());
    const HttpResponse refused =
        request(port_, "POST", "/v1/sessions/lost/messages",
                message_body("second", Json{{"stream", true}}), {{"Accept", "text/event-stream"}});
    EXPECT_EQ(refused.status, 500) << refused.describe();
    EXPECT_THAT(refused.body, HasSubstr("store_failed"));
  }
  EXPECT_EQ(calls.load(), before) << "a run whose row was not stored reached the model";
  const HttpResponse after = request(port_, "POST", "/v1/sessions/lost/messages",
                                     message_body("third", Json{{"stream", true}}));
  ASSERT_EQ(after.status, 200) << after.describe();
  EXPECT_THAT(after.body, HasSubstr("answer to third"));
}

// A message memory would refuse to save (over its max_message_bytes) is refused before any
// provider request: the replay provider records every request it gets, and only the small
// message after it reaches it. The failed run says why.
TEST(ServeRefusals, AMessageMemoryCannotKeepCostsNoProviderRequest) {
  ServeWorld w;
  const fs::path record = w.dir.path() / "record.jsonl";
  const fs::path script = w.dir.write("script.jsonl", replay_text("paid") + replay_text("paid"));
  w.config = w.dir.write("kernex.yaml", "provider:\n  name: replay\n  options:\n    script: " +
                                            script.string() + "\n    record: " + record.string() +
                                            "\nmemory:\n  name: sqlite\n  options:\n"
                                            "    max_message_bytes: 64\ndata_dir: " +
                                            w.data_dir.string() + "\n");
  ASSERT_TRUE(w.start());
  auto big =
      request(w.port(), "POST", "/v1/sessions/big/messages", message_body(std::string(100, 'x')));
  EXPECT_NE(big.body.find("refused before any provider request"), std::string::npos)
      << big.describe();
  EXPECT_NE(big.body.find("max_message_bytes"), std::string::npos) << big.describe();
  EXPECT_FALSE(fs::exists(record)) << slurp(record);
  auto fine = request(w.port(), "POST", "/v1/sessions/big/messages", message_body("hello"));
  ASSERT_EQ(fine.status, 200) << fine.describe();
  std::ifstream in(record);
  int requests = 0;
  for (std::string line; std::getline(in, line);) requests += !line.empty();
  EXPECT_EQ(requests, 1);
}

// A request naming a skill that was refused at load is told which and why, not only "unknown".
TEST(ServeRefusals, ARefusedSkillIsNamedWithItsReason) {
  ServeWorld w;
  w.dir.write("skills/grab/SKILL.md", "---\nname: grab\ndescription: grabs\n---\nGrab.\n");
  w.write_config(w.replay_provider(replay_text("unused")), "",
                 "skill_dirs: [" + (w.dir.path() / "skills").string() + "]\n");
  ASSERT_TRUE(w.start());
  auto r = request(w.port(), "POST", "/v1/sessions/s/messages",
                   message_body("hello", Json{{"skills", Json::array({"grab"})}}));
  EXPECT_EQ(r.status, 400) << r.describe();
  EXPECT_NE(r.body.find("skill 'grab' was refused"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("not trusted"), std::string::npos) << r.body;
  auto unknown = request(w.port(), "POST", "/v1/sessions/s/messages",
                         message_body("hello", Json{{"skills", Json::array({"nope"})}}));
  EXPECT_EQ(unknown.status, 400) << unknown.describe();
  EXPECT_NE(unknown.body.find("no skill named 'nope'"), std::string::npos) << unknown.body;
}

}  // namespace
