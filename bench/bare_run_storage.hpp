// The storage a durable run start cannot do without, bare: what issue 37 names as a run's floor
// beside relaying ("one context build plus its share of one batched, fsynced commit"), for the
// bare proxy's durable mode (bare_proxy.hpp). Per run:
//   1. the context build's reads: the seven statements kernex's SQLite memory runs for a new
//      session (its conversation, the recall check, summaries, facts, lessons, outcomes, pending
//      tasks), in one read transaction on the request thread's own read connection, against a
//      kernex memory database;
//   2. the run's row (inserted running), queued to one writer thread that commits what is
//      queued in one transaction per batch (WAL, synchronous=FULL: an fsync a batch) and then
//      calls each run's `committed`.
// Nothing else: no trajectory, no JSON of the run's request, no prepared-statement cache misses.
// SQLite stays in bare_run_storage.cpp.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

namespace kernex::bench {

class BareRunStorage {
 public:
  // memory_db: an existing kernex memory database (the schema its statements need), with a read
  // connection for each of `threads` request threads; runs_db: made (a runs table as serve.db's,
  // with its indexes). Dies (bench::die) on a failure to open.
  BareRunStorage(const std::filesystem::path& memory_db, const std::filesystem::path& runs_db,
                 int threads);
  ~BareRunStorage();
  BareRunStorage(const BareRunStorage&) = delete;
  BareRunStorage& operator=(const BareRunStorage&) = delete;

  // The context build's reads for session `sender`, new; returns the rows read. Called from at
  // most `threads` threads.
  std::size_t context_build(const std::string& sender);
  // Queues the run's row; `committed` runs on the writer's thread once its batch is on disk.
  void record(std::string run_id, std::string session, std::function<void()> committed);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex::bench
