// Cluster mode's webhook outbox and tenant limits on a real PostgreSQL (server/src/cluster_outbox,
// cluster_limits): several senders ("nodes", each its own connections) deliver every event once,
// in order per run; a claim a dead node left expires and another node sends the row; the run
// end's transaction writes its event (and a fenced-out end writes none); forgetting a session
// tombstones its pending rows; `kernex serve webhooks` reads the shared outbox; and N nodes x M
// concurrent submits at a tenant's limit admit exactly the limit.
#include <gtest/gtest.h>

#include <fstream>
#include <latch>
#include <map>
#include <sstream>
#include <thread>

#include "cluster_limits.hpp"
#include "cluster_outbox.hpp"
#include "cluster_store.hpp"
#include "kernex/config.hpp"
#include "kernex/pg/connection.hpp"
#include "openai_parked.hpp"
#include "kernex/server/webhooks.hpp"
#include "pg_run_stores.hpp"
#include "pg_test_db.hpp"
#include "response_store.hpp"
#include "webhook_receiver.hpp"
#include "temp_dir.hpp"
#include "webhook_sender.hpp"
#include "workspace_probe.hpp"

namespace kernex::server {
namespace {

using std::chrono::milliseconds;
using test::WebhookReceiver;

constexpr milliseconds kWait{20'000};

bool eventually(const std::function<bool()>& pred, milliseconds limit = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class ClusterOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (db_.dsn().empty()) GTEST_SKIP() << testing::PgTestDb::skip_reason();
    options_.dsn = db_.dsn();
  }

  std::unique_ptr<ClusterOutbox> outbox(milliseconds claim_for = milliseconds(2000)) {
    auto o = ClusterOutbox::open(options_, claim_for);
    EXPECT_TRUE(o) << o.error().describe();
    return o ? std::move(*o) : nullptr;
  }
  std::unique_ptr<ClusterStore> store() {
    auto s = ClusterStore::open(options_, 4);
    EXPECT_TRUE(s) << s.error().describe();
    return s ? std::move(*s) : nullptr;
  }
  WebhookEndpointConfig endpoint(const std::string& url) const {
    WebhookEndpointConfig e;
    e.url = url;
    e.secret = "whsec-test";
    e.events = {"run.completed", "run.failed", "approval.requested", "approval.resolved"};
    e.backoff_base = milliseconds(10);
    e.backoff_cap = milliseconds(40);
    e.timeout = milliseconds(2000);
    return e;
  }
  std::string value(const std::string& sql) {
    std::string v;
    EXPECT_TRUE(db_.exec(sql, &v));
    return v;
  }

  testing::PgTestDb db_;
  pg::Options options_;
};

WebhookEvent event_of(const std::string& run, int n) {
  return make_webhook_event("approval.requested", Json{{"run_id", run}, {"n", n}});
}

TEST_F(ClusterOps, ThreeNodesDeliverEveryEventOnceInOrderPerRun) {
  WebhookReceiver receiver("whsec-test");
  receiver.up();
  auto writer = outbox();
  ASSERT_TRUE(writer);
  constexpr int kRuns = 12, kPerRun = 4;
  std::map<std::string, std::vector<std::string>> made;  // run -> event ids in order
  for (int n = 0; n < kPerRun; ++n) {
    for (int r = 0; r < kRuns; ++r) {
      const std::string run = "run_" + std::to_string(r);
      auto e = event_of(run, n);
      ASSERT_TRUE(writer->put(e, {receiver.url()}, "acme"));
      made[run].push_back(e.id);
    }
  }
  std::vector<std::unique_ptr<Webhooks>> nodes;
  for (int i = 0; i < 3; ++i) {
    auto w = Webhooks::create({endpoint(receiver.url())}, outbox());
    ASSERT_TRUE(w) << w.error().describe();
    nodes.push_back(std::move(*w));
  }
  for (auto& n : nodes) n->start();
  ASSERT_TRUE(receiver.wait_distinct(kRuns * kPerRun, kWait));
  // The receiver answered before the sender marks the row: wait for the marks.
  const std::string all = std::to_string(kRuns * kPerRun);
  EXPECT_TRUE(eventually([&] {
    return value(
               "SELECT count(*) FROM serve_webhook_outbox WHERE status = 'delivered' AND "
               "tenant = 'acme'") == all;
  }));
  for (auto& n : nodes) n->stop();
  EXPECT_EQ(receiver.duplicates(), 0u) << "an event was sent by two nodes";
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
  std::map<std::string, std::vector<std::string>> got;
  for (const auto& d : receiver.accepted()) {
    const Json body = Json::parse(d.body);
    got[body["data"]["run_id"].get<std::string>()].push_back(d.event_id);
  }
  EXPECT_EQ(got, made) << "events of a run arrived out of order";
}

TEST_F(ClusterOps, ADeadNodesClaimExpiresAndAnotherNodeSends) {
  auto dead = outbox(milliseconds(100));  // lease: (1 row + 1) x 100 ms
  auto alive = outbox(milliseconds(100));
  const auto e = event_of("run_x", 0);
  ASSERT_TRUE(dead->put(e, {"http://127.0.0.1:9/hook"}, "acme"));
  auto taken = dead->take_due("http://127.0.0.1:9/hook", 1);
  ASSERT_TRUE(taken && taken->size() == 1u);
  // Its attempt failed once: the attempt and the backoff are in the row, not in the node.
  ASSERT_TRUE(dead->mark_failed(taken->front(), 0, 60'000, "HTTP 500"));
  taken = dead->take_due("http://127.0.0.1:9/hook", 1);
  ASSERT_TRUE(taken && taken->size() == 1u);
  EXPECT_EQ(taken->front().attempts, 1);
  // ... and the node dies holding its claim: nobody else sends the row until the claim ends.
  auto none = alive->take_due("http://127.0.0.1:9/hook", 4);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  dead.reset();
  std::vector<OutboxRow> rows;
  ASSERT_TRUE(eventually([&] {
    auto r = alive->take_due("http://127.0.0.1:9/hook", 4);
    if (r) rows = *r;
    return r && !r->empty();
  }));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].event_id, e.id);
  EXPECT_EQ(rows[0].attempts, 1);
  // The dead node's late verdict is fenced out; the live one's counts.
  ASSERT_TRUE(alive->mark_delivered(rows[0]));
  EXPECT_EQ(value("SELECT status || ' ' || attempts FROM serve_webhook_outbox"), "delivered 2");
}

TEST_F(ClusterOps, GivesUpPastTheMaxAgeOnTheDatabaseClockAndRetryRevives) {
  auto o = outbox(milliseconds(100));
  ASSERT_TRUE(o->put(event_of("run_y", 0), {"http://127.0.0.1:9/a"}, "acme"));
  auto rows = o->take_due("http://127.0.0.1:9/a", 1);
  ASSERT_TRUE(rows && rows->size() == 1u);
  auto gave_up = o->mark_failed(rows->front(), 5'000, 1'000, "refused");
  ASSERT_TRUE(gave_up);
  EXPECT_TRUE(*gave_up);
  std::ostringstream out, err;
  Config config;
  config.memory = PluginRef{"postgres", Json{{"dsn", db_.dsn()}}};
  const auto place = WebhookOutboxPlace::of(config);
  ASSERT_EQ(place.pg_dsn, db_.dsn());
  auto listed_ok = webhooks_list(place, {.failed = true, .json = true}, out);
  ASSERT_TRUE(listed_ok) << listed_ok.error().describe();
  const Json listed = Json::parse(out.str());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["status"], "failed");
  EXPECT_EQ(listed[0]["last_error"], "refused");
  std::ostringstream out2;
  ASSERT_TRUE(webhooks_retry(place, {{}, true}, out2, err));
  EXPECT_EQ(out2.str(), "retrying 1 delivery\n");
  rows = o->take_due("http://127.0.0.1:9/a", 1);
  ASSERT_TRUE(rows && rows->size() == 1u);
  EXPECT_EQ(rows->front().attempts, 0);
}

SharedRun run_row(const std::string& tenant, const std::string& session) {
  static int n = 0;
  SharedRun r;
  r.id = "run_t" + std::to_string(++n) + "_" + std::to_string(::getpid());
  r.tenant = tenant;
  r.session = session;
  r.created_at = "2026-01-01T00:00:00Z";
  r.request = Json{{"message", "hi"}};
  return r;
}

TEST_F(ClusterOps, TheRunEndWritesItsEventInItsTransactionAndForgetTombstonesIt) {
  auto s = store();
  ASSERT_TRUE(s);
  std::vector<std::string> want{"http://127.0.0.1:9/end"};
  int woken = 0;
  ClusterHooks hooks;
  add_webhook_hooks(hooks,
                    Webhooks::Sink{[&](const std::string&) { return want; }, [&] { ++woken; }});
  s->set_hooks(std::move(hooks));
  const SharedRun run = run_row("acme", "s1");
  ASSERT_TRUE(s->submit(run, IfBusy::Enqueue));
  auto claimed = s->claim("node-a", std::chrono::seconds(30));
  ASSERT_TRUE(claimed && *claimed);
  const int attempt = (*claimed)->run.attempt;
  // An end from an attempt that no longer holds the run is no end: no event either.
  auto fenced = s->finish(run.id, "node-b", attempt, RunStatus::Done, Json{{"outcome", "ok"}}, {});
  ASSERT_TRUE(fenced);
  EXPECT_FALSE(*fenced);
  EXPECT_EQ(value("SELECT count(*) FROM serve_webhook_outbox"), "0");
  auto done = s->finish(run.id, "node-a", attempt, RunStatus::Done, Json{{"outcome", "ok"}}, {});
  ASSERT_TRUE(done && *done);
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(value("SELECT tenant || ' ' || type || ' ' || stream FROM serve_webhook_outbox"),
            "acme run.completed " + run.id);
  EXPECT_NE(value("SELECT body FROM serve_webhook_outbox").find("\"session_id\":\"s1\""),
            std::string::npos);
  // Another tenant forgetting a session of the same name touches nothing of acme's.
  ASSERT_TRUE(s->delete_session("other", "s1"));
  EXPECT_EQ(value("SELECT count(*) FROM serve_webhook_outbox WHERE body LIKE '%forgotten%'"), "0");
  ASSERT_TRUE(s->delete_session("acme", "s1"));
  const Json tomb = Json::parse(value("SELECT body FROM serve_webhook_outbox"));
  EXPECT_EQ(tomb["type"], "run.completed");
  EXPECT_EQ(tomb["data"], (Json{{"run_id", run.id}, {"forgotten", true}}));
  EXPECT_EQ(value("SELECT body LIKE '%s1%' FROM serve_webhook_outbox"), "f");
}

// A run's events and journal ride the store's group commit (pg::Writer) and stay fenced by the
// claim: a node that does not hold the run stores no event and starts no tool, a tool starts once,
// and another tenant's journal of the same run id finds nothing.
TEST_F(ClusterOps, EventsAndJournalRideTheBatchesFencedByTheClaim) {
  auto s = store();
  ASSERT_TRUE(s);
  const SharedRun run = run_row("acme", "s1");
  ASSERT_TRUE(s->submit(run, IfBusy::Enqueue));
  auto claimed = s->claim("node-a", std::chrono::seconds(30));
  ASSERT_TRUE(claimed && *claimed);
  const int attempt = (*claimed)->run.attempt;
  const auto before =
      value("SELECT count(*) FROM serve_run_events WHERE run_id = '" + run.id + "'");
  auto fenced =
      s->append_events(run.id, "node-b", attempt, {{100, "text_delta", Json{{"t", "x"}}}});
  ASSERT_TRUE(fenced);
  EXPECT_FALSE(*fenced);
  auto held = s->append_events(run.id, "node-a", attempt,
                               {{100, "text_delta", Json{{"t", "a"}}}, {101, "usage", Json{}}});
  ASSERT_TRUE(held);
  EXPECT_TRUE(*held);
  EXPECT_EQ(
      std::stoi(value("SELECT count(*) FROM serve_run_events WHERE run_id = '" + run.id + "'")),
      std::stoi(before) + 2);
  PgJournalStore journals(s->pool(), &s->writer());
  auto mine = journals.journal("acme", run.id, "node-a", attempt);
  const ToolCall call{"c1", "shell", Json{{"cmd", "ls"}}};
  ASSERT_TRUE(mine->tool_started("k1", call));
  auto again = mine->tool_started("k1", call);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::Cancelled);
  auto theirs = journals.journal("acme", run.id, "node-b", attempt)->tool_started("k2", call);
  ASSERT_FALSE(theirs);
  EXPECT_EQ(theirs.error().code, ErrorCode::Cancelled);
  ASSERT_TRUE(mine->tool_finished("k1", ToolResult{"c1", "shell", "ok", false}));
  auto entry = mine->tool("k1");
  ASSERT_TRUE(entry);
  EXPECT_TRUE(entry->started);
  ASSERT_TRUE(entry->result);
  EXPECT_EQ(entry->result->content, "ok");
  auto other = journals.journal("globex", run.id, false)->tool("k1");
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->started);
  EXPECT_EQ(value("SELECT count(*) FROM serve_run_tools"), "1");
  EXPECT_GE(s->writer().stats().writes, 6u);
}

// A run's creation and its end are writes of the store's batches: each keeps its tenant (another
// tenant's query finds nothing), the busy check answers as before, and the end is fenced by the
// claim (a node that does not hold the run changes nothing, and its journal goes with the end).
TEST_F(ClusterOps, SubmitAndFinishRideTheBatchesFencedAndScoped) {
  auto s = store();
  ASSERT_TRUE(s);
  const auto writes = s->writer().stats().writes;
  const SharedRun run = run_row("acme", "s1");
  auto queued = s->submit(run, IfBusy::Reject);
  ASSERT_TRUE(queued) << queued.error().describe();
  EXPECT_EQ(*queued, ClusterStore::Admitted::Queued);
  const SharedRun second = run_row("acme", "s1");
  auto busy = s->submit(second, IfBusy::Reject);
  ASSERT_TRUE(busy);
  EXPECT_EQ(*busy, ClusterStore::Admitted::Busy);
  EXPECT_FALSE(s->find("acme", second.id).value());
  // The same session name in another tenant is another session.
  const SharedRun theirs = run_row("globex", "s1");
  ASSERT_EQ(s->submit(theirs, IfBusy::Reject).value(), ClusterStore::Admitted::Queued);
  EXPECT_FALSE(s->find("globex", run.id).value());
  EXPECT_FALSE(s->find("acme", theirs.id).value());
  ASSERT_TRUE(s->find("acme", run.id).value());
  EXPECT_GE(s->writer().stats().writes, writes + 3);
  EXPECT_EQ(value("SELECT count(*) FROM serve_runs"), "2");

  std::optional<ClaimedRun> mine;
  for (int i = 0; i < 2 && !mine; ++i) {
    auto c = s->claim("node-a", std::chrono::seconds(30));
    ASSERT_TRUE(c && *c);
    if ((*c)->run.id == run.id) mine = std::move(**c);
  }
  ASSERT_TRUE(mine);
  const int attempt = mine->run.attempt;
  PgJournalStore journals(s->pool(), &s->writer());
  ASSERT_TRUE(journals.journal("acme", run.id, "node-a", attempt)
                  ->tool_started("k1", ToolCall{"c1", "shell", Json{{"cmd", "ls"}}}));
  auto fenced = s->finish(run.id, "node-b", attempt, RunStatus::Done, Json{{"outcome", "x"}},
                          {{50, "text_delta", Json{{"t", "theirs"}}}});
  ASSERT_TRUE(fenced);
  EXPECT_FALSE(*fenced);
  EXPECT_EQ(s->find("acme", run.id).value()->status, "running");
  EXPECT_EQ(value("SELECT count(*) FROM serve_run_events WHERE data LIKE '%theirs%'"), "0");
  EXPECT_EQ(value("SELECT count(*) FROM serve_run_tools"), "1");
  auto done = s->finish(run.id, "node-a", attempt, RunStatus::Done, Json{{"outcome", "ok"}},
                        {{50, "text_delta", Json{{"t", "mine"}}}});
  ASSERT_TRUE(done) << done.error().describe();
  EXPECT_TRUE(*done);
  const auto ended = s->find("acme", run.id).value();
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->status, "done");
  EXPECT_EQ(ended->result, (Json{{"outcome", "ok"}}));
  EXPECT_EQ(value("SELECT count(*) FROM serve_run_events WHERE data LIKE '%mine%'"), "1");
  EXPECT_EQ(value("SELECT count(*) FROM serve_run_tools"), "0");
  // Ended: a second end from the same attempt is no end.
  EXPECT_FALSE(s->finish(run.id, "node-a", attempt, RunStatus::Failed, Json{}, {}).value());
  EXPECT_EQ(s->find("acme", run.id).value()->status, "done");
}

// Two tenants submitting at once, into sessions of the same names, on two nodes: each tenant's
// session admits one run under reject and every run under enqueue, rows keep their tenant, and a
// submit that fails (a run id already taken) fails alone while the batches around it commit.
TEST_F(ClusterOps, ConcurrentSubmitsOfTwoTenantsKeepTheirTenantAndFailAlone) {
  std::vector<std::unique_ptr<ClusterStore>> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(store());
    ASSERT_TRUE(nodes.back());
  }
  const SharedRun taken = run_row("acme", "elsewhere");
  ASSERT_TRUE(nodes[0]->submit(taken, IfBusy::Enqueue));
  constexpr int kPerTenant = 12;
  std::mutex mu;
  std::map<std::string, int> queued, busy;
  int failed = 0, duplicate_failed = 0;
  std::vector<SharedRun> runs;
  for (const char* tenant : {"acme", "globex"}) {
    for (int i = 0; i < kPerTenant; ++i)
      runs.push_back(run_row(tenant, i % 2 ? "rejecting" : "enqueueing"));
  }
  SharedRun dup = run_row("globex", "dup");
  dup.id = taken.id;
  runs.push_back(dup);
  std::latch go(static_cast<std::ptrdiff_t>(runs.size()));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    threads.emplace_back([&, i] {
      const SharedRun& r = runs[i];
      go.arrive_and_wait();
      auto a = nodes[i % 2]->submit(r, r.session == "rejecting" ? IfBusy::Reject : IfBusy::Enqueue);
      std::lock_guard lock(mu);
      if (!a) {
        ++failed;
        if (r.session == "dup") ++duplicate_failed;
      } else if (*a == ClusterStore::Admitted::Queued) {
        ++queued[r.tenant + "/" + r.session];
      } else if (*a == ClusterStore::Admitted::Busy) {
        ++busy[r.tenant + "/" + r.session];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(duplicate_failed, 1);
  for (const char* tenant : {"acme", "globex"}) {
    const std::string t = tenant;
    EXPECT_EQ(queued[t + "/rejecting"], 1) << t;
    EXPECT_EQ(busy[t + "/rejecting"], kPerTenant / 2 - 1) << t;
    EXPECT_EQ(queued[t + "/enqueueing"], kPerTenant / 2) << t;
    EXPECT_EQ(value("SELECT count(*) FROM serve_runs WHERE tenant = '" + t +
                    "' AND session IN ('rejecting', 'enqueueing')"),
              std::to_string(kPerTenant / 2 + 1));
  }
  // The taken id is still acme's run, untouched.
  EXPECT_EQ(value("SELECT tenant || ' ' || session FROM serve_runs WHERE id = '" + taken.id + "'"),
            "acme elsewhere");
  for (auto& n : nodes) {
    const auto st = n->writer().stats();
    std::printf("node writer: %llu writes in %llu batches, %llu commits, %llu failed alone\n",
                static_cast<unsigned long long>(st.writes),
                static_cast<unsigned long long>(st.batches),
                static_cast<unsigned long long>(st.transactions),
                static_cast<unsigned long long>(st.failed));
  }
}

// Stored responses and approvals are writes of batches too: each keeps its tenant, a removal and a
// decision still answer whether they did anything, and a second approval of the same (run, key)
// fails alone.
TEST_F(ClusterOps, BatchedResponsesAndApprovalsKeepTheirTenantAndAnswers) {
  auto s = store();
  ASSERT_TRUE(s);
  const SharedRun run = run_row("acme", "s1");
  ASSERT_TRUE(s->submit(run, IfBusy::Enqueue));
  const SharedRun theirs = run_row("globex", "s1");
  ASSERT_TRUE(s->submit(theirs, IfBusy::Enqueue));
  auto responses = PgResponseStore::open(options_, 4);
  ASSERT_TRUE(responses) << responses.error().describe();
  ResponseStore& r = **responses;
  ASSERT_TRUE(r.put({"resp_1", "acme", "s1", Json{{"v", "acme"}}, Json::array(), run.id}));
  ASSERT_TRUE(r.put({"resp_1", "globex", "s1", Json{{"v", "globex"}}, Json::array(), theirs.id}));
  EXPECT_FALSE(r.get("globex", "resp_1").value());
  EXPECT_EQ(r.get("acme", "resp_1").value()->response, (Json{{"v", "acme"}}));
  EXPECT_FALSE(r.remove("globex", "resp_1").value());
  EXPECT_TRUE(r.remove("acme", "resp_1").value());
  EXPECT_FALSE(r.remove("acme", "resp_1").value());

  PgApprovalStore approvals(s->pool(), &s->writer());
  StoredApproval a;
  a.id = "apr_1";
  a.tenant = "acme";
  a.session = "s1";
  a.run_id = run.id;
  a.key = "k1";
  a.tool = "shell";
  a.arguments = Json{{"cmd", "ls"}};
  a.created_at = 100;
  a.expires_at = 400;
  auto stored = approvals.insert(a);
  ASSERT_TRUE(stored) << stored.error().describe();
  EXPECT_EQ(stored->expires_at - stored->created_at, 300);
  EXPECT_GT(stored->created_at, 1'000'000'000);  // the database's clock
  StoredApproval twice = a;
  twice.id = "apr_2";
  EXPECT_FALSE(approvals.insert(twice));
  EXPECT_FALSE(approvals.by_id("globex", "apr_1").value());
  StoredApproval decided = *stored;
  decided.status = "approved";
  decided.decision = "approve";
  StoredApproval foreign = decided;
  foreign.tenant = "globex";
  EXPECT_FALSE(approvals.resolve(foreign).value());
  EXPECT_TRUE(approvals.resolve(decided).value());
  EXPECT_FALSE(approvals.resolve(decided).value());  // no longer pending
  EXPECT_EQ(approvals.by_id("acme", "apr_1").value()->status, "approved");
  ASSERT_TRUE(approvals.grant("acme", "s1", "shell"));
  EXPECT_TRUE(approvals.granted("acme", "s1", "shell").value());
  EXPECT_FALSE(approvals.granted("globex", "s1", "shell").value());
}

// A run's end puts its response on whichever node ends it, possibly after another node's DELETE
// of the session found the run ended: the put is fenced by the run's row, so a response never
// outlives the DELETE. Here the DELETE holds the run's row (deleted, not yet committed) while the
// put arrives: the put waits for it, then finds no run and stores nothing. Without the fence the
// row would be inserted after the DELETE removed the session's responses.
TEST_F(ClusterOps, AResponseWhoseRunsSessionIsBeingForgottenIsNotStored) {
  auto s = store();
  ASSERT_TRUE(s);
  const SharedRun run = run_row("acme", "s2");
  ASSERT_TRUE(s->submit(run, IfBusy::Enqueue));
  auto responses = PgResponseStore::open(options_, 4);
  ASSERT_TRUE(responses) << responses.error().describe();
  ResponseStore& r = **responses;
  // The fence keeps its tenant: another tenant's run id is no run of acme's.
  const SharedRun theirs = run_row("globex", "s2");
  ASSERT_TRUE(s->submit(theirs, IfBusy::Enqueue));
  ASSERT_TRUE(r.put({"resp_x", "acme", "s2", Json{{"v", 0}}, Json::array(), theirs.id}));
  EXPECT_FALSE(r.get("acme", "resp_x").value());

  // The calls a run stopped on are parked under the same fence, and go with their session.
  auto parked = PgParkedStore::open(options_, std::chrono::seconds(60));
  ASSERT_TRUE(parked) << parked.error().describe();
  ASSERT_TRUE((*parked)->park("acme", "s2", run.id, {"call_0"}));
  EXPECT_EQ((*parked)->run_for("acme", "s2", "call_0").value(), run.id);
  ASSERT_TRUE((*parked)->delete_session("acme", "s2"));
  EXPECT_FALSE((*parked)->run_for("acme", "s2", "call_0").value());

  auto forget = pg::Connection::open(options_);
  ASSERT_TRUE(forget) << forget.error().describe();
  ASSERT_TRUE((*forget)->exec("BEGIN"));
  ASSERT_TRUE((*forget)->exec("DELETE FROM serve_runs WHERE tenant = 'acme' AND session = 's2'"));
  std::thread put([&] {
    EXPECT_TRUE(r.put({"resp_" + run.id, "acme", "s2", Json{{"v", 1}}, Json::array(), run.id}));
  });
  // The put's batch waits on the run's row, held by the uncommitted DELETE.
  EXPECT_TRUE(eventually([&] {
    return value(
               "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
               "datname = current_database() AND query LIKE 'INSERT INTO serve_responses%'") == "1";
  }));
  ASSERT_TRUE(
      (*forget)->exec("DELETE FROM serve_responses WHERE tenant = 'acme' AND session = 's2'"));
  ASSERT_TRUE((*forget)->exec("COMMIT"));
  put.join();
  EXPECT_FALSE(r.get("acme", "resp_" + run.id).value()) << "the response outlived its session";
  EXPECT_EQ(value("SELECT count(*) FROM serve_responses"), "0");
  ASSERT_TRUE((*parked)->park("acme", "s2", run.id, {"call_1"}));
  EXPECT_FALSE((*parked)->run_for("acme", "s2", "call_1").value()) << "parked on a forgotten run";
}

TEST_F(ClusterOps, ACancelledQueuedRunTellsItsEndToo) {
  auto s = store();
  ASSERT_TRUE(s);
  ClusterHooks hooks;
  add_webhook_hooks(
      hooks, Webhooks::Sink{
                 [](const std::string&) { return std::vector<std::string>{"http://x/h"}; }, [] {}});
  s->set_hooks(std::move(hooks));
  const SharedRun run = run_row("acme", "s2");
  ASSERT_TRUE(s->submit(run, IfBusy::Enqueue));
  auto c = s->cancel("acme", run.id);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, ClusterStore::CancelOutcome::CancelledQueued);
  EXPECT_EQ(value("SELECT type FROM serve_webhook_outbox"), "run.completed");
}

// N nodes x M requests at once, at the limit: the database admits exactly the limit.
struct Race {
  int admitted = 0, limited = 0, failed = 0;
};

Race race(std::vector<std::unique_ptr<ClusterStore>>& nodes, int per_node,
          const std::string& tenant) {
  std::mutex mu;
  Race out;
  std::latch go(static_cast<std::ptrdiff_t>(nodes.size()) * per_node);
  std::vector<std::thread> threads;
  for (auto& node : nodes) {
    for (int i = 0; i < per_node; ++i) {
      threads.emplace_back([&, store = node.get(), i] {
        const SharedRun run = [&] {
          std::lock_guard lock(mu);
          return run_row(tenant, "sess-" + std::to_string(i) + "-" +
                                     std::to_string(reinterpret_cast<std::uintptr_t>(store)));
        }();
        go.arrive_and_wait();
        LimitRefusal why;
        auto r = store->submit(run, IfBusy::Enqueue, &why);
        std::lock_guard lock(mu);
        if (!r) {
          ++out.failed;
        } else if (*r == ClusterStore::Admitted::Queued) {
          ++out.admitted;
        } else if (*r == ClusterStore::Admitted::Limited) {
          ++out.limited;
          EXPECT_GE(why.retry_after.count(), 1);
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST_F(ClusterOps, ConcurrentRunsHoldAcrossNodesUnderARace) {
  constexpr int kNodes = 3, kPerNode = 8, kLimit = 5;
  std::vector<std::unique_ptr<ClusterStore>> nodes;
  std::shared_ptr<ClusterLimits> limits;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(store());
    ASSERT_TRUE(nodes.back());
    auto l = ClusterLimits::open(options_, [=](const std::string& tenant) {
      TenantLimit t;
      if (tenant == "acme") t.max_concurrent_runs = kLimit;
      return t;
    });
    ASSERT_TRUE(l);
    limits = *l;
    ClusterHooks hooks;
    ClusterLimits::add_to(hooks, *l);
    nodes.back()->set_hooks(std::move(hooks));
  }
  const Race r = race(nodes, kPerNode, "acme");
  std::printf("concurrent runs: limit %d, %d nodes x %d requests: %d admitted, %d refused\n",
              kLimit, kNodes, kPerNode, r.admitted, r.limited);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.admitted, kLimit) << "overshoot " << r.admitted - kLimit;
  EXPECT_EQ(r.limited, kNodes * kPerNode - kLimit);
  auto usage = limits->usage("acme");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->active_runs, static_cast<std::uint32_t>(kLimit));
  // Another tenant has no limit and is not held by acme's.
  const Race other = race(nodes, 2, "globex");
  EXPECT_EQ(other.admitted, kNodes * 2);
  // A run that ends frees its place, on whichever node it ran.
  auto claimed = nodes[1]->claim("node-b", std::chrono::seconds(30));
  ASSERT_TRUE(claimed && *claimed);
  ASSERT_TRUE(nodes[1]->finish((*claimed)->run.id, "node-b", (*claimed)->run.attempt,
                               RunStatus::Done, Json::object(), {}));
  const Race again = race(nodes, 2, (*claimed)->run.tenant);
  EXPECT_EQ(again.admitted, (*claimed)->run.tenant == "acme" ? 1 : kNodes * 2);
}

TEST_F(ClusterOps, DailyTokensAndCostAreCountedOnceForAllNodes) {
  constexpr int kNodes = 3, kPerNode = 6, kConcurrent = 4;
  constexpr std::uint64_t kTokens = 100;
  std::vector<std::unique_ptr<ClusterStore>> nodes;
  std::vector<std::shared_ptr<ClusterLimits>> limits;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(store());
    ASSERT_TRUE(nodes.back());
    auto l = ClusterLimits::open(options_, [=](const std::string&) {
      TenantLimit t;
      t.max_concurrent_runs = kConcurrent;
      t.tokens_per_day = kTokens;
      t.cost_per_day_usd = 1.0;
      return t;
    });
    ASSERT_TRUE(l);
    limits.push_back(*l);
    ClusterHooks hooks;
    ClusterLimits::add_to(hooks, *l);
    nodes.back()->set_hooks(std::move(hooks));
  }
  // Usage reported by different nodes adds up in one place.
  ASSERT_TRUE(limits[0]->record("acme", 60, 0.25));
  ASSERT_TRUE(limits[2]->record("acme", 39, 0.25));
  auto usage = limits[1]->usage("acme");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->tokens_today, 99u);
  EXPECT_DOUBLE_EQ(usage->cost_today_usd, 0.5);
  // One token left: the race admits no more runs than may run at once; each then uses 10
  // tokens, so the day ends at most kConcurrent x 10 - 1 over (known only at the runs' ends).
  const Race r = race(nodes, kPerNode, "acme");
  EXPECT_EQ(r.admitted, kConcurrent);
  for (int i = 0; i < r.admitted; ++i) ASSERT_TRUE(limits[i % kNodes]->record("acme", 10, 0.01));
  usage = limits[0]->usage("acme");
  ASSERT_TRUE(usage);
  std::printf(
      "tokens/day: limit %llu, %d nodes x %d requests with 1 token left: %d admitted, "
      "day ended at %llu (overshoot %llu = admitted runs' tokens - 1)\n",
      static_cast<unsigned long long>(kTokens), kNodes, kPerNode, r.admitted,
      static_cast<unsigned long long>(usage->tokens_today),
      static_cast<unsigned long long>(usage->tokens_today - kTokens));
  EXPECT_EQ(usage->tokens_today, 99u + 10u * kConcurrent);
  // Used up: every node refuses, whatever it counted itself.
  ASSERT_TRUE(db_.exec("UPDATE serve_runs SET status = 'done'"));
  const Race after = race(nodes, kPerNode, "acme");
  EXPECT_EQ(after.admitted, 0);
  EXPECT_EQ(after.limited, kNodes * kPerNode);
  // The cost budget alone refuses too; bad prices never free budget.
  ASSERT_TRUE(limits[0]->record("beta", 0, 2.0));
  ASSERT_TRUE(limits[0]->record("beta", 0, -5.0));
  ASSERT_TRUE(limits[0]->record("beta", 0, std::nan("")));
  LimitRefusal why;
  auto refused = nodes[0]->submit(run_row("beta", "b"), IfBusy::Enqueue, &why);
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused, ClusterStore::Admitted::Limited);
  EXPECT_NE(why.message.find("budget"), std::string::npos) << why.message;
}

// A node that cannot reach its workspace roots refuses to start, naming the directory; a
// reachable one is probed without leaving a file behind.
TEST(WorkspaceProbe, RefusesAnUnreachableRootAndLeavesNothingInAGoodOne) {
  kernex::testing::TempDir dir;
  ServeConfig config;
  config.workspaces_root = dir.path() / "shared" / "ws";
  ASSERT_TRUE(probe_workspaces(config, dir.path(), true));
  EXPECT_TRUE(std::filesystem::is_empty(config.workspaces_root));
  { std::ofstream(dir.path() / "plain") << "x"; }
  config.workspaces_root = dir.path() / "plain" / "ws";  // under a file: never reachable
  auto refused = probe_workspaces(config, dir.path(), true);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find((dir.path() / "plain" / "ws").string()), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("refusing to start"), std::string::npos);
  config.workspaces_root = dir.path() / "plain";  // a file, not a directory
  EXPECT_FALSE(probe_workspaces(config, dir.path(), false));
  config.workspaces_root = dir.path() / "shared" / "ws";
  config.tenant_workspaces["acme"] = dir.path() / "plain" / "acme";
  refused = probe_workspaces(config, dir.path(), true);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("acme"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace kernex::server
