// Approval webhook events are one per approval and type: a run resumed on another node (or after
// a restart) announces its approval again, and the outbox, in serve.db or in PostgreSQL, keeps one
// row per endpoint of it, so each event is delivered once. Run events stay one per run end.
#include <gtest/gtest.h>

#include <map>

#include "cluster_outbox.hpp"
#include "pg_test_db.hpp"
#include "sqlite_db.hpp"
#include "temp_dir.hpp"
#include "webhook_outbox.hpp"

namespace kernex::server {
namespace {

const std::vector<std::string> kEndpoints{"http://127.0.0.1:1/a", "http://127.0.0.1:1/b"};

TEST(ServeApprovalEvents, AnApprovalEventHasOneIdPerApprovalAndType) {
  const Json data{{"approval_id", "apr_1"}, {"run_id", "run_1"}};
  const auto asked = make_webhook_event("approval.requested", data);
  EXPECT_EQ(make_webhook_event("approval.requested", data).id, asked.id);
  EXPECT_EQ(Json::parse(asked.body)["id"], asked.id);
  EXPECT_EQ(asked.stream, "run_1");
  EXPECT_NE(make_webhook_event("approval.resolved", data).id, asked.id);
  EXPECT_NE(make_webhook_event("approval.requested", {{"approval_id", "apr_2"}}).id, asked.id);
  // Without an approval id (or for a run's end) every event is new.
  const Json run{{"run_id", "run_1"}};
  EXPECT_NE(make_webhook_event("run.completed", run).id,
            make_webhook_event("run.completed", run).id);
  EXPECT_NE(make_webhook_event("approval.requested", run).id,
            make_webhook_event("approval.requested", run).id);
  EXPECT_NE(make_webhook_event("run.completed", data).id,
            make_webhook_event("run.completed", data).id);
}

void expect_one_row_per_endpoint(OutboxStore& outbox) {
  const Json data{{"approval_id", "apr_1"}, {"run_id", "run_1"}};
  for (int i = 0; i < 3; ++i) {
    auto put = outbox.put(make_webhook_event("approval.requested", data), kEndpoints, "alpha");
    ASSERT_TRUE(put) << put.error().describe();
  }
  ASSERT_TRUE(outbox.put(make_webhook_event("approval.resolved", data), kEndpoints, "alpha"));
  ASSERT_TRUE(outbox.put(make_webhook_event("run.completed", data), kEndpoints, "alpha"));
  ASSERT_TRUE(outbox.put(make_webhook_event("run.completed", data), kEndpoints, "alpha"));
  auto rows = outbox.list(false, 100);
  ASSERT_TRUE(rows) << rows.error().describe();
  std::map<std::string, int> per_type;
  for (const auto& r : *rows) ++per_type[r.type];
  EXPECT_EQ(per_type["approval.requested"], 2);
  EXPECT_EQ(per_type["approval.resolved"], 2);
  EXPECT_EQ(per_type["run.completed"], 4);
}

TEST(ServeApprovalEvents, SqliteOutboxKeepsOneRowPerEndpoint) {
  testing::TempDir dir;
  const auto file = dir.path() / "serve.db";
  auto made = open_serve_db(file, {});
  ASSERT_TRUE(made) << made.error().describe();
  sqlite3_close(*made);
  auto outbox = WebhookOutbox::open(file);
  ASSERT_TRUE(outbox) << outbox.error().describe();
  expect_one_row_per_endpoint(**outbox);
}

TEST(ServeApprovalEvents, PostgresOutboxKeepsOneRowPerEndpoint) {
  testing::PgTestDb pg;
  if (pg.dsn().empty()) GTEST_SKIP() << testing::PgTestDb::skip_reason();
  pg::Options options;
  options.dsn = pg.dsn();
  auto outbox = ClusterOutbox::open(options);
  ASSERT_TRUE(outbox) << outbox.error().describe();
  expect_one_row_per_endpoint(**outbox);
}

}  // namespace
}  // namespace kernex::server
