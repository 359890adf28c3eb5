// Group commit: the writes every caller queued are committed in one transaction per batch (a
// batch is whatever queued while the previous commit was on its way to disk, bounded), then every
// waiter is told. A caller of write() that finds no batch being committed commits the queue itself
// on its own thread, as PostgreSQL's and InnoDB's group commit let the first waiter lead: a lone
// writer pays no thread hand-off. Otherwise, and for submit(), the database's writer thread does.
// Either way the items of a batch are told in their order, callbacks included. Nothing is
// acknowledged before its batch is committed; a failing item fails alone (each runs inside its own
// savepoint) and never loses the others. What a batch does to the database (begin, savepoints,
// commit) is a BatchTarget: kernex/sqlite_batch.hpp for SQLite.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernex/error.hpp"

namespace kernex {

// The transaction of one batch, driven by the writer thread only.
class BatchTarget {
 public:
  virtual ~BatchTarget() = default;
  // Opens the batch's transaction; `durable`: its commit must reach the disk (fsync) before
  // returning, whatever the connection's usual setting.
  virtual Result<void> begin(bool durable) = 0;
  virtual Result<void> mark() = 0;     // a savepoint before one item
  virtual Result<void> release() = 0;  // the item went well: its savepoint joins the batch
  virtual void undo() = 0;             // the item failed: back to its savepoint
  // False when the database dropped the whole transaction on an item's error (SQLite does on a
  // full disk or an I/O error): the items before it are then run again in a new transaction.
  virtual bool open() = 0;
  virtual Result<void> commit() = 0;
  virtual void rollback() = 0;
};

class GroupCommit {
 public:
  // One item: the statements of one logical write, run on the writer thread inside the batch's
  // transaction. It may run more than once (again after another item lost the transaction), so
  // it only writes through the database, never changes other state.
  using Work = std::function<Result<void>()>;
  using Done = std::function<void(const Result<void>&)>;
  struct Options {
    std::size_t max_batch = 256;
    // A lazy item (submit_lazy) waits for the next batch at most this long.
    std::chrono::milliseconds lazy_delay{50};
    // A durable batch waits this long for more items when the last durable batch held more than
    // one (writers are busy), as PostgreSQL's commit_delay does: one fsync then covers the runs
    // a moment behind. A lone writer never waits. Off by default: bench/serve's rps phase (32
    // closed-loop clients) halved its fsyncs per run at 3 ms but lost 38 % of its requests/s.
    // KERNEX_COMMIT_DELAY_US in the environment overrides the default (benches compare).
    std::chrono::microseconds commit_delay = commit_delay_from_env();
    // Any batch with an item someone waits on waits this long for more items when the last such
    // batch held more than one (callers are busy); a lone writer never waits. Without it, the
    // 32 clients of bench/serve's rps phase made commits of ~2 runs each, every one rewriting the
    // last page of each index into the WAL: 80 KB of WAL a run, and checkpointing it took a
    // quarter of the server's CPU. 300 µs halved the WAL a run and gave 15-28 % more req/s. The
    // wait ends early once as many eager items are queued as that last batch held.
    // KERNEX_BUSY_DELAY_US in the environment overrides the default (0: off; benches compare).
    std::chrono::microseconds busy_delay = busy_delay_from_env();
    // No thread, no batching: each item commits alone on its caller's thread (the path before
    // group commit, kept as the benches' baseline). Default: on when the environment has
    // KERNEX_GROUP_COMMIT=off.
    bool direct = direct_from_env();
  };
  static bool direct_from_env();
  static std::chrono::microseconds commit_delay_from_env();
  static std::chrono::microseconds busy_delay_from_env();
  struct Stats {
    std::uint64_t batches = 0, items = 0, durable_batches = 0, failed_items = 0;
    std::uint64_t writer_wakes = 0;  // notifications of the writer thread by callers
  };

  explicit GroupCommit(std::unique_ptr<BatchTarget> target) : GroupCommit(std::move(target), {}) {}
  GroupCommit(std::unique_ptr<BatchTarget> target, Options options);
  // Commits everything queued, then stops the thread.
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Returns once the batch holding `work` is committed (or the item failed). `durable`: the
  // batch's commit is fsynced. Must not be called from an item (the writer thread).
  Result<void> write(Work work, bool durable = false);
  std::future<Result<void>> submit(Work work, bool durable = false);
  // `done` runs on the writer thread once the item's batch is committed or the item failed.
  void submit(Work work, bool durable, Done done);
  // Rides the next batch, or is committed on its own after lazy_delay: for writes nobody waits
  // on (an audit row), so a turn pays one commit for them and the write it does wait on.
  void submit_lazy(Work work, Done done = {});

  Stats stats() const;
  bool direct() const { return options_.direct; }
  // True inside an item of this writer (its thread, or a direct caller's).
  bool on_writer_thread() const;

 private:
  // A write() caller waiting on its item (on the caller's stack).
  struct Waiter {
    std::condition_variable settled;
    bool done = false;
    Result<void> result;
  };
  struct Item {
    Work work;
    Done done;
    bool durable = false;
    bool lazy = false;
    Waiter* waiter = nullptr;
  };
  void enqueue(Item item);
  void loop();
  // Called with `lock` held and no batch being committed: commits one batch from the front of the
  // queue on this thread and tells its items. `leader`: a write() caller (it runs the callbacks of
  // the items it committed, as the writer thread would have while it waited).
  void commit_front(std::unique_lock<std::mutex>& lock, bool leader);
  std::vector<Result<void>> run_batch(std::vector<Item>& batch);
  void delay(std::unique_lock<std::mutex>& lock);
  bool delay_can_end() const;  // with mutex_ held, while delaying_
  void settle(std::vector<Item>& batch, std::vector<Result<void>>& results);
  // Runs the batch's items in one transaction; the results of those that ran, or an error of
  // the whole batch. `failed` items are skipped (already answered).
  bool attempt(std::vector<Item>& batch, std::vector<Result<void>>& results,
               std::vector<bool>& settled, bool durable);

  std::unique_ptr<BatchTarget> target_;
  Options options_;
  mutable std::mutex mutex_;
  std::mutex direct_mutex_;  // direct mode: one item at a time
  std::condition_variable wake_;
  std::deque<Item> queue_;
  std::size_t eager_ = 0;  // queued items that are not lazy
  std::chrono::steady_clock::time_point lazy_since_{};
  bool stopping_ = false;
  bool committing_ = false;  // a thread (the writer or a leading caller) runs a batch
  bool lazy_seen_ = false;   // a lazy item was queued since the writer last waited
  // The writer's wait ends within lazy_delay of now (loop()): a lazy item needs no wake.
  bool polling_ = false;
  std::size_t last_durable_items_ = 0;  // how many items the last durable batch held
  std::size_t last_eager_items_ = 0;    // how many eager items the last batch with one held
  std::condition_variable filled_;      // a delayed batch is full
  bool delaying_ = false;
  bool company_ends_delay_ = false;  // the delay is busy_delay's (delay_can_end)
  Stats stats_;
  std::thread thread_;
};

}  // namespace kernex
