// Outbound webhooks of `kernex serve` (server/src/webhook_*): the outbox in serve.db written with
// a run's end, signed deliveries to a loopback receiver that recomputes the HMAC, retries after
// 500s and refused connections, a receiver down then up, a restart, ordering per run, giving up
// after the max age and `kernex serve webhooks list|retry`.
#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include "kernex/server/webhooks.hpp"
#include "run_store.hpp"
#include "temp_dir.hpp"
#include "webhook_outbox.hpp"
#include "webhook_receiver.hpp"
#include "webhook_sender.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using test::WebhookReceiver;

constexpr milliseconds kWait{20'000};

// Polls a condition the code under test gives no signal for (rows of the outbox), bounded.
bool eventually(const std::function<bool()>& pred, milliseconds limit = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

Json parse(const std::string& text) { return Json::parse(text); }

class WebhooksTest : public ::testing::Test {
 protected:
  void SetUp() override { reopen_store(); }

  void reopen_store() {
    store_.reset();
    auto s = RunStore::open(db());
    ASSERT_TRUE(s) << s.error().describe();
    store_ = std::move(*s);
  }

  fs::path db() const { return dir_ / "serve.db"; }

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

  std::unique_ptr<Webhooks> webhooks(std::vector<WebhookEndpointConfig> endpoints) {
    auto w = Webhooks::create(std::move(endpoints), db());
    EXPECT_TRUE(w) << w.error().describe();
    if (!w) return nullptr;
    store_->on_finish((*w)->finish_hook());
    return std::move(*w);
  }

  // A run stored as acknowledged; finish() ends it.
  std::string new_run() {
    static int n = 0;
    RunState run("run_t" + std::to_string(++n) + "_" + std::to_string(::getpid()), "acme", "chat-1",
                 "2026-01-01 00:00:00");
    EXPECT_TRUE(store_->insert(run, Json{{"message", "hi"}}));
    return run.id;
  }
  void finish(const std::string& id, RunStatus status = RunStatus::Done) {
    const Json result = status == RunStatus::Failed
                            ? Json{{"run_id", id}, {"code", "Provider"}, {"message", "down"}}
                            : Json{{"run_id", id}, {"outcome", "done"}, {"text", "hello"}};
    auto r = store_->finish(id, status, result, {});
    ASSERT_TRUE(r) << r.error().describe();
    store_->announce_end();  // as RunManager does once the run has ended in memory
  }

  std::vector<OutboxRow> rows() {
    auto outbox = WebhookOutbox::open(db());
    if (!outbox) return {};
    auto listed = (*outbox)->list(false, 10'000);
    return listed ? *listed : std::vector<OutboxRow>{};
  }
  // `count` rows, all pending, and `tried` of them (the first of each run: the others wait
  // behind it) attempted at least `n` times (the receiver is down).
  bool attempted(std::size_t count, std::size_t tried, std::int64_t n) {
    auto r = rows();
    if (r.size() != count) return false;
    std::size_t seen = 0;
    for (const auto& row : r) {
      if (row.status != "pending") return false;
      seen += row.attempts >= n;
    }
    return seen == tried;
  }

  // `kernex serve webhooks list` and `retry` as the CLI runs them (cli/ parses the arguments).
  Result<std::string> list(WebhookListOptions options) {
    std::ostringstream o;
    KERNEX_RETURN_IF_ERROR(webhooks_list(WebhookOutboxPlace{db(), std::nullopt}, options, o));
    return o.str();
  }
  Result<std::string> retry(const WebhookRetry& which) {
    std::ostringstream o, e;
    KERNEX_RETURN_IF_ERROR(webhooks_retry(WebhookOutboxPlace{db(), std::nullopt}, which, o, e));
    return o.str();
  }

  testing::TempDir dir_;
  std::unique_ptr<RunStore> store_;
};

TEST(WebhookSignature, IsTheHmacOfTimestampDotBody) {
  const std::string body = R"({"type":"run.completed","id":"evt_1"})";
  EXPECT_EQ(webhook_signature("s3cret", 1700000000, body),
            "t=1700000000,v1=" + WebhookReceiver::sign("s3cret", "1700000000", body));
  EXPECT_NE(webhook_signature("other", 1700000000, body),
            webhook_signature("s3cret", 1700000000, body));
}

TEST_F(WebhooksTest, RunEndsAreSignedWithAFreshTimestamp) {
  WebhookReceiver receiver("whsec-test");
  receiver.up();
  auto hooks = webhooks({endpoint(receiver.url())});
  ASSERT_TRUE(hooks);
  hooks->start();
  const std::string done = new_run(), failed = new_run();
  finish(done);
  finish(failed, RunStatus::Failed);
  ASSERT_TRUE(receiver.wait_distinct(2, kWait));
  auto got = receiver.accepted();
  ASSERT_EQ(got.size(), 2u);
  for (const auto& d : got) {
    EXPECT_TRUE(d.signature_valid);
    const Json body = parse(d.body);
    EXPECT_EQ(body["id"], d.event_id);
    EXPECT_EQ(body["type"], d.type);
    EXPECT_TRUE(body["created_at"].is_string());
    EXPECT_EQ(body["data"]["tenant"], "acme");
    EXPECT_EQ(body["data"]["session_id"], "chat-1");
    if (body["data"]["run_id"] == done) {
      EXPECT_EQ(body["type"], "run.completed");
      EXPECT_EQ(body["data"]["outcome"], "done");
      EXPECT_EQ(body["data"]["result"]["text"], "hello");
    } else {
      EXPECT_EQ(body["data"]["run_id"], failed);
      EXPECT_EQ(body["type"], "run.failed");
      EXPECT_EQ(body["data"]["error"]["code"], "Provider");
    }
  }
  // A receiver holding another secret, or checking a stale t, rejects it.
  WebhookReceiver wrong("not-the-secret");
  const std::string t = std::to_string(std::time(nullptr));
  EXPECT_FALSE(wrong.valid("t=" + t + ",v1=" + WebhookReceiver::sign("whsec-test", t, "{}"), "{}"));
  EXPECT_FALSE(
      receiver.valid("t=1000,v1=" + WebhookReceiver::sign("whsec-test", "1000", "{}"), "{}"));
}

TEST_F(WebhooksTest, OnlySubscribedEventsAreQueued) {
  WebhookReceiver receiver("whsec-test");
  receiver.up();
  auto e = endpoint(receiver.url());
  e.events = {"run.failed"};
  auto hooks = webhooks({e});
  ASSERT_TRUE(hooks);
  finish(new_run());
  auto id = hooks->publish("approval.requested", "acme", {{"run_id", "r"}});
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, "");
  EXPECT_TRUE(rows().empty());
  EXPECT_FALSE(hooks->publish("run.exploded", "acme", Json::object()));
}

TEST_F(WebhooksTest, RetriesAfter500sAndRefusedConnections) {
  WebhookReceiver receiver("whsec-test");
  receiver.set_policy([](const auto&, int seen) { return seen < 3 ? 500 : 200; });
  receiver.up();
  auto hooks = webhooks({endpoint(receiver.url())});
  ASSERT_TRUE(hooks);
  hooks->start();
  ASSERT_TRUE(hooks->publish("approval.requested", "acme", {{"run_id", "r1"}}));
  ASSERT_TRUE(receiver.wait_distinct(1, kWait));
  EXPECT_EQ(receiver.requests(), 4u);
  ASSERT_TRUE(eventually([&] { return rows().at(0).status == "delivered"; }));
  EXPECT_EQ(rows()[0].attempts, 4);

  receiver.down();
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(hooks->publish("approval.resolved", "acme", {{"run_id", "q" + std::to_string(i)}}));
  ASSERT_TRUE(eventually([&] {
    auto r = rows();
    std::size_t refused = 0;
    for (const auto& row : r) refused += row.attempts >= 2 && row.status == "pending";
    return refused == 5;
  }));
  EXPECT_NE(rows()[0].last_error.find("127.0.0.1"), std::string::npos) << rows()[0].last_error;
  receiver.up();
  ASSERT_TRUE(receiver.wait_distinct(6, kWait));
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
}

TEST_F(WebhooksTest, ReceiverDownThenUpGetsEveryEventOnce) {
  WebhookReceiver receiver("whsec-test");
  receiver.up();
  receiver.down();  // a port of its own, refusing connections
  auto hooks = webhooks({endpoint(receiver.url())});
  ASSERT_TRUE(hooks);
  hooks->start();
  constexpr int kRuns = 25;
  for (int i = 0; i < kRuns; ++i) {
    const std::string run = new_run();
    ASSERT_TRUE(hooks->publish("approval.requested", "acme", {{"run_id", run}}));
    finish(run, i % 5 == 0 ? RunStatus::Failed : RunStatus::Done);
  }
  ASSERT_TRUE(eventually([&] { return attempted(2 * kRuns, kRuns, 1); }));
  receiver.up();
  ASSERT_TRUE(receiver.wait_distinct(2 * kRuns, kWait));
  EXPECT_EQ(receiver.duplicates(), 0u);
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
  ASSERT_TRUE(eventually([&] {
    for (const auto& row : rows()) {
      if (row.status != "delivered") return false;
    }
    return true;
  }));
}

TEST_F(WebhooksTest, ARestartLosesNone) {
  WebhookReceiver receiver("whsec-test");
  receiver.up();
  receiver.down();
  auto first = webhooks({endpoint(receiver.url())});
  ASSERT_TRUE(first);
  first->start();
  for (int i = 0; i < 10; ++i) finish(new_run());
  ASSERT_TRUE(eventually([&] { return attempted(10, 10, 1); }));
  first.reset();  // the server stops with every event pending
  reopen_store();
  auto second = webhooks({endpoint(receiver.url())});
  ASSERT_TRUE(second);
  for (int i = 0; i < 5; ++i) finish(new_run());  // ended while nothing was sending
  receiver.up();
  second->start();
  ASSERT_TRUE(receiver.wait_distinct(15, kWait));
  EXPECT_EQ(receiver.duplicates(), 0u);
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
}

TEST_F(WebhooksTest, EventsOfOneRunArriveInOrder) {
  WebhookReceiver receiver("whsec-test");
  // Every event fails its first attempt, so each would overtake the others if nothing held it.
  receiver.set_policy([](const auto&, int seen) { return seen == 0 ? 503 : 200; });
  receiver.up();
  auto hooks = webhooks({endpoint(receiver.url())});
  ASSERT_TRUE(hooks);
  hooks->start();
  std::vector<std::string> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(new_run());
  for (const auto& r : runs)
    ASSERT_TRUE(hooks->publish("approval.requested", "acme", {{"run_id", r}}));
  for (const auto& r : runs)
    ASSERT_TRUE(hooks->publish("approval.resolved", "acme", {{"run_id", r}}));
  for (const auto& r : runs) finish(r);
  ASSERT_TRUE(receiver.wait_distinct(15, kWait));
  std::map<std::string, std::vector<std::string>> per_run;
  for (const auto& d : receiver.accepted())
    per_run[parse(d.body)["data"]["run_id"].get<std::string>()].push_back(d.type);
  for (const auto& r : runs) {
    EXPECT_EQ(per_run[r], (std::vector<std::string>{"approval.requested", "approval.resolved",
                                                    "run.completed"}))
        << r;
  }
}

TEST_F(WebhooksTest, GivesUpAfterMaxAgeAndRetryCommandSendsAgain) {
  WebhookReceiver receiver("whsec-test");
  receiver.set_policy([](const auto&, int) { return 500; });
  receiver.up();
  auto e = endpoint(receiver.url());
  e.max_age = std::chrono::seconds(1);
  auto hooks = webhooks({e});
  ASSERT_TRUE(hooks);
  hooks->start();
  const std::string run = new_run();
  finish(run);
  ASSERT_TRUE(eventually([&] {
    auto r = rows();
    return r.size() == 1 && r[0].status == "failed";
  }));
  const auto attempts = rows()[0].attempts;
  EXPECT_GE(attempts, 2);
  // Nothing more is tried once it failed.
  EXPECT_EQ(receiver.requests(), static_cast<std::size_t>(attempts));

  auto out = list({.failed = true, .json = true});
  ASSERT_TRUE(out) << out.error().describe();
  const Json listed = parse(*out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["status"], "failed");
  EXPECT_EQ(listed[0]["type"], "run.completed");
  EXPECT_EQ(listed[0]["url"], receiver.url());
  EXPECT_EQ(listed[0]["last_error"], "HTTP 500");
  out = list({});
  ASSERT_TRUE(out);
  EXPECT_NE(out->find("\tfailed\trun.completed\t"), std::string::npos) << *out;

  // Nothing named, both named, or an id that is not one: usage errors that change nothing.
  for (const WebhookRetry& bad :
       {WebhookRetry{}, WebhookRetry{{1}, true}, WebhookRetry{{0}, false}}) {
    auto refused = retry(bad);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::Usage);
  }
  EXPECT_EQ(rows()[0].status, "failed");
  receiver.set_policy([](const auto&, int) { return 200; });
  out = retry({{listed[0]["id"].get<std::int64_t>()}, false});
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, "retrying 1 delivery\n");
  ASSERT_TRUE(receiver.wait_distinct(1, kWait));  // picked up from the store, no wake-up
  ASSERT_TRUE(eventually([&] { return rows()[0].status == "delivered"; }));
  out = list({.failed = true, .json = true});
  ASSERT_TRUE(out);
  EXPECT_EQ(parse(*out), Json::array());
  out = retry({{}, true});
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, "retrying 0 deliveries\n");
}

TEST_F(WebhooksTest, SecretComesFromTheEnvironment) {
  auto e = endpoint("http://127.0.0.1:9/hook");
  e.secret.clear();
  e.secret_env = "KX_TEST_HOOK_SECRET";
  auto none = Webhooks::create({e}, db(), [](const std::string&) { return std::nullopt; });
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::Config);
  EXPECT_NE(none.error().message.find("KX_TEST_HOOK_SECRET"), std::string::npos);

  WebhookReceiver receiver("from-env");
  receiver.up();
  e.url = receiver.url();
  auto hooks = Webhooks::create({e}, db(), [](const std::string& name) {
    return name == "KX_TEST_HOOK_SECRET" ? std::optional<std::string>("from-env") : std::nullopt;
  });
  ASSERT_TRUE(hooks) << hooks.error().describe();
  (*hooks)->start();
  ASSERT_TRUE((*hooks)->publish("approval.resolved", "acme", {{"run_id", "r"}}));
  ASSERT_TRUE(receiver.wait_distinct(1, kWait));
  EXPECT_EQ(receiver.invalid_signatures(), 0u);
}

TEST_F(WebhooksTest, DeliveredRowsArePrunedPendingOnesKept) {
  auto outbox = WebhookOutbox::open(db());
  ASSERT_TRUE(outbox);
  const auto a = make_webhook_event("run.completed", {{"run_id", "r1"}});
  const auto b = make_webhook_event("run.completed", {{"run_id", "r2"}});
  ASSERT_TRUE((*outbox)->enqueue(a, {"http://127.0.0.1:9/a"}));
  ASSERT_TRUE((*outbox)->enqueue(b, {"http://127.0.0.1:9/a"}));
  auto due = (*outbox)->due("http://127.0.0.1:9/a", unix_ms_now(), 10);
  ASSERT_TRUE(due);
  ASSERT_EQ(due->size(), 2u);
  ASSERT_TRUE((*outbox)->delivered(due->at(0).id, unix_ms_now() - 1000));
  auto pruned = (*outbox)->prune_delivered(unix_ms_now());
  ASSERT_TRUE(pruned);
  EXPECT_EQ(*pruned, 1u);
  ASSERT_EQ(rows().size(), 1u);
  EXPECT_EQ(rows()[0].event_id, b.id);
  EXPECT_EQ(rows()[0].status, "pending");
}

TEST(WebhooksCommand, NoStoreYetListsNothing) {
  testing::TempDir dir;
  std::ostringstream out;
  ASSERT_TRUE(
      webhooks_list(WebhookOutboxPlace{dir / "serve.db", std::nullopt}, {.json = true}, out));
  EXPECT_EQ(out.str(), "[]\n");
  EXPECT_FALSE(fs::exists(dir / "serve.db"));
}

}  // namespace
}  // namespace kernex::server
