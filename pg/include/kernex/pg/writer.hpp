// Group commit for PostgreSQL: the writes that concurrent runs make go through one GroupCommit
// per database, so a batch of them is one BEGIN ... COMMIT on the writer's own connection, with
// every statement of the batch sent in libpq's pipeline mode: a batch costs about one round trip
// and one WAL flush, not a transaction and a round trip per statement. Commits stay durable
// (synchronous_commit as the server has it, on by default): write() returns once its batch
// committed. A write that fails (an SQL error, or its check refusing what the statements found)
// fails alone: the batch is rolled back and run again without it, so the others are kept.
// KERNEX_GROUP_COMMIT=off (the benches' baseline): each write is its own transaction on a pooled
// connection, one round trip per statement, as before group commit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernex/group_commit.hpp"
#include "kernex/pg/pool.hpp"

namespace kernex::pg {

// One logical write: its statements run in order, in the transaction of its batch.
struct Write {
  std::vector<Statement> statements;
  // Sees every statement's rows once all of the batch ran, before the commit. An error fails
  // this write alone (its statements are undone, the batch's others kept); false undoes it but
  // reports success (an idempotent write that found itself already done). When a statement
  // fails, it is shown the rows of those before it and an error it returns is the write's (it
  // may know the cause better than the statement). Runs on the writer's thread, possibly more
  // than once (again when another write of the batch failed).
  std::function<Result<bool>(const std::vector<Rows>&)> check;
};

struct WriterStats {
  std::uint64_t writes = 0;        // write() calls that reached the database
  std::uint64_t batches = 0;       // GroupCommit batches (direct: one per write)
  std::uint64_t transactions = 0;  // COMMITs that succeeded
  std::uint64_t round_trips = 0;   // pipelines and statements sent, each waited on
  std::uint64_t failed = 0;        // writes that failed alone (the rest of their batch kept)
};

class Writer {
 public:
  // `pool`: its options open the writer's own connection; the direct path leases from it.
  explicit Writer(Pool& pool, GroupCommit::Options options = defaults());
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Returns once the batch holding `write` committed, or `write` failed.
  Result<void> write(const Write& write);
  // Queues `write` and returns; `done` runs (on the writer's thread) once its batch committed or
  // it failed.
  void submit(Write write, std::function<void(const Result<void>&)> done);
  WriterStats stats() const;
  bool direct() const { return group_->direct(); }
  // A batch of at most 64 writes: a failing write costs its batch a rerun.
  static GroupCommit::Options defaults();

 private:
  class Batch;
  Result<void> write_direct(const Write& write);

  Pool& pool_;
  Batch* batch_;  // owned by group_
  std::unique_ptr<GroupCommit> group_;
  std::atomic<std::uint64_t> direct_writes_{0}, direct_commits_{0}, direct_trips_{0};
};

}  // namespace kernex::pg
