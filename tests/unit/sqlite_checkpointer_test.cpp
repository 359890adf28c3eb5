// SqliteCheckpointer (kernex/sqlite_checkpointer.hpp) behind a GroupCommit on a real SQLite file:
// the writer's commits never checkpoint, yet the WAL stays bounded across many batches while a
// reader reads between them. kill -9 while checkpoints run: tests/unit/group_commit_test.cpp.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernex/group_commit.hpp"
#include "kernex/sqlite_batch.hpp"
#include "kernex/sqlite_checkpointer.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::GroupCommit;
using kernex::Result;
using kernex::SqliteCheckpointer;

// Small marks, so a few hundred batches cross them many times.
constexpr SqliteCheckpointer::Options kSmall{.wake_pages = 16, .bound_pages = 64};
const std::string kPad(1500, 'x');  // a row fills most of a 4 KiB page with its index entry

sqlite3* open_db(const fs::path& file) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  EXPECT_EQ(sqlite3_exec(db,
                         "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE IF NOT "
                         "EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  return db;
}

struct Writer {
  sqlite3* db = nullptr;
  kernex::SqliteBatch* batch = nullptr;
  std::unique_ptr<GroupCommit> commit;
};

Writer writer_on(const fs::path& file, SqliteCheckpointer::Options options) {
  Writer w;
  w.db = open_db(file);
  auto batch = std::make_unique<kernex::SqliteBatch>(w.db, true, "test.db", kernex::ErrorCode::Io,
                                                     nullptr, options);
  w.batch = batch.get();
  w.commit = std::make_unique<GroupCommit>(std::move(batch));
  return w;
}

Result<void> insert(sqlite3* db, std::int64_t id) {
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO t (id, v) VALUES (?, ?)", -1, &st, nullptr);
  sqlite3_bind_int64(st, 1, id);
  const std::string v = std::to_string(id) + kPad;
  sqlite3_bind_text(st, 2, v.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return kernex::fail(kernex::ErrorCode::Io, sqlite3_errmsg(db));
  return {};
}

std::uintmax_t size_of(const fs::path& file) {
  std::error_code ec;
  const auto n = fs::file_size(file, ec);
  return ec ? 0 : n;
}

TEST(SqliteCheckpointer, TheWalStaysBoundedAcrossManyBatches) {
  kernex::testing::TempDir dir;
  const fs::path file = dir / "t.db";
  auto w = writer_on(file, kSmall);
  ASSERT_TRUE(w.batch->checkpoints_off_the_commit());
  // A reader on its own connection all along, as serve.db's stores and the memory store's
  // readers are: it reads between the batches, never starved, never failing.
  sqlite3* reader = open_db(file);
  std::uintmax_t largest = 0;
  constexpr int kBatches = 600;
  for (int i = 0; i < kBatches; ++i) {
    ASSERT_TRUE(w.commit->write([&] { return insert(w.db, i); }));
    largest = std::max(largest, size_of(dir / "t.db-wal"));
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(reader, "SELECT COUNT(*) FROM t", -1, &st, nullptr);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(st, 0), i + 1);
    sqlite3_finalize(st);
  }
  // 600 commits of a ~1.5 KB row each wrote well over a thousand pages to the WAL (each commit
  // rewrites the pages it touched: the table's and the index's): without checkpoints the WAL
  // would hold them all. The bound, plus the batch that crossed it, a frame header per page.
  const std::uintmax_t bound = (kSmall.bound_pages + 16) * (4096 + 24) + 32;
  EXPECT_LE(largest, bound);
  const auto stats = w.batch->checkpoints();
  EXPECT_GT(stats.background + stats.forced, 0u);
  sqlite3_close(reader);
  w.commit.reset();
}

TEST(SqliteCheckpointer, InlineInTheEnvironmentLeavesCheckpointsToSqlite) {
  kernex::testing::TempDir dir;
  ::setenv("KERNEX_CHECKPOINT", "inline", 1);
  auto w = writer_on(dir / "t.db", kSmall);
  ::unsetenv("KERNEX_CHECKPOINT");
  EXPECT_FALSE(w.batch->checkpoints_off_the_commit());
  ASSERT_TRUE(w.commit->write([&] { return insert(w.db, 1); }));
  w.commit.reset();
  // A database without a file has no WAL to checkpoint.
  sqlite3* memory = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &memory), SQLITE_OK);
  kernex::SqliteBatch in_memory(memory, true, "mem", kernex::ErrorCode::Io, nullptr, kSmall);
  EXPECT_FALSE(in_memory.checkpoints_off_the_commit());
}

}  // namespace
