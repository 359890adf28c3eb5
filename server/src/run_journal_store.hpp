// The journals of serve's runs in serve.db (RunOptions::journal): each model answer and each
// tool call's start and result, committed before the kernel goes on, so a run resumed after
// kill -9 replays them (no second provider call for a recorded turn, no tool run twice).
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "kernex/run_journal.hpp"

struct sqlite3;

namespace kernex::server {

class JournalStore {
 public:
  static Result<std::unique_ptr<JournalStore>> open(const std::filesystem::path& file);
  ~JournalStore();
  JournalStore(const JournalStore&) = delete;
  JournalStore& operator=(const JournalStore&) = delete;

  // The journal of run `run_id`: the same entries whichever process asks.
  std::shared_ptr<RunJournal> journal(const std::string& run_id);
  // Drops a finished run's entries (they hold its model answers and tool results).
  Result<void> forget(const std::string& run_id);

  Result<std::optional<Response>> response(const std::string& run_id, std::uint32_t turn);
  Result<void> record_response(const std::string& run_id, std::uint32_t turn,
                               const Response& response);
  Result<RunJournal::ToolEntry> tool(const std::string& run_id, const std::string& key);
  Result<void> tool_started(const std::string& run_id, const std::string& key,
                            const ToolCall& call);
  Result<void> tool_finished(const std::string& run_id, const std::string& key,
                             const ToolResult& result);

 private:
  explicit JournalStore(sqlite3* db) : db_(db) {}
  std::mutex mutex_;
  sqlite3* db_;
};

}  // namespace kernex::server
