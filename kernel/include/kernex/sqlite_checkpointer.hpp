// A SQLite WAL file's checkpoints, off its writer's commit path. SQLite checkpoints on the
// committing connection once the WAL holds wal_autocheckpoint pages (1 000): the commit that
// crosses the mark copies the WAL into the database and fsyncs both (0.6-1 s under disk load),
// and with one writer batching every run's writes, every run queued behind it waits that long.
// Here the writer's connection never checkpoints on its own: its commits wake a thread that
// checkpoints PASSIVE on a connection of its own, which blocks neither the readers nor the writer
// (SQLite copies only what no reader still needs). The writer truncates the WAL itself, before its
// next batch, only once the WAL passed a hard bound (the thread could not catch up: readers kept
// old snapshots, or it got no CPU), so the file stays bounded whatever the load. Durability is
// SQLite's own: a checkpoint copies committed frames only, and a crash in the middle of one is
// recovered from the WAL on the next open. Header-only, like kernex/sqlite_batch.hpp.
#pragma once

#include <sqlite3.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace kernex {

class SqliteCheckpointer {
 public:
  struct Options {
    int wake_pages = 1000;    // SQLite's own wal_autocheckpoint default
    int bound_pages = 16000;  // 62.5 MiB of 4 KiB pages: the writer truncates before its next batch
    int busy_timeout_ms = 2000;  // a forced truncation waiting on readers of old snapshots
  };
  struct Stats {
    std::uint64_t background = 0;  // PASSIVE checkpoints on the thread
    std::uint64_t forced = 0;      // truncations by the writer at the bound
    std::uint64_t busy = 0;        // checkpoints that found the file busy (another checkpointer)
  };

  // Null when `writer` has no file or is not in WAL mode, or when KERNEX_CHECKPOINT=inline (the
  // benches' baseline: SQLite's checkpoint on the commit, as before).
  static std::unique_ptr<SqliteCheckpointer> attach(sqlite3* writer, Options options) {
    const char* env = std::getenv("KERNEX_CHECKPOINT");
    if (env != nullptr && std::string_view(env) == "inline") return nullptr;
    const char* file = sqlite3_db_filename(writer, "main");
    if (file == nullptr || *file == '\0' || !in_wal(writer)) return nullptr;
    sqlite3* own = nullptr;
    if (sqlite3_open_v2(file, &own, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
      sqlite3_close(own);
      return nullptr;  // the writer keeps SQLite's own checkpoints
    }
    sqlite3_busy_timeout(own, options.busy_timeout_ms);
    sqlite3_exec(own, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr);  // fsyncs the copy
    // SQLite 3.40 checkpoints nothing on a connection that never read the file (its pager has
    // not opened the WAL yet): one read opens it for good.
    if (sqlite3_exec(own, "SELECT 1 FROM sqlite_master LIMIT 1", nullptr, nullptr, nullptr) !=
        SQLITE_OK) {
      sqlite3_close(own);
      return nullptr;
    }
    return std::unique_ptr<SqliteCheckpointer>(new SqliteCheckpointer(writer, own, options));
  }
  // Stops the thread and gives the writer SQLite's own checkpoints back: call it while no other
  // thread uses the writer's connection.
  ~SqliteCheckpointer() {
    sqlite3_wal_autocheckpoint(writer_, 1000);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    sqlite3_close_v2(own_);
  }
  SqliteCheckpointer(const SqliteCheckpointer&) = delete;
  SqliteCheckpointer& operator=(const SqliteCheckpointer&) = delete;

  // The writer calls this before a batch, outside any transaction: past the bound, the WAL is
  // checkpointed and truncated now (readers are waited for up to busy_timeout_ms; new ones
  // read the database file meanwhile).
  void before_batch() {
    {
      std::lock_guard lock(mutex_);
      if (pages_ < force_at_) return;
    }
    std::lock_guard running(running_);  // after the thread's round, if one is on its way
    const bool done = checkpoint(SQLITE_CHECKPOINT_TRUNCATE);
    std::lock_guard lock(mutex_);
    ++stats_.forced;
    // Failed (a reader in another process held on): again only after as much more again.
    force_at_ = done ? options_.bound_pages : pages_ + options_.bound_pages;
    if (done) pages_ = 0, next_at_ = options_.wake_pages;
  }

  Stats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  SqliteCheckpointer(sqlite3* writer, sqlite3* own, Options options)
      : writer_(writer),
        own_(own),
        options_(options),
        next_at_(options.wake_pages),
        force_at_(options.bound_pages) {
    sqlite3_wal_hook(writer_, &SqliteCheckpointer::committed, this);  // replaces SQLite's own
  }

  static bool in_wal(sqlite3* db) {
    sqlite3_stmt* st = nullptr;
    bool wal = false;
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      const auto* mode = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      wal = mode != nullptr && std::string_view(mode) == "wal";
    }
    sqlite3_finalize(st);
    return wal;
  }

  // SQLite's WAL hook, on the thread that committed on the writer's connection: `pages` is the
  // WAL's length. Only wakes the thread; never checkpoints here.
  static int committed(void* self_ptr, sqlite3*, const char*, int pages) {
    auto* self = static_cast<SqliteCheckpointer*>(self_ptr);
    std::lock_guard lock(self->mutex_);
    if (pages < self->pages_) self->next_at_ = self->options_.wake_pages;  // the WAL restarted
    self->pages_ = pages;
    if (pages >= self->next_at_ && !self->stopping_) {
      self->next_at_ = pages + self->options_.wake_pages;
      self->wanted_ = true;
      if (!self->thread_.joinable()) self->thread_ = std::thread([self] { self->loop(); });
      self->wake_.notify_one();
    }
    return SQLITE_OK;
  }

  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || wanted_; });
      if (stopping_) return;
      wanted_ = false;
      lock.unlock();
      catch_up();
      lock.lock();
    }
  }

  // PASSIVE rounds, the copying and fsyncs that took the writer 0.6-1 s, while the writer goes on:
  // until a round finds nothing the previous one did not copy, or a reader holds the rest. The
  // writer restarts the WAL from its beginning only if its transaction starts with the WAL all
  // copied, which a busy writer's never does, so RESTART then holds the writer back for the tail
  // the rounds left (a few frames) and for the readers of old frames: the WAL stays short.
  void catch_up() {
    constexpr int kMaxRounds = 4;
    int log = 0, copied = 0, seen = -1;
    for (int round = 0; round < kMaxRounds && log != seen; ++round) {
      seen = log;
      if (!step(SQLITE_CHECKPOINT_PASSIVE, &log, &copied) || copied < log) return;
    }
    step(SQLITE_CHECKPOINT_RESTART, &log, &copied);
  }

  bool step(int mode, int* log, int* copied) {
    std::lock_guard running(running_);
    const int rc = sqlite3_wal_checkpoint_v2(own_, nullptr, mode, log, copied);
    std::lock_guard lock(mutex_);
    ++(rc == SQLITE_OK ? stats_.background : stats_.busy);
    return rc == SQLITE_OK && !stopping_;
  }

  bool checkpoint(int mode) {
    const int rc = sqlite3_wal_checkpoint_v2(own_, nullptr, mode, nullptr, nullptr);
    if (rc != SQLITE_OK) {
      std::lock_guard lock(mutex_);
      ++stats_.busy;
    }
    return rc == SQLITE_OK;
  }

  sqlite3* writer_;
  sqlite3* own_;  // this class's connection: the thread's and before_batch()'s, under running_
  Options options_;
  std::mutex running_;  // one checkpoint at a time on own_
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  int pages_ = 0;  // the WAL's length at the writer's last commit
  int next_at_;    // wake the thread once the WAL is this long
  int force_at_;   // before_batch() truncates once the WAL is this long
  bool wanted_ = false, stopping_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace kernex
