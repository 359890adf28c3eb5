// GroupCommit's batch on one SQLite connection (WAL): BEGIN IMMEDIATE, a SAVEPOINT per item,
// one COMMIT. A durable batch is committed with synchronous=FULL (the WAL is fsynced before
// COMMIT returns), the others at the connection's own level. The WAL is checkpointed off the commit
// path (kernex/sqlite_checkpointer.hpp). Header-only: only code that links SQLite includes it
// (serve.db, the memory-sqlite plugin).
#pragma once

#include <sqlite3.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kernex/group_commit.hpp"
#include "kernex/sqlite_checkpointer.hpp"

namespace kernex {

class SqliteBatch final : public BatchTarget {
 public:
  // `db`: the writer's connection, closed with this target when `owns`. `lock`: held from begin
  // to commit or rollback when the connection is shared with other threads (they take it too).
  SqliteBatch(sqlite3* db, bool owns, std::string label, ErrorCode code, std::mutex* lock = nullptr,
              SqliteCheckpointer::Options checkpoints = {})
      : db_(db), owns_(owns), label_(std::move(label)), code_(code), lock_(lock) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "PRAGMA synchronous", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      base_ = current_ = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    const std::string base_sync = "PRAGMA synchronous=" + std::to_string(base_);
    for (auto [slot, sql] :
         {std::pair{&begin_, "BEGIN IMMEDIATE"}, std::pair{&mark_, "SAVEPOINT item"},
          std::pair{&release_, "RELEASE item"}, std::pair{&commit_, "COMMIT"},
          std::pair{&full_, "PRAGMA synchronous=2"}, std::pair{&base_sync_, base_sync.c_str()}})
      sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, nullptr);
    checkpoints_ = SqliteCheckpointer::attach(db_, checkpoints);
  }
  ~SqliteBatch() override {
    {
      // Unhooks the connection, which other threads may share under `lock`.
      std::optional<std::unique_lock<std::mutex>> held;
      if (lock_) held.emplace(*lock_);
      checkpoints_.reset();
    }
    for (auto* st : {begin_, mark_, release_, commit_, full_, base_sync_}) sqlite3_finalize(st);
    if (owns_) sqlite3_close_v2(db_);
  }
  SqliteBatch(const SqliteBatch&) = delete;
  SqliteBatch& operator=(const SqliteBatch&) = delete;

  Result<void> begin(bool durable) override {
    // Before the lock: the connection's other users read on while the WAL is truncated.
    if (checkpoints_) checkpoints_->before_batch();
    if (lock_) held_.emplace(*lock_);
    // The level cannot change inside a transaction: set before BEGIN.
    const int want = durable ? 2 : base_;
    if (want != current_) {
      if (auto r = step(want == 2 ? full_ : base_sync_, "setting synchronous"); !r)
        return unlocked(r);
      current_ = want;
    }
    if (auto r = step(begin_, "beginning a batch"); !r) return unlocked(r);
    return {};
  }
  Result<void> mark() override { return step(mark_, "a savepoint"); }
  Result<void> release() override { return step(release_, "releasing a savepoint"); }
  void undo() override {
    if (!sqlite3_get_autocommit(db_))
      sqlite3_exec(db_, "ROLLBACK TO item; RELEASE item", nullptr, nullptr, nullptr);
  }
  bool open() override { return sqlite3_get_autocommit(db_) == 0; }
  Result<void> commit() override {
    auto r = step(commit_, "committing a batch");
    if (r) held_.reset();
    return r;
  }
  void rollback() override {
    if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    held_.reset();
  }
  sqlite3* db() const { return db_; }
  bool checkpoints_off_the_commit() const { return checkpoints_ != nullptr; }
  SqliteCheckpointer::Stats checkpoints() const {
    return checkpoints_ ? checkpoints_->stats() : SqliteCheckpointer::Stats{};
  }

 private:
  std::unexpected<Error> error(const std::string& what) const {
    return fail(code_, label_ + ": " + what + ": " + sqlite3_errmsg(db_));
  }
  Result<void> unlocked(Result<void> r) {
    held_.reset();
    return r;
  }
  Result<void> step(sqlite3_stmt* st, const char* what) {
    if (st == nullptr) return error(what);
    if (sqlite3_step(st) != SQLITE_DONE) {
      auto e = error(what);
      sqlite3_reset(st);
      return e;
    }
    sqlite3_reset(st);
    return {};
  }

  sqlite3* db_;
  bool owns_;
  std::string label_;
  ErrorCode code_;
  std::mutex* lock_;
  std::optional<std::unique_lock<std::mutex>> held_;
  int base_ = 1, current_ = 1;
  sqlite3_stmt *begin_ = nullptr, *mark_ = nullptr, *release_ = nullptr, *commit_ = nullptr;
  sqlite3_stmt *full_ = nullptr, *base_sync_ = nullptr;  // PRAGMA synchronous=FULL / the usual
  std::unique_ptr<SqliteCheckpointer> checkpoints_;
};

}  // namespace kernex
