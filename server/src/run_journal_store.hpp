// The journals of serve's runs (RunOptions::journal): each model answer and each tool call's
// start and result, committed before the kernel goes on, so a run resumed after kill -9 (or on
// another node) replays them: no second provider call for a recorded turn, no tool run twice.
// One interface, two stores: serve.db (one node, open()) and PostgreSQL (cluster mode,
// pg_run_stores.hpp), chosen by the run store the server uses.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kernex/run_journal.hpp"

namespace kernex::server {

class JournalStore {
 public:
  // serve.db's (one node).
  static Result<std::unique_ptr<JournalStore>> open(const std::filesystem::path& file);
  virtual ~JournalStore() = default;

  // The journal of the tenant's run `run_id`: the same entries whichever process asks. `empty`:
  // the caller knows the store holds nothing for the run yet (a new run's first attempt), so
  // reads answer nothing without asking the store until this journal records something.
  virtual std::shared_ptr<RunJournal> journal(const std::string& tenant, const std::string& run_id,
                                              bool empty) = 0;
  // Drops a finished run's entries (they hold its model answers and tool results).
  virtual Result<void> forget(const std::string& tenant, const std::string& run_id) = 0;
};

}  // namespace kernex::server
