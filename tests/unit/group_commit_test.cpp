// GroupCommit on a real SQLite file: every write from many threads is committed and acknowledged
// only once its batch is; a failing item fails alone; kill -9 in the middle of a burst loses
// nothing that was acknowledged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernex/group_commit.hpp"
#include "kernex/sqlite_batch.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::GroupCommit;
using kernex::Result;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kernex-group-commit-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

sqlite3* open_db(const fs::path& file) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  EXPECT_EQ(sqlite3_exec(db,
                         "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE IF NOT "
                         "EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  return db;
}

std::unique_ptr<GroupCommit> writer_on(const fs::path& file, sqlite3** db_out = nullptr) {
  sqlite3* db = open_db(file);
  if (db_out) *db_out = db;
  return std::make_unique<GroupCommit>(
      std::make_unique<kernex::SqliteBatch>(db, true, "test.db", kernex::ErrorCode::Io));
}

Result<void> insert(sqlite3* db, std::int64_t id, const char* value) {
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO t (id, v) VALUES (?, ?)", -1, &st, nullptr);
  sqlite3_bind_int64(st, 1, id);
  if (value) sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return kernex::fail(kernex::ErrorCode::Io, sqlite3_errmsg(db));
  return {};
}

std::int64_t count(const fs::path& file, const std::string& where = "1") {
  sqlite3* db = nullptr;
  sqlite3_open(file.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, ("SELECT COUNT(*) FROM t WHERE " + where).c_str(), -1, &st, nullptr);
  std::int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

TEST(GroupCommit, ManyThreadsAreAllCommittedBeforeTheirAcknowledgement) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  constexpr int kThreads = 8, kEach = 60;
  std::atomic<int> unseen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      sqlite3* reader = nullptr;
      sqlite3_open(file.c_str(), &reader);
      for (int i = 0; i < kEach; ++i) {
        const std::int64_t id = t * 100000 + i;
        auto r = writer->write([&] { return insert(db, id, "x"); }, i % 3 == 0);
        if (!r) {
          ++unseen;
          continue;
        }
        // Acknowledged: another connection sees it.
        sqlite3_stmt* st = nullptr;
        sqlite3_prepare_v2(reader, "SELECT 1 FROM t WHERE id = ?", -1, &st, nullptr);
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) != SQLITE_ROW) ++unseen;
        sqlite3_finalize(st);
      }
      sqlite3_close(reader);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(unseen.load(), 0);
  const auto stats = writer->stats();
  writer.reset();
  EXPECT_EQ(count(file), kThreads * kEach);
  EXPECT_EQ(stats.items, static_cast<std::uint64_t>(kThreads * kEach));
  EXPECT_EQ(stats.failed_items, 0u);
  // Batched: fewer commits than writes (8 threads queue behind each commit).
  EXPECT_LT(stats.batches, stats.items);
  EXPECT_GT(stats.durable_batches, 0u);
}

// Holds the writer's first batch (one item, inserting row 1) until release(), so the items
// submitted meanwhile queue into the second batch.
struct HeldFirstBatch {
  std::promise<void> gate, started;
  std::future<Result<void>> first;
  HeldFirstBatch(GroupCommit& writer, sqlite3* db) {
    auto open = gate.get_future().share();
    first = writer.submit([this, open, db] {
      started.set_value();
      open.wait();
      return insert(db, 1, "first");
    });
    started.get_future().wait();
  }
  void release() { gate.set_value(); }
};

TEST(GroupCommit, AFailingItemFailsAloneInItsBatch) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  HeldFirstBatch held(*writer, db);
  std::vector<std::future<Result<void>>> rest;
  rest.push_back(writer->submit([&] { return insert(db, 2, "a"); }));
  // Two statements, the second fails (NOT NULL): its first row must not stay either.
  rest.push_back(writer->submit([&]() -> Result<void> {
    KERNEX_RETURN_IF_ERROR(insert(db, 3, "half"));
    return insert(db, 4, nullptr);
  }));
  rest.push_back(writer->submit([&] { return insert(db, 2, "duplicate"); }));  // primary key
  rest.push_back(writer->submit([]() -> Result<void> { throw std::runtime_error("boom"); }));
  rest.push_back(writer->submit([&] { return insert(db, 5, "b"); }));
  held.release();
  EXPECT_TRUE(held.first.get());
  std::vector<bool> ok;
  for (auto& f : rest) ok.push_back(f.get().has_value());
  EXPECT_EQ(ok, (std::vector<bool>{true, false, false, false, true}));
  EXPECT_EQ(writer->stats().batches, 2u);  // the first, then everything that queued behind it
  writer.reset();
  EXPECT_EQ(count(file), 3);
  EXPECT_EQ(count(file, "id IN (3, 4)"), 0);
  EXPECT_EQ(count(file, "id = 2 AND v = 'a'"), 1);
}

TEST(GroupCommit, AnItemThatEndsTheTransactionLosesNoOtherItem) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  HeldFirstBatch held(*writer, db);
  auto before = writer->submit([&] { return insert(db, 2, "before"); });
  auto rogue = writer->submit([&]() -> Result<void> {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);  // as SQLite does on a full disk
    return kernex::fail(kernex::ErrorCode::Io, "disk full");
  });
  auto after = writer->submit([&] { return insert(db, 3, "after"); });
  held.release();
  EXPECT_TRUE(held.first.get());
  EXPECT_TRUE(before.get());  // run again in a new transaction
  EXPECT_FALSE(rogue.get());
  EXPECT_TRUE(after.get());
  writer.reset();
  EXPECT_EQ(count(file), 3);
}

TEST(GroupCommit, LazyItemsRideTheNextBatchOrTheirDelay) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  std::promise<Result<void>> lazy_done;
  writer->submit_lazy([&] { return insert(db, 1, "audit"); },
                      [&](const Result<void>& r) { lazy_done.set_value(r); });
  EXPECT_TRUE(writer->write([&] { return insert(db, 2, "exchange"); }));
  EXPECT_EQ(count(file), 2);  // one batch holding both, committed before write returned
  EXPECT_EQ(writer->stats().batches, 1u);
  EXPECT_TRUE(lazy_done.get_future().get());
  // Alone, a lazy item is committed after its delay.
  std::promise<void> alone;
  writer->submit_lazy([&] { return insert(db, 3, "alone"); },
                      [&](const Result<void>&) { alone.set_value(); });
  alone.get_future().wait();
  EXPECT_EQ(count(file), 3);
}

TEST(GroupCommit, AWriteFromInsideABatchIsRefusedNotDeadlocked) {
  TempDir dir;
  auto writer = writer_on(dir.path / "t.db");
  Result<void> inner;
  EXPECT_TRUE(writer->write([&]() -> Result<void> {
    inner = writer->write([] { return Result<void>{}; });
    return {};
  }));
  EXPECT_FALSE(inner);
}

// A lone write() is committed on its caller's thread (no hand-off to the writer thread), and the
// callbacks of the items queued before it in its batch have run when it returns (stores keep
// their bookkeeping in them).
TEST(GroupCommit, ALoneWriterCommitsOnItsOwnThreadAfterTheCallbacksBeforeIt) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  std::thread::id ran_on;
  ASSERT_TRUE(writer->write([&] {
    ran_on = std::this_thread::get_id();
    return insert(db, 1, "lone");
  }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());

  bool told = false;
  writer->submit_lazy([&] { return insert(db, 2, "audit"); },
                      [&](const Result<void>& r) { told = r.has_value(); });
  ASSERT_TRUE(writer->write([&] { return insert(db, 3, "exchange"); }));
  EXPECT_TRUE(told);
  EXPECT_EQ(count(file), 3);  // the lazy item rode the caller's batch
}

// A child writes from 4 threads and prints each id once acknowledged; killed with SIGKILL in the
// middle of the burst, every id it printed is in the file.
TEST(GroupCommit, KillNineLosesNothingAcknowledged) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3_close(open_db(file));
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    sqlite3* db = nullptr;
    auto writer = writer_on(file, &db);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (std::int64_t i = 0;; ++i) {
          const std::int64_t id = t * 10'000'000 + i;
          if (!writer->write([&] { return insert(db, id, "acked"); })) ::_exit(3);
          const std::string line = std::to_string(id) + "\n";
          if (::write(pipefd[1], line.data(), line.size()) < 0) ::_exit(4);
        }
      });
    }
    for (auto& t : threads) t.join();
    ::_exit(0);
  }
  ::close(pipefd[1]);
  FILE* in = ::fdopen(pipefd[0], "r");
  std::vector<std::int64_t> acked;
  long long id = 0;
  while (acked.size() < 2000 && std::fscanf(in, "%lld", &id) == 1) acked.push_back(id);
  ::kill(child, SIGKILL);
  while (std::fscanf(in, "%lld", &id) == 1) acked.push_back(id);  // what it printed before dying
  std::fclose(in);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child stopped on its own: " << status;
  ASSERT_GE(acked.size(), 2000u);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT 1 FROM t WHERE id = ?", -1, &st, nullptr);
  std::size_t missing = 0;
  for (auto a : acked) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, a);
    if (sqlite3_step(st) != SQLITE_ROW) ++missing;
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  EXPECT_EQ(missing, 0u) << "of " << acked.size() << " acknowledged";
}

}  // namespace
