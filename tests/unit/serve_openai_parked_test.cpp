// The index of runs parked on the client's tool calls (server/src/openai_parked.hpp), in serve.db
// and in PostgreSQL: a row is found only under its tenant and session, not after its expiry, still
// after the store is opened again (a restart) or from another node's store, and a call id parked
// again names the newest run; expired rows go when the server prunes, not on every park; a
// forgotten session's rows go with it.
#include <gtest/gtest.h>

#include <functional>

#include "cluster_store.hpp"
#include "kernex/pg/connection.hpp"
#include "openai_parked.hpp"
#include "pg_test_db.hpp"
#include "temp_dir.hpp"

namespace kernex::server {
namespace {

using std::chrono::seconds;
using Open = std::function<std::unique_ptr<ParkedStore>(seconds ttl)>;

std::optional<std::string> found(ParkedStore& s, const std::string& tenant,
                                 const std::string& session, const std::string& call) {
  auto r = s.run_for(tenant, session, call);
  EXPECT_TRUE(r) << r.error().describe();
  return r ? *r : std::nullopt;
}

void expect_scoped_durable_and_expiring(const Open& open) {
  {
    auto s = open(seconds(3600));
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->park("alpha", "s1", "run_1", {"call_a", "call_b"}));
    EXPECT_EQ(found(*s, "alpha", "s1", "call_a"), "run_1");
    EXPECT_EQ(found(*s, "alpha", "s1", "call_b"), "run_1");
    // A query that forgets (or changes) the tenant or the session finds nothing.
    EXPECT_EQ(found(*s, "beta", "s1", "call_a"), std::nullopt);
    EXPECT_EQ(found(*s, "", "s1", "call_a"), std::nullopt);
    EXPECT_EQ(found(*s, "alpha", "s2", "call_a"), std::nullopt);
    EXPECT_EQ(found(*s, "alpha", "", "call_a"), std::nullopt);
    EXPECT_EQ(found(*s, "alpha", "s1", "call_c"), std::nullopt);
    // Tricky ids are data, not SQL.
    ASSERT_TRUE(s->park("alpha", "s1", "run_2", {"x' OR '1'='1", "call_b"}));
    EXPECT_EQ(found(*s, "alpha", "s1", "call_b"), "run_2") << "the newest run wins";
    EXPECT_EQ(found(*s, "alpha", "s1", "x' OR '1'='1"), "run_2");
    EXPECT_EQ(found(*s, "alpha", "s1", "' OR ''='"), std::nullopt);
    ASSERT_TRUE(s->park("beta", "s1", "run_3", {}));  // nothing to park
  }
  // Another store on the same data (a restarted server, another node) finds it.
  auto again = open(seconds(3600));
  ASSERT_TRUE(again);
  EXPECT_EQ(found(*again, "alpha", "s1", "call_a"), "run_1");
  // A turn whose time ran out is not resumed.
  auto expiring = open(seconds(0));
  ASSERT_TRUE(expiring);
  ASSERT_TRUE(expiring->park("alpha", "s9", "run_9", {"call_z"}));
  EXPECT_EQ(found(*again, "alpha", "s9", "call_z"), std::nullopt);
  EXPECT_EQ(found(*again, "alpha", "s1", "call_a"), "run_1") << "an unexpired row stays";
  // A park does not prune (the server does, periodically): both expired rows are still there for
  // prune_expired(), which leaves the unexpired ones.
  ASSERT_TRUE(expiring->park("beta", "s9", "run_8", {"call_y"}));
  auto pruned = again->prune_expired();
  ASSERT_TRUE(pruned) << pruned.error().describe();
  EXPECT_EQ(*pruned, 2u);
  pruned = again->prune_expired();
  ASSERT_TRUE(pruned) << pruned.error().describe();
  EXPECT_EQ(*pruned, 0u);
  EXPECT_EQ(found(*again, "alpha", "s1", "call_a"), "run_1");
  EXPECT_EQ(found(*again, "alpha", "s1", "call_b"), "run_2");
  // A forgotten session's rows go; the same session name of another tenant keeps its own.
  ASSERT_TRUE(again->park("beta", "s1", "run_3", {"call_a"}));
  ASSERT_TRUE(again->delete_session("alpha", "s1"));
  EXPECT_EQ(found(*again, "alpha", "s1", "call_a"), std::nullopt);
  EXPECT_EQ(found(*again, "alpha", "s1", "call_b"), std::nullopt);
  EXPECT_EQ(found(*again, "beta", "s1", "call_a"), "run_3");
}

TEST(ServeOpenAiParked, SqliteRowsAreScopedDurableAndExpire) {
  testing::TempDir dir;
  const auto db = dir.path() / "serve.db";
  expect_scoped_durable_and_expiring([&](seconds ttl) -> std::unique_ptr<ParkedStore> {
    auto s = SqliteParkedStore::open(db, ttl);
    EXPECT_TRUE(s) << s.error().describe();
    return s ? std::move(*s) : nullptr;
  });
}

TEST(ServeOpenAiParked, PostgresRowsAreScopedDurableAndExpire) {
  testing::PgTestDb pg;
  if (pg.dsn().empty()) GTEST_SKIP() << testing::PgTestDb::skip_reason();
  pg::Options options;
  options.dsn = pg.dsn();
  // In PostgreSQL a park is fenced by its run's row (a cluster's runs, serve_runs): the runs exist.
  auto runs = ClusterStore::open(options, 1);
  ASSERT_TRUE(runs) << runs.error().describe();
  for (const auto& [tenant, id] : {std::pair{"alpha", "run_1"},
                                   {"alpha", "run_2"},
                                   {"alpha", "run_9"},
                                   {"beta", "run_3"},
                                   {"beta", "run_8"}}) {
    ASSERT_TRUE(pg.exec(std::string("INSERT INTO serve_runs (id, tenant, session, status, "
                                    "created_at, request) VALUES ('") +
                        id + "', '" + tenant + "', 's', 'done', 'now', '{}')"));
  }
  expect_scoped_durable_and_expiring([&](seconds ttl) -> std::unique_ptr<ParkedStore> {
    auto s = PgParkedStore::open(options, ttl);
    EXPECT_TRUE(s) << s.error().describe();
    return s ? std::move(*s) : nullptr;
  });
}

}  // namespace
}  // namespace kernex::server
