// GroupCommit on a real SQLite file: every write from many threads is committed and acknowledged
// only once its batch is; a failing item fails alone; kill -9 in the middle of a burst loses
// nothing that was acknowledged, checkpoints running or not; the WAL, checkpointed off the
// writer's commits, stays bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernex/group_commit.hpp"
#include "kernex/sqlite_batch.hpp"
#include "kernex/sqlite_checkpointer.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::GroupCommit;
using kernex::Result;
using namespace std::chrono_literals;

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

std::unique_ptr<GroupCommit> writer_on(const fs::path& file, sqlite3** db_out = nullptr,
                                       kernex::SqliteCheckpointer::Options checkpoints = {},
                                       GroupCommit::Options options = {}) {
  sqlite3* db = open_db(file);
  if (db_out) *db_out = db;
  return std::make_unique<GroupCommit>(
      std::make_unique<kernex::SqliteBatch>(db, true, "test.db", kernex::ErrorCode::Io, nullptr,
                                            checkpoints),
      options);
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
  // Lazy items that keep coming alone: the writer polls for them (none wakes it) and commits
  // each after its delay all the same.
  for (int i = 4; i < 9; ++i) {
    std::promise<Result<void>> again;
    writer->submit_lazy([&, i] { return insert(db, i, "alone again"); },
                        [&](const Result<void>& r) { again.set_value(r); });
    EXPECT_TRUE(again.get_future().get());
  }
  EXPECT_EQ(count(file), 8);
}

// Runs' turns, as a store makes them: a lazy item (the new conversation's row) queued while the
// turn works (a model call, here a pause), then a write that waits (the exchange), whose batch
// takes both. The writer, waiting out a lazy delay, is not woken by the next turn's lazy item: its
// wait ends before that item's delay does. Before, each turn woke it for nothing (a futex call and
// two thread switches). What wakes it now is its own batch of a lazy item whose delay ran out (at
// most once a delay) and the first lazy item after it slept untimed. Every item still commits.
TEST(GroupCommit, TurnsWakeTheWriterAtMostOnceADelayAndEveryItemCommits) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  GroupCommit::Options options;
  options.lazy_delay = std::chrono::milliseconds(40);
  auto writer = writer_on(file, &db, {}, options);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
  int turns = 0;
  while (elapsed() < std::chrono::milliseconds(600) || turns < 20) {
    const int id = 2 * turns++;
    writer->submit_lazy([&, id] { return insert(db, id, "conversation"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the turn's model call
    ASSERT_TRUE(writer->write([&, id] { return insert(db, id + 1, "exchange"); }));
  }
  const double delays = std::chrono::duration<double>(elapsed()) / options.lazy_delay;
  EXPECT_LE(static_cast<double>(writer->stats().writer_wakes), 2 * delays + 2) << turns << " turns";
  EXPECT_EQ(count(file), 2 * turns);
  std::promise<Result<void>> alone;  // queued alone after them: committed after its delay
  writer->submit_lazy([&] { return insert(db, -1, "alone"); },
                      [&](const Result<void>& r) { alone.set_value(r); });
  auto done = alone.get_future();
  ASSERT_EQ(done.wait_for(60s), std::future_status::ready);  // a failure, not a hang
  EXPECT_TRUE(done.get());
  EXPECT_EQ(count(file), 2 * turns + 1);
}

// More lazy items than a batch holds, and no write to carry them: they go in batch after batch as
// soon as the first batch's delay is up, not one batch a delay (the time left over items waited
// counts). 400 items in batches of 4 with a 100 ms delay took 10 s before.
TEST(GroupCommit, LazyItemsBeyondOneBatchWaitOneDelayNotOneEach) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  GroupCommit::Options options;
  options.lazy_delay = std::chrono::milliseconds(100);
  options.max_batch = 4;
  auto writer = writer_on(file, &db, {}, options);
  std::promise<void> last;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 400; ++i) {
    writer->submit_lazy([&, i] { return insert(db, i, "lazy"); },
                        [&, i](const Result<void>&) {
                          if (i == 399) last.set_value();
                        });
  }
  ASSERT_EQ(last.get_future().wait_for(60s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // 10 s when each batch waited
  EXPECT_EQ(count(file), 400);
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

// Counts the SAVEPOINT statements the connection runs.
int savepoints_seen = 0;
int count_savepoints(unsigned, void*, void* stmt, void*) {
  const char* sql = sqlite3_sql(static_cast<sqlite3_stmt*>(stmt));
  if (sql != nullptr && std::string_view(sql).starts_with("SAVEPOINT")) ++savepoints_seen;
  return 0;
}

// A batch first runs without a savepoint per item; an item that fails sends it back to run with
// them. Either way each item's answer and rows are as if every item had its own savepoint.
TEST(GroupCommit, AGoodBatchRunsEachItemOnceWithoutSavepointsAndABadOneFallsBackToThem) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  sqlite3_trace_v2(db, SQLITE_TRACE_STMT, count_savepoints, nullptr);
  savepoints_seen = 0;
  std::atomic<int> runs_a{0}, runs_b{0};
  {
    HeldFirstBatch held(*writer, db);
    auto a = writer->submit([&] {
      ++runs_a;
      return insert(db, 2, "a");
    });
    auto b = writer->submit([&] {
      ++runs_b;
      return insert(db, 3, "b");
    });
    held.release();
    EXPECT_TRUE(held.first.get());
    EXPECT_TRUE(a.get());
    EXPECT_TRUE(b.get());
  }
  EXPECT_EQ(runs_a.load(), 1);
  EXPECT_EQ(runs_b.load(), 1);
  EXPECT_EQ(savepoints_seen, 0);
  {
    HeldFirstBatch held(*writer, db);  // its row 1 is there already: this first batch fails
    auto good = writer->submit([&] { return insert(db, 4, "good"); });
    auto bad = writer->submit([&]() -> Result<void> {
      KERNEX_RETURN_IF_ERROR(insert(db, 5, "half"));
      return insert(db, 6, nullptr);
    });
    held.release();
    EXPECT_FALSE(held.first.get());
    EXPECT_TRUE(good.get());
    EXPECT_FALSE(bad.get());
  }
  EXPECT_GT(savepoints_seen, 0);
  writer.reset();
  EXPECT_EQ(count(file), 4);
  EXPECT_EQ(count(file, "id IN (5, 6)"), 0);
}

// A batch of one failing item: nothing of it stays (no savepoint needed to undo it), and the
// writer goes on.
TEST(GroupCommit, ALoneFailingItemLeavesNoRowAndTheNextWriteCommits) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = nullptr;
  auto writer = writer_on(file, &db);
  auto failed = writer->write([&]() -> Result<void> {
    KERNEX_RETURN_IF_ERROR(insert(db, 1, "half"));
    return insert(db, 2, nullptr);
  });
  ASSERT_FALSE(failed);
  EXPECT_THAT(failed.error().message, ::testing::HasSubstr("NOT NULL"));
  EXPECT_FALSE(writer->write([]() -> Result<void> { throw std::runtime_error("boom"); }));
  ASSERT_TRUE(writer->write([&] { return insert(db, 3, "next"); }));
  writer.reset();
  EXPECT_EQ(count(file), 1);
  EXPECT_EQ(count(file, "id = 3"), 1);
}

// A child writes from 4 threads and prints each id once acknowledged; killed with SIGKILL in the
// middle of the burst, every id it printed is in the file, and the file is sound.
void expect_kill_nine_loses_nothing(kernex::SqliteCheckpointer::Options checkpoints) {
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
    auto writer = writer_on(file, &db, checkpoints);
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
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
  sqlite3_finalize(st);
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

TEST(GroupCommit, KillNineLosesNothingAcknowledged) { expect_kill_nine_loses_nothing({}); }

// The checkpointer woken every 4 pages (about every other batch) and truncating at 16: the kill
// lands, most likely, in the middle of a checkpoint (the thread's or the writer's own).
TEST(GroupCommit, KillNineWhileCheckpointingLosesNothingAcknowledged) {
  expect_kill_nine_loses_nothing({.wake_pages = 4, .bound_pages = 16});
}

// ---- the WAL's checkpoints (kernex/sqlite_checkpointer.hpp) ----

// Small marks, so a few hundred batches cross them many times.
constexpr kernex::SqliteCheckpointer::Options kSmallWal{.wake_pages = 16, .bound_pages = 64};

std::uintmax_t size_of(const fs::path& file) {
  std::error_code ec;
  const auto n = fs::file_size(file, ec);
  return ec ? 0 : n;
}

// The writer's commits never checkpoint, yet the WAL stays bounded across many batches while a
// reader on its own connection (as serve.db's stores and the memory store's readers are) reads
// between them, never starved.
TEST(GroupCommit, TheWalStaysBoundedAcrossManyBatches) {
  TempDir dir;
  const fs::path file = dir.path / "t.db";
  sqlite3* db = open_db(file);
  auto batch = std::make_unique<kernex::SqliteBatch>(db, true, "test.db", kernex::ErrorCode::Io,
                                                     nullptr, kSmallWal);
  auto* target = batch.get();
  ASSERT_TRUE(target->checkpoints_off_the_commit());
  GroupCommit writer(std::move(batch));
  sqlite3* reader = open_db(file);
  const std::string row(1500, 'x');
  std::uintmax_t largest = 0;
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(writer.write([&] { return insert(db, i, row.c_str()); }));
    largest = std::max(largest, size_of(dir.path / "t.db-wal"));
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(reader, "SELECT COUNT(*) FROM t", -1, &st, nullptr);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(st, 0), i + 1);
    sqlite3_finalize(st);
  }
  // 600 commits each rewrote at least the table's last page: without checkpoints the WAL would
  // hold 600 frames or more. The bound, plus the batch that crossed it, a frame header per page.
  EXPECT_LE(largest, (kSmallWal.bound_pages + 16) * (4096 + 24) + 32u);
  const auto stats = target->checkpoints();
  EXPECT_GT(stats.background + stats.forced, 0u);
  sqlite3_close(reader);
}

TEST(GroupCommit, CheckpointInlineInTheEnvironmentLeavesThemToSqlite) {
  TempDir dir;
  ::setenv("KERNEX_CHECKPOINT", "inline", 1);
  kernex::SqliteBatch inline_batch(open_db(dir.path / "t.db"), true, "test.db",
                                   kernex::ErrorCode::Io, nullptr, kSmallWal);
  ::unsetenv("KERNEX_CHECKPOINT");
  EXPECT_FALSE(inline_batch.checkpoints_off_the_commit());
  // A database without a file has no WAL to checkpoint.
  sqlite3* memory = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &memory), SQLITE_OK);
  kernex::SqliteBatch in_memory(memory, true, "mem", kernex::ErrorCode::Io, nullptr, kSmallWal);
  EXPECT_FALSE(in_memory.checkpoints_off_the_commit());
}

// commit_delay (PostgreSQL's commit_delay): a durable batch waits for more items only when the
// last durable batch held more than one. The target below is the real SQLite batch, counting the
// items of each committed transaction (each item inserts one row: the rows it changed). The delays
// are ten minutes, so a batch that commits before it fills shows at once; the short waits below
// only bound a failure, never order a step.
struct BatchLog {
  std::mutex m;
  std::int64_t changes_at_begin = 0;
  std::vector<std::size_t> committed;  // items per committed transaction, in order
  std::vector<std::size_t> sizes() {
    std::lock_guard lock(m);
    return committed;
  }
};

class CountingBatch final : public kernex::BatchTarget {
 public:
  CountingBatch(sqlite3* db, std::shared_ptr<BatchLog> log)
      : inner_(db, true, "test.db", kernex::ErrorCode::Io), log_(std::move(log)) {}
  Result<void> begin(bool durable) override {
    auto r = inner_.begin(durable);
    std::lock_guard lock(log_->m);
    log_->changes_at_begin = sqlite3_total_changes64(inner_.db());
    return r;
  }
  Result<void> mark() override { return inner_.mark(); }
  Result<void> release() override { return inner_.release(); }
  void undo() override { inner_.undo(); }
  bool open() override { return inner_.open(); }
  Result<void> commit() override {
    const std::int64_t changes = sqlite3_total_changes64(inner_.db());
    auto r = inner_.commit();
    std::lock_guard lock(log_->m);
    if (r) log_->committed.push_back(static_cast<std::size_t>(changes - log_->changes_at_begin));
    return r;
  }
  void rollback() override { inner_.rollback(); }

 private:
  kernex::SqliteBatch inner_;
  std::shared_ptr<BatchLog> log_;
};

constexpr auto kLong = std::chrono::minutes(10);
constexpr auto kBound = std::chrono::seconds(60);  // a failure detector, not a step's timing

struct DelayedWriter {
  fs::path file;
  sqlite3* db = nullptr;
  std::shared_ptr<BatchLog> log = std::make_shared<BatchLog>();
  std::unique_ptr<GroupCommit> writer;
  // `delay`: commit_delay; `busy`: busy_delay (off unless a test is about it).
  DelayedWriter(const fs::path& f, std::chrono::microseconds delay, std::size_t max_batch,
                std::chrono::microseconds busy = std::chrono::microseconds(0))
      : file(f), db(open_db(f)) {
    GroupCommit::Options options;
    options.commit_delay = delay;
    options.busy_delay = busy;
    options.max_batch = max_batch;
    options.direct = false;  // whatever KERNEX_GROUP_COMMIT says
    writer = std::make_unique<GroupCommit>(std::make_unique<CountingBatch>(db, log), options);
  }
  // A durable insert whose acknowledgement checks, from another connection, that its row is
  // committed: nothing is acknowledged before its batch is.
  std::future<Result<void>> durable(std::int64_t id) { return acknowledged(id, true); }
  std::future<Result<void>> acknowledged(std::int64_t id, bool is_durable) {
    auto told = std::make_shared<std::promise<Result<void>>>();
    auto future = told->get_future();
    writer->submit([this, id] { return insert(db, id, "d"); }, is_durable,
                   [this, id, told](const Result<void>& r) {
                     if (r && count(file, "id = " + std::to_string(id)) != 1)
                       told->set_value(kernex::fail(kernex::ErrorCode::Internal,
                                                    "acknowledged before its commit"));
                     else
                       told->set_value(r);
                   });
    return future;
  }
  // Two durable items in one batch (they queue behind a held one): writers are busy.
  void make_busy(std::int64_t first_id) {
    std::promise<void> gate, started;
    auto open = gate.get_future().share();
    auto held = writer->submit(
        [&, open] {
          started.set_value();
          open.wait();
          return insert(db, first_id, "held");
        },
        true);
    started.get_future().wait();
    auto a = durable(first_id + 1), b = durable(first_id + 2);
    gate.set_value();
    ASSERT_TRUE(held.get());
    ASSERT_TRUE(a.get());
    ASSERT_TRUE(b.get());
  }
};

bool settled(std::future<Result<void>>& f, std::chrono::milliseconds within = kBound) {
  return f.wait_for(within) == std::future_status::ready;
}

TEST(GroupCommitDelay, ALoneDurableWriterNeverWaits) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", kLong, 256);
  for (std::int64_t id = 1; id <= 3; ++id) {
    auto f = w.durable(id);
    ASSERT_TRUE(settled(f)) << "a lone durable write waited for commit_delay";
    EXPECT_TRUE(f.get());
  }
  // write() leads its own batch on the caller's thread: no wait either.
  auto lead = std::async(std::launch::async, [&] {
    return w.writer->write([&] { return insert(w.db, 4, "w"); }, true);
  });
  ASSERT_TRUE(settled(lead));
  EXPECT_TRUE(lead.get());
  EXPECT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 1, 1, 1}));
}

TEST(GroupCommitDelay, ABusyDurableBatchWaitsForMoreItemsAndCommitsThemInOne) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", kLong, 3);
  w.make_busy(1);
  ASSERT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2}));
  auto d = w.durable(10);
  // Held by the delay (ten minutes): not committed, not acknowledged.
  EXPECT_FALSE(settled(d, std::chrono::milliseconds(100)));
  EXPECT_EQ(count(w.file, "id = 10"), 0);
  auto e = w.durable(11);
  auto f = w.durable(12);  // the batch is full (max_batch 3): it goes now
  ASSERT_TRUE(settled(d) && settled(e) && settled(f));
  EXPECT_TRUE(d.get());
  EXPECT_TRUE(e.get());
  EXPECT_TRUE(f.get());
  EXPECT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_EQ(w.writer->stats().durable_batches, 3u);
}

TEST(GroupCommitDelay, ADelayedBatchCommitsAfterCommitDelayWithWhatItHas) {
  TempDir dir;
  constexpr auto kDelay = std::chrono::milliseconds(30);
  DelayedWriter w(dir.path / "t.db", kDelay, 256);
  w.make_busy(1);
  const auto start = std::chrono::steady_clock::now();
  auto d = w.durable(10);
  ASSERT_TRUE(settled(d)) << "a delayed batch never committed";
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(d.get());
  EXPECT_GE(waited, kDelay) << "a busy durable batch did not wait for commit_delay";
  EXPECT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2, 1}));
}

TEST(GroupCommitDelay, OnlyDurableBatchesWait) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", kLong, 256);
  w.make_busy(1);
  auto plain = w.writer->submit([&] { return insert(w.db, 10, "not durable"); }, false);
  ASSERT_TRUE(settled(plain)) << "a batch with no durable item waited for commit_delay";
  EXPECT_TRUE(plain.get());
  EXPECT_EQ(count(w.file, "id = 10"), 1);
}

// busy_delay: any batch with an item someone waits on, durable or not, waits for more items
// once the last such batch held more than one; a lone writer, and lazy items alone, never do.
TEST(GroupCommitDelay, ALoneWriterNeverWaitsForTheBusyDelay) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", std::chrono::microseconds(0), 256, kLong);
  for (std::int64_t id = 1; id <= 3; ++id) {
    auto f = w.acknowledged(id, false);
    ASSERT_TRUE(settled(f)) << "a lone write waited for busy_delay";
    EXPECT_TRUE(f.get());
  }
  EXPECT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 1, 1}));
}

TEST(GroupCommitDelay, ABusyBatchWaitsForMoreItemsDurableOrNot) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", std::chrono::microseconds(0), 3, kLong);
  w.make_busy(1);
  ASSERT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2}));
  auto d = w.acknowledged(10, false);
  // Held by the delay (ten minutes): not committed, not acknowledged.
  EXPECT_FALSE(settled(d, std::chrono::milliseconds(100)));
  EXPECT_EQ(count(w.file, "id = 10"), 0);
  // As many eager items as the last batch held: the company came, the batch goes now.
  auto e = w.acknowledged(11, false);
  ASSERT_TRUE(settled(d) && settled(e));
  EXPECT_TRUE(d.get() && e.get());
  EXPECT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2, 2}));
}

TEST(GroupCommitDelay, ABusyDelayEndsWhenTheBatchIsFull) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", std::chrono::microseconds(0), 2, kLong);
  w.make_busy(1);
  ASSERT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2}));
  // An eager item (held by the delay: one of the two eager items expected) and a lazy one: the
  // batch is full (max_batch 2), so it goes without the second eager item.
  auto d = w.acknowledged(11, false);
  std::promise<Result<void>> told;
  auto lazy = told.get_future();
  w.writer->submit_lazy([&] { return insert(w.db, 10, "lazy"); },
                        [&](const Result<void>& r) { told.set_value(r); });
  ASSERT_TRUE(settled(d) && settled(lazy)) << "a full batch waited for busy_delay";
  EXPECT_TRUE(d.get() && lazy.get());
  EXPECT_EQ(w.log->sizes(), (std::vector<std::size_t>{1, 2, 2}));
}

TEST(GroupCommitDelay, LazyItemsAloneNeverWaitForTheBusyDelay) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", std::chrono::microseconds(0), 256, kLong);
  w.make_busy(1);
  std::promise<Result<void>> told;
  auto lazy = told.get_future();
  w.writer->submit_lazy([&] { return insert(w.db, 10, "lazy"); },
                        [&](const Result<void>& r) { told.set_value(r); });
  ASSERT_TRUE(settled(lazy)) << "a batch of lazy items waited for busy_delay";
  EXPECT_TRUE(lazy.get());
  EXPECT_EQ(count(w.file, "id = 10"), 1);
}

// Stopping ends a delay at once: the held batch is committed and acknowledged, not dropped.
TEST(GroupCommitDelay, StoppingCommitsADelayedBatchWithoutWaitingItOut) {
  TempDir dir;
  DelayedWriter w(dir.path / "t.db", kLong, 256);
  w.make_busy(1);
  auto d = w.durable(10);
  auto stopped = std::async(std::launch::async, [&] { w.writer.reset(); });
  ASSERT_EQ(stopped.wait_for(kBound), std::future_status::ready) << "stopping waited the delay out";
  ASSERT_TRUE(settled(d));
  EXPECT_TRUE(d.get());
  EXPECT_EQ(count(w.file, "id = 10"), 1);
}

}  // namespace
