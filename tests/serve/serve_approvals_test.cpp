// Approvals through `kernex serve`: a call an `ask:` rule holds pauses its run in
// awaiting_approval with an `approval_requested` event; POST /v1/approvals/{id} approves (with
// edited arguments checked against the deny rules again), denies or always-approves for the
// session; expiry and cancel deny; the API's 400/404/409 answers and tenant isolation. Then the
// durability: kill -9 while an approval waits, start again, approve: the run resumes and the
// tool runs exactly once; a tool cut off by kill -9 is reported as interrupted, never re-run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "approval_world.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;

// KERNEX_APPROVAL_TRIALS raises the number of kill -9 trials (bench/approval_restarts runs 100).
int trials() {
  const char* v = std::getenv("KERNEX_APPROVAL_TRIALS");
  return v ? std::max(1, std::atoi(v)) : 2;
}

class ServeApprovals : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string script;
    for (const std::string m : {"approve-me", "deny-me", "cancel-me", "edit-me", "forbid-me"})
      script += tally_call(m, m) + replay_text("finished " + m, m);
    script += tally_call("always-1", "always-1") + replay_text("finished always-1", "always-1");
    script += tally_call("always-2", "always-2") + replay_text("finished always-2", "always-2");
    script += tally_call("twice", "twice") + replay_text("finished twice", "twice");
    script += tally_call("alien", "alien") + replay_text("finished alien", "alien");
    keys_ = a_.w.data_dir / "serve-keys.json";
    ASSERT_TRUE(a_.configure(script, "  keys_file: " + keys_.string() + "\n"));
    auto alpha = a_.w.keys_in(keys_, {"add", "alpha"});
    ASSERT_EQ(alpha.exit_code, 0) << alpha.out << alpha.err;
    auto beta = a_.w.keys_in(keys_, {"add", "beta"});
    ASSERT_EQ(beta.exit_code, 0) << beta.out << beta.err;
    alpha_ = {{"Authorization", "Bearer " + printed_key(alpha.out)}};
    beta_ = {{"Authorization", "Bearer " + printed_key(beta.out)}};
    ASSERT_TRUE(a_.w.start());
    port_ = a_.w.port();
  }

  // Starts "please tally <word>" in session <word> and reads up to its approval_requested.
  std::unique_ptr<SseReader> ask(const std::string& word, Json& asked,
                                 std::vector<SseEvent>& seen) {
    auto sse = std::make_unique<SseReader>(port_, "POST", "/v1/sessions/" + word + "/messages",
                                           message_body("please tally " + word, {{"stream", true}}),
                                           alpha_);
    EXPECT_TRUE(sse->ok()) << sse->head().describe();
    EXPECT_TRUE(read_until(*sse, "approval_requested", seen))
        << ::testing::PrintToString(names(seen)) << a_.w.log();
    asked = event_named(seen, "approval_requested");
    return sse;
  }
  kernex::serve_test::HttpResponse decide(const std::string& id, const std::string& body,
                                          const Headers& who) {
    return request(port_, "POST", "/v1/approvals/" + id, body, who);
  }
  Json tool_result(const std::vector<SseEvent>& seen) { return event_named(seen, "tool_result"); }

  ApprovalWorld a_;
  fs::path keys_;
  Headers alpha_, beta_;
  int port_ = 0;
};

TEST_F(ServeApprovals, ApproveRunsTheToolOnceAndTheRunShowsAwaitingApproval) {
  Json asked;
  std::vector<SseEvent> seen;
  auto sse = ask("approve-me", asked, seen);
  ASSERT_TRUE(asked.is_object());
  const std::string id = asked.value("approval_id", ""), run = asked.value("run_id", "");
  EXPECT_EQ(asked.value("tool", ""), "tally");
  EXPECT_EQ(asked["arguments"], (Json{{"word", "approve-me"}}));
  EXPECT_EQ(asked.value("session_id", ""), "approve-me");
  EXPECT_THAT(asked.value("reason", ""), HasSubstr("ask rule: tally"));
  EXPECT_FALSE(asked.value("expires_at", "").empty());

  // Stored before the event went out: the run's status and the session's pending list say so.
  auto summary = request(port_, "GET", "/v1/runs/" + run, "", alpha_);
  EXPECT_EQ(summary.json().value("status", ""), "awaiting_approval") << summary.body;
  auto listed = request(port_, "GET", "/v1/sessions/approve-me/runs", "", alpha_);
  EXPECT_THAT(listed.body, HasSubstr("awaiting_approval"));
  auto pending = request(port_, "GET", "/v1/sessions/approve-me/approvals", "", alpha_);
  ASSERT_EQ(pending.status, 200) << pending.describe();
  ASSERT_EQ(pending.json()["approvals"].size(), 1u) << pending.body;
  EXPECT_EQ(pending.json()["approvals"][0].value("approval_id", ""), id);
  EXPECT_TRUE(a_.tallied().empty()) << "the tool ran before the approval";

  auto r = decide(id, R"({"decision": "approve"})", alpha_);
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json().value("status", ""), "approved");
  ASSERT_TRUE(read_until(*sse, "run_end", seen)) << ::testing::PrintToString(names(seen));
  expect_well_formed(seen, "approve-me");
  EXPECT_EQ(event_named(seen, "approval_resolved").value("status", ""), "approved");
  EXPECT_EQ(seen.back().json().value("text", ""), "finished approve-me");
  EXPECT_EQ(count_of(a_.tallied(), "approve-me"), 1u);
  EXPECT_EQ(request(port_, "GET", "/v1/runs/" + run, "", alpha_).json().value("status", ""),
            "done");
  EXPECT_TRUE(request(port_, "GET", "/v1/sessions/approve-me/approvals", "", alpha_)
                  .json()["approvals"]
                  .empty());
  // Resolved once: a second decision is a conflict.
  EXPECT_EQ(decide(id, R"({"decision": "deny"})", alpha_).status, 409);
}

TEST_F(ServeApprovals, DenyTellsTheModelWhyAndTheToolNeverRuns) {
  Json asked;
  std::vector<SseEvent> seen;
  auto sse = ask("deny-me", asked, seen);
  auto r = decide(asked.value("approval_id", ""),
                  R"({"decision": "deny", "reason": "not on a Friday"})", alpha_);
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json().value("status", ""), "denied");
  ASSERT_TRUE(read_until(*sse, "run_end", seen));
  EXPECT_THAT(tool_result(seen).value("content", ""), HasSubstr("not on a Friday"));
  EXPECT_TRUE(tool_result(seen).value("is_error", false));
  EXPECT_EQ(count_of(a_.tallied(), "deny-me"), 0u);
}

TEST_F(ServeApprovals, EditedArgumentsRunAndAreCheckedAgainstTheDenyRules) {
  Json asked;
  std::vector<SseEvent> seen;
  auto sse = ask("edit-me", asked, seen);
  auto r = decide(asked.value("approval_id", ""),
                  R"({"decision": "approve", "arguments": {"word": "edited"}})", alpha_);
  ASSERT_EQ(r.status, 200) << r.describe();
  ASSERT_TRUE(read_until(*sse, "run_end", seen));
  EXPECT_EQ(count_of(a_.tallied(), "edited"), 1u);
  EXPECT_EQ(count_of(a_.tallied(), "edit-me"), 0u);

  std::vector<SseEvent> seen2;
  auto sse2 = ask("forbid-me", asked, seen2);
  r = decide(asked.value("approval_id", ""),
             R"({"decision": "approve", "arguments": {"word": "forbidden"}})", alpha_);
  ASSERT_EQ(r.status, 200) << r.describe();
  ASSERT_TRUE(read_until(*sse2, "run_end", seen2));
  EXPECT_THAT(tool_result(seen2).value("content", ""), HasSubstr("denied by rule"));
  EXPECT_EQ(count_of(a_.tallied(), "forbidden"), 0u);
}

TEST_F(ServeApprovals, AlwaysApprovesTheToolForTheRestOfTheSession) {
  Json asked;
  std::vector<SseEvent> seen;
  // Both runs in one session: the second message goes to the session of the first.
  auto first = std::make_unique<SseReader>(
      port_, "POST", "/v1/sessions/regular/messages",
      message_body("please tally always-1", {{"stream", true}}), alpha_);
  ASSERT_TRUE(read_until(*first, "approval_requested", seen));
  auto r = decide(event_named(seen, "approval_requested").value("approval_id", ""),
                  R"({"decision": "always"})", alpha_);
  ASSERT_EQ(r.status, 200) << r.describe();
  ASSERT_TRUE(read_until(*first, "run_end", seen));

  SseReader second(port_, "POST", "/v1/sessions/regular/messages",
                   message_body("please tally always-2", {{"stream", true}}), alpha_);
  auto events = second.drain();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "run_end");
  EXPECT_TRUE(event_named(events, "approval_requested").is_null()) << "asked again";
  EXPECT_EQ(count_of(a_.tallied(), "always-1"), 1u);
  EXPECT_EQ(count_of(a_.tallied(), "always-2"), 1u);
}

TEST_F(ServeApprovals, CancelWhileWaitingDeniesAndEndsTheRun) {
  Json asked;
  std::vector<SseEvent> seen;
  auto sse = ask("cancel-me", asked, seen);
  const std::string run = asked.value("run_id", "");
  ASSERT_EQ(request(port_, "POST", "/v1/runs/" + run + "/cancel", "", alpha_).status, 202);
  ASSERT_TRUE(read_until(*sse, "run_end", seen)) << ::testing::PrintToString(names(seen));
  EXPECT_EQ(seen.back().json().value("outcome", ""), "cancelled");
  EXPECT_EQ(event_named(seen, "approval_resolved").value("status", ""), "denied");
  EXPECT_EQ(count_of(a_.tallied(), "cancel-me"), 0u);
  EXPECT_EQ(decide(asked.value("approval_id", ""), R"({"decision": "approve"})", alpha_).status,
            409);
}

TEST_F(ServeApprovals, BadDecisionsAreRefusedAndTenantsSeeOnlyTheirOwn) {
  Json asked;
  std::vector<SseEvent> seen;
  auto sse = ask("twice", asked, seen);
  const std::string id = asked.value("approval_id", "");
  for (const auto& [body, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"decision": "yes"})", "decision"},
           {R"({"decision": 1})", "decision"},
           {R"({})", "decision"},
           {R"({"decision": "approve", "arguments": "x"})", "arguments"},
           {R"({"decision": "approve", "arguments": [1]})", "arguments"},
           {R"({"decision": "deny", "reason": 5})", "reason"},
           {R"({"decision": "approve", "colour": "red"})", "colour"},
           {R"([1])", "object"},
           {R"(not json)", "JSON"}}) {
    auto r = decide(id, body, alpha_);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.describe();
    EXPECT_THAT(r.body, HasSubstr(expected)) << body;
  }
  EXPECT_EQ(decide("apr-unknown", R"({"decision": "approve"})", alpha_).status, 404);
  // Another tenant: not found, not listed, and cannot decide.
  EXPECT_EQ(decide(id, R"({"decision": "approve"})", beta_).status, 404);
  EXPECT_EQ(request(port_, "GET", "/v1/sessions/twice/approvals", "", beta_).status, 404);
  EXPECT_EQ(request(port_, "GET", "/v1/sessions/twice/approvals").status, 401);
  EXPECT_EQ(a_.tallied().size(), 0u);
  ASSERT_EQ(decide(id, R"({"decision": "approve"})", alpha_).status, 200);
  EXPECT_EQ(decide(id, R"({"decision": "approve"})", alpha_).status, 409);
  ASSERT_TRUE(read_until(*sse, "run_end", seen));
  EXPECT_EQ(count_of(a_.tallied(), "twice"), 1u);
}

TEST(ServeApprovalExpiry, AnUnansweredApprovalExpiresAsADeny) {
  ApprovalWorld a;
  ASSERT_TRUE(a.configure(tally_call("late") + replay_text("finished late"),
                          "  approvals:\n    timeout_s: 1\n"));
  ASSERT_TRUE(a.w.start());
  SseReader sse(a.w.port(), "POST", "/v1/sessions/late/messages",
                message_body("please tally late", {{"stream", true}}));
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "run_end", seen)) << ::testing::PrintToString(names(seen));
  const Json resolved = event_named(seen, "approval_resolved");
  EXPECT_EQ(resolved.value("status", ""), "expired") << resolved.dump();
  EXPECT_THAT(event_named(seen, "tool_result").value("content", ""), HasSubstr("approval expired"));
  EXPECT_EQ(a.tallied().size(), 0u);
  auto late =
      request(a.w.port(), "POST",
              "/v1/approvals/" + event_named(seen, "approval_requested").value("approval_id", ""),
              R"({"decision": "approve"})");
  EXPECT_EQ(late.status, 409) << late.describe();
}

TEST(ServeApprovalDurability, Kill9WhileAnApprovalWaitsResumesAndRunsTheToolOnce) {
  ApprovalWorld a;
  ASSERT_TRUE(a.configure(tally_call("trial0")));
  ASSERT_TRUE(a.w.start());
  for (int n = 0; n < trials(); ++n) {
    SCOPED_TRACE("trial " + std::to_string(n));
    const std::size_t calls_before = a.provider_calls();
    TrialOutcome t = kill9_trial(a, n);
    ASSERT_TRUE(t.error.empty()) << t.error << "\n" << a.w.log();
    EXPECT_TRUE(t.resumed);
    EXPECT_EQ(t.tool_runs, 1u);
    // One call before the kill (the tool call), one after (the answer to its result): the
    // recorded turn was replayed, not asked again.
    EXPECT_EQ(a.provider_calls() - calls_before, 2u);
  }
}

TEST(ServeApprovalDurability, SigtermLeavesAWaitingRunForTheNextStart) {
  ApprovalWorld a;
  // A long grace: the server must not spend it on a run that waits for a person.
  ASSERT_TRUE(a.configure(tally_call("calm"), "  shutdown_grace_ms: 60000\n"));
  ASSERT_TRUE(a.w.start());
  SseReader sse(a.w.port(), "POST", "/v1/sessions/calm/messages",
                message_body("please tally calm", {{"stream", true}}));
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "approval_requested", seen));
  const Json asked = event_named(seen, "approval_requested");
  const auto stopped = a.w.server.stop(milliseconds(20000));
  ASSERT_TRUE(stopped.has_value()) << "SIGTERM waited for the approval";
  EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0);
  a.set_script(replay_text("finished calm"));
  ASSERT_TRUE(a.w.start());
  const std::string run = asked.value("run_id", "");
  EXPECT_EQ(request(a.w.port(), "GET", "/v1/runs/" + run).json().value("status", ""),
            "awaiting_approval");
  SseReader follow(a.w.port(), "GET", "/v1/runs/" + run + "/events", "");
  std::vector<SseEvent> after;
  ASSERT_TRUE(read_until(follow, "approval_requested", after));
  const std::string id = asked.value("approval_id", "");
  EXPECT_EQ(event_named(after, "approval_requested").value("approval_id", ""), id);
  ASSERT_EQ(request(a.w.port(), "POST", "/v1/approvals/" + id, R"({"decision": "approve"})").status,
            200);
  ASSERT_TRUE(read_until(follow, "run_end", after));
  EXPECT_EQ(after.back().json().value("text", ""), "finished calm");
  EXPECT_EQ(count_of(a.tallied(), "calm"), 1u);
  // The exchange was saved once, by the run that finished.
  std::size_t asked_messages = 0;
  for (const Json& m : session_messages(a.w.port(), "calm"))
    asked_messages += m.value("role", "") == "user" && content_text(m) == "please tally calm";
  EXPECT_EQ(asked_messages, 1u);
}

TEST(ServeApprovalDurability, Kill9WhileAToolRunsReportsItInterruptedAndNeverRunsItAgain) {
  ApprovalWorld a;
  ASSERT_TRUE(a.configure(replay_tool_call("stall", Json::object(), "s1")));
  ASSERT_TRUE(a.w.start());
  SseReader sse(a.w.port(), "POST", "/v1/sessions/stalled/messages",
                message_body("please tally by stalling", {{"stream", true}}));
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "tool_call", seen)) << ::testing::PrintToString(names(seen));
  const std::string run = seen.front().json().value("run_id", "");
  // Bounded wait for the tool's own mark (no event says "the process started").
  const auto deadline = Clock::now() + milliseconds(20000);
  while (a.stalled().empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(a.stalled().size(), 1u) << "the stall tool never started\n" << a.w.log();
  ASSERT_TRUE(a.w.server.kill9());
  a.set_script(replay_text("went on without it"));
  ASSERT_TRUE(a.w.start());
  SseReader follow(a.w.port(), "GET", "/v1/runs/" + run + "/events", "");
  std::vector<SseEvent> after;
  ASSERT_TRUE(read_until(follow, "run_end", after)) << ::testing::PrintToString(names(after));
  EXPECT_THAT(event_named(after, "tool_result").value("content", ""),
              HasSubstr("Tool call interrupted"));
  EXPECT_EQ(after.back().json().value("text", ""), "went on without it");
  EXPECT_EQ(a.stalled().size(), 1u) << "the interrupted tool ran again";
}

}  // namespace

namespace {

// One replay line: some text, then one tally call.
std::string said_and_tally(const std::string& text, const std::string& word,
                           const std::string& id) {
  Json call{{"id", id}, {"name", "tally"}, {"arguments", Json{{"word", word}}}};
  return Json{{"text", text},
              {"tool_calls", Json::array({call})},
              {"usage", Json{{"input_tokens", 10}, {"output_tokens", 5}}}}
             .dump() +
         "\n";
}

// The stream's events without the model's text and usage: what a replay could repeat.
std::vector<std::string> steps_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    if (e.event == "text_delta" || e.event == "usage") continue;
    const Json d = e.json();
    out.push_back(e.event + (d.contains("id") ? ":" + d.value("id", "") : ""));
  }
  return out;
}

void expect_same_events(const std::vector<SseEvent>& got, const std::vector<SseEvent>& want) {
  ASSERT_EQ(names(got), names(want));
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << i;
    EXPECT_EQ(got[i].data, want[i].data) << i;
  }
}

}  // namespace

// A run parked for an approval is resumed on the decision, replaying its journal: the stream
// still has each event once (run_start, the calls before the park, the parked call's tool_call),
// with ids 1, 2, 3..., and the put-off call's denial never shows. A follower that reconnects with
// the Last-Event-ID it had before the park reads exactly the rest, live and once the run ended.
TEST(ServeApprovalParked, AResumedRunEmitsEachEventOnceAndLastEventIdReconnectsAcrossThePark) {
  ApprovalWorld a;
  // A call the deny rule refuses (no approval), then the parked one, then the answer.
  ASSERT_TRUE(a.configure(said_and_tally("first a forbidden one", "forbidden-1", "t-forbidden") +
                              said_and_tally("now the real one", "parked", "t-parked") +
                              replay_text("finished parked"),
                          "  approvals:\n    park: true\n"));
  ASSERT_TRUE(a.w.start());
  const int port = a.w.port();
  SseReader sse(port, "POST", "/v1/sessions/parked/messages",
                message_body("please tally parked", {{"stream", true}}));
  ASSERT_TRUE(sse.ok()) << sse.head().describe();
  std::vector<SseEvent> seen;
  ASSERT_TRUE(read_until(sse, "approval_requested", seen)) << a.w.log();
  const Json asked = event_named(seen, "approval_requested");
  const std::string run = asked.value("run_id", "");
  const std::string last_id = seen.back().id;
  // Parked: the run holds no thread (the server says so in its log once it parked).
  const auto deadline = Clock::now() + milliseconds(30000);
  while (a.w.log().find("parked until its approval") == std::string::npos &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));  // the log is the only sign of the park
  ASSERT_NE(a.w.log().find("parked until its approval"), std::string::npos) << a.w.log();
  SseReader follower(port, "GET", "/v1/runs/" + run + "/events", "", {{"Last-Event-ID", last_id}});
  ASSERT_TRUE(follower.ok()) << follower.head().describe();

  auto d = request(port, "POST", "/v1/approvals/" + asked.value("approval_id", ""),
                   R"({"decision": "approve"})");
  ASSERT_EQ(d.status, 200) << d.describe() << a.w.log();
  ASSERT_TRUE(read_until(sse, "run_end", seen)) << ::testing::PrintToString(names(seen));
  EXPECT_EQ(seen.back().json().value("text", ""), "finished parked");
  EXPECT_EQ(count_of(a.tallied(), "parked"), 1u);

  const std::vector<std::string> expected{"run_start",
                                          "tool_call:t-forbidden",
                                          "tool_result:t-forbidden",
                                          "tool_call:t-parked",
                                          "approval_requested",
                                          "approval_resolved",
                                          "tool_result:t-parked",
                                          "run_end"};
  EXPECT_EQ(steps_of(seen), expected);
  for (std::size_t i = 0; i < seen.size(); ++i)
    EXPECT_EQ(seen[i].id, std::to_string(i + 1)) << "event " << i << " " << seen[i].event;
  EXPECT_FALSE(event_named(seen, "approval_resolved").empty());
  for (const auto& e : seen) {
    if (e.event == "tool_result" && e.json().value("id", "") == "t-parked") {
      EXPECT_FALSE(e.json().value("is_error", true)) << e.data;
    }
  }
  const std::vector<SseEvent> tail(seen.begin() + static_cast<std::ptrdiff_t>(std::stoul(last_id)),
                                   seen.end());

  // Followed live across the park, from before it.
  std::vector<SseEvent> followed;
  ASSERT_TRUE(read_until(follower, "run_end", followed))
      << ::testing::PrintToString(names(followed));
  expect_same_events(followed, tail);
  // Reconnected once the run ended, and from the start.
  SseReader later(port, "GET", "/v1/runs/" + run + "/events", "", {{"Last-Event-ID", last_id}});
  ASSERT_TRUE(later.ok()) << later.head().describe();
  expect_same_events(later.drain(), tail);
  SseReader all(port, "GET", "/v1/runs/" + run + "/events", "");
  ASSERT_TRUE(all.ok()) << all.head().describe();
  expect_same_events(all.drain(), seen);
}
