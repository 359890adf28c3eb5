// pg::Writer, PostgreSQL's group commit: the writes of concurrent callers share transactions, a
// failing write fails alone, a connection killed mid-batch fails every write of that batch and the
// next batch reconnects. Real PostgreSQL (pg_test_db.hpp); skips, saying why, without one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <future>
#include <thread>

#include "kernex/pg/writer.hpp"
#include "pg_test_db.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using testing::PgTestDb;

class PgWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    if (db.dsn().empty()) GTEST_SKIP() << PgTestDb::skip_reason();
    ASSERT_TRUE(db.exec("CREATE TABLE a (n int)"));
    ASSERT_TRUE(db.exec("CREATE TABLE b (tenant text NOT NULL, n int PRIMARY KEY)"));
    pg::Options o;
    o.dsn = db.dsn();
    o.application_name = "kx writer test";
    o.what = "writer test";
    pool = std::make_unique<pg::Pool>(o, 2);
    GroupCommit::Options g = pg::Writer::defaults();
    g.direct = false;  // whatever the environment says: this suite tests the batches
    writer = std::make_unique<pg::Writer>(*pool, g);
  }
  static pg::Write insert_b(const std::string& tenant, int n) {
    return {{{"INSERT INTO b (tenant, n) VALUES ($1, $2::int)", {tenant, n}}}, {}};
  }
  std::string value(const std::string& sql) {
    std::string v;
    EXPECT_TRUE(db.exec(sql, &v));
    return v;
  }
  // A connection of the test's own that holds `lock` until release().
  struct Locker {
    PGconn* c;
    Locker(const std::string& dsn, const std::string& table) : c(PQconnectdb(dsn.c_str())) {
      PQclear(PQexec(c, "BEGIN"));
      PGresult* r = PQexec(c, ("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE").c_str());
      EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(c);
      PQclear(r);
    }
    void release() {
      if (c) PQclear(PQexec(c, "ROLLBACK")), PQfinish(c);
      c = nullptr;
    }
    ~Locker() { release(); }
  };
  // Waits until the writer's connection waits on a lock (it sent its batch): no sleep stands in.
  void await_blocked_writer() {
    for (int i = 0; i < 10000; ++i) {
      if (value("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kx writer test' "
                "AND wait_event_type = 'Lock'") == "1")
        return;
      std::this_thread::yield();
    }
    FAIL() << "the writer never blocked on the lock";
  }
  // Queues `n` writes behind a batch held on a lock of table a, so they make one batch.
  std::vector<std::future<Result<void>>> queue_behind_a(const std::vector<pg::Write>& writes,
                                                        Locker& on_a) {
    std::vector<std::future<Result<void>>> out;
    auto first = std::async(std::launch::async, [&] {
      return writer->write({{{"INSERT INTO a (n) VALUES (1)", {}}}, {}});
    });
    await_blocked_writer();
    for (const auto& w : writes) {
      auto p = std::make_shared<std::promise<Result<void>>>();
      out.push_back(p->get_future());
      writer->submit(w, [p](const Result<void>& r) { p->set_value(r); });
    }
    on_a.release();
    EXPECT_TRUE(first.get());
    return out;
  }

  PgTestDb db;
  std::unique_ptr<pg::Pool> pool;
  std::unique_ptr<pg::Writer> writer;
};

// Many threads writing at once: every row lands, in fewer transactions than writes (rows of one
// transaction share its xmin), and the writer's count of commits is the server's.
TEST_F(PgWriter, ConcurrentWritersShareTransactions) {
  constexpr int kThreads = 16, kEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        if (!writer->write(insert_b("t" + std::to_string(t % 2), t * kEach + i))) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(value("SELECT count(*) FROM b"), std::to_string(kThreads * kEach));
  const auto xacts = std::stoul(value("SELECT count(DISTINCT xmin::text) FROM b"));
  const auto s = writer->stats();
  EXPECT_EQ(s.writes, static_cast<std::uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.transactions, xacts);
  EXPECT_LT(xacts, static_cast<std::size_t>(kThreads * kEach));
  EXPECT_LT(s.round_trips, static_cast<std::uint64_t>(kThreads * kEach));
}

// One batch holding a write that breaks a constraint, one whose check refuses and one whose check
// undoes it as done already: each answers for itself and the others commit.
TEST_F(PgWriter, AFailingWriteDoesNotLoseTheOthersOfItsBatch) {
  ASSERT_TRUE(db.exec("INSERT INTO b VALUES ('t0', 100)"));
  std::vector<pg::Write> writes;
  for (int i = 0; i < 6; ++i) writes.push_back(insert_b("t0", i));
  writes.insert(writes.begin() + 2, insert_b("t0", 100));  // duplicate key
  pg::Write refused = insert_b("t0", 200);
  refused.check = [](const std::vector<pg::Rows>&) -> Result<bool> {
    return fail(ErrorCode::Usage, "refused by its check");
  };
  writes.insert(writes.begin() + 4, refused);
  pg::Write done_before = insert_b("t0", 300);
  done_before.check = [](const std::vector<pg::Rows>& rows) -> Result<bool> {
    return rows[0].affected() == 0;  // false: undone, but a success
  };
  writes.push_back(done_before);
  Locker on_a(db.dsn(), "a");
  auto results = queue_behind_a(writes, on_a);
  std::vector<Result<void>> got;
  for (auto& f : results) got.push_back(f.get());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (i == 2) {
      ASSERT_FALSE(got[i]);
      EXPECT_EQ(got[i].error().code, ErrorCode::Memory);
      EXPECT_THAT(got[i].error().describe(), HasSubstr("23505"));
    } else if (i == 4) {
      ASSERT_FALSE(got[i]);
      EXPECT_THAT(got[i].error().describe(), HasSubstr("refused by its check"));
    } else {
      EXPECT_TRUE(got[i]) << i << ": " << got[i].error().describe();
    }
  }
  EXPECT_EQ(value("SELECT string_agg(n::text, ',' ORDER BY n) FROM b"), "0,1,2,3,4,5,100");
  const auto s = writer->stats();
  EXPECT_EQ(s.batches, 2u);  // the one on table a, then all of these
  EXPECT_EQ(s.failed, 2u);   // the duplicate and the refused (the undone one succeeded)
  // The batch's rows committed together.
  EXPECT_EQ(value("SELECT count(DISTINCT xmin::text) FROM b WHERE n < 100"), "1");
}

// The writer's connection killed while its batch waits on a lock: every write of the batch
// fails as Io (whether it committed is unknown), nothing of it is in the table, and the next
// write reconnects.
TEST_F(PgWriter, AConnectionKilledMidBatchFailsEveryWriteAndTheNextReconnects) {
  std::vector<pg::Write> writes;
  for (int i = 0; i < 5; ++i) writes.push_back(insert_b("t0", i));
  Locker on_b(db.dsn(), "b");
  Locker on_a(db.dsn(), "a");
  auto results = queue_behind_a(writes, on_a);
  await_blocked_writer();  // the batch of b's writes, held by on_b
  ASSERT_TRUE(
      db.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
              "application_name = 'kx writer test'"));
  for (auto& f : results) {
    auto r = f.get();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::Io) << r.error().describe();
  }
  on_b.release();
  EXPECT_EQ(value("SELECT count(*) FROM b"), "0");
  auto again = writer->write(insert_b("t0", 7));
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(value("SELECT count(*) FROM b"), "1");
}

// A connection the server dropped while it sat idle is replaced before the batch is sent: the
// write succeeds, once.
TEST_F(PgWriter, AConnectionDroppedWhileIdleIsReplacedBeforeSending) {
  ASSERT_TRUE(writer->write(insert_b("t0", 1)));
  // (pid, 5000): returns once the backend is gone.
  ASSERT_TRUE(
      db.exec("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE "
              "application_name = 'kx writer test'"));
  auto r = writer->write(insert_b("t0", 2));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(value("SELECT count(*) FROM b"), "2");
}

// A parameter PostgreSQL text cannot hold fails its write alone, before it joins a batch.
TEST_F(PgWriter, ANulByteFailsOnlyItsWrite) {
  auto r =
      writer->write({{{"INSERT INTO b (tenant, n) VALUES ($1, 1)", {std::string("a\0b", 3)}}}, {}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Parse);
  EXPECT_TRUE(writer->write(insert_b("t0", 2)));
  EXPECT_EQ(value("SELECT count(*) FROM b"), "1");
}

// KERNEX_GROUP_COMMIT=off's path: one transaction per write on pooled connections, same answers.
TEST_F(PgWriter, DirectModeCommitsEachWriteAlone) {
  GroupCommit::Options g = pg::Writer::defaults();
  g.direct = true;
  pg::Writer direct(*pool, g);
  ASSERT_TRUE(direct.write(insert_b("t0", 1)));
  auto dup = direct.write(insert_b("t0", 1));
  ASSERT_FALSE(dup);
  EXPECT_THAT(dup.error().describe(), HasSubstr("23505"));
  pg::Write two{{{"INSERT INTO b (tenant, n) VALUES ('t0', 2)", {}},
                 {"INSERT INTO b (tenant, n) VALUES ('t0', 3)", {}}},
                [](const std::vector<pg::Rows>&) -> Result<bool> { return false; }};
  ASSERT_TRUE(direct.write(two));  // undone by its check
  EXPECT_EQ(value("SELECT count(*) FROM b"), "1");
  EXPECT_EQ(direct.stats().transactions, 1u);
}

}  // namespace
}  // namespace kernex
