// serve.db's one writer: the run path's writes of every store (runs, their events and ends,
// journals) are queued here from all runs and committed together, one transaction per batch
// (kernex/group_commit.hpp). Nothing is acknowledged before its batch is committed. The stores
// read on their own connections (WAL: a committed batch is visible to the next read).
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "kernex/group_commit.hpp"

namespace kernex::server {

class ServeWriter {
 public:
  // The writer of `file`, shared by every store of this process that has it open. The file's
  // tables exist already (the stores create them on their own connections first).
  static Result<std::shared_ptr<ServeWriter>> of(const std::filesystem::path& file);
  ~ServeWriter();

  // `work` gets the writer's connection inside the batch's transaction; returns once the batch
  // is committed. `durable`: the commit is fsynced (journals: a power loss keeps them too).
  using Work = std::function<Result<void>(sqlite3* db)>;
  Result<void> write(Work work, bool durable = false);
  // Queued behind every write before it, not waited on: for writes nobody is told about (a run's
  // status on its way, a model's answer in its journal, a finished run's journal). It rides the
  // next batch someone waits on (a run's end, a durable tool start), or commits on its own within
  // GroupCommit's lazy_delay: a run pays no commit and no writer wake-up of its own for it. Items
  // keep their order, so a write waited on after it commits it too. A failure is logged under
  // `what`.
  void submit(Work work, std::string what);
  // Queued behind every write before it and committed as soon as the writer can (it is woken, not
  // lazy), without the caller waiting: `done` is told the result on the writer's thread (or on
  // that of a write() that led the batch), so it must not take a lock a writer may hold.
  void submit_then(Work work, std::function<void(const Result<void>&)> done);
  GroupCommit::Stats stats() const { return commit_->stats(); }

 private:
  ServeWriter(sqlite3* db, std::unique_ptr<GroupCommit> commit)
      : db_(db), commit_(std::move(commit)) {}
  sqlite3* db_;
  std::unique_ptr<GroupCommit> commit_;
};

}  // namespace kernex::server
