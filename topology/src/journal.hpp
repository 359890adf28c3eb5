// The two journals of a topology run, both under `<data_dir>/topology-runs/<run_id>/` (the data
// dir is out of every tool's reach, yet read back as hostile: a torn, edited or foreign file is an
// error naming it, never a crash).
// - RunLog (`journal.json`): the topology's digest and input, and every finished step's output
//   and usage. Rewritten whole (temp file, fsync, rename, fsync of the folder) after each step.
// - StepJournal (`steps/<n>.jsonl`): a kernel RunJournal for one agent call, one fsynced JSON line
//   per recorded answer or tool event, so a call that died mid-way replays its finished turns.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/run_journal.hpp"

namespace kernex::topology::detail {

inline constexpr std::size_t kMaxJournalBytes = 64u << 20;

// `sync`: fsync the file and its folder, so the new content survives a power cut too (without it,
// it survives the process being killed, as the page cache does).
Result<void> write_file_atomic(const std::filesystem::path& file, std::string_view content,
                               bool sync = true);

class RunLog {
 public:
  // Opens the run's log, or starts one. A log made for another topology (its digest) or another
  // input is a Usage error: a resume must run the same thing.
  static Result<std::unique_ptr<RunLog>> open(const std::filesystem::path& dir,
                                              const std::string& digest,
                                              const std::string& topology, const std::string& input,
                                              bool sync = true);
  bool resumed() const { return resumed_; }
  std::optional<Json> step(const std::string& id) const;  // {text, output, usage, turns, agent}
  Result<void> record(const std::string& id, Json entry);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  RunLog() = default;
  Result<void> load(const std::string& text, const std::string& digest, const std::string& input);
  mutable std::mutex mutex_;
  std::filesystem::path dir_;
  Json doc_;
  bool resumed_ = false;
  bool sync_ = true;
};

class StepJournal final : public RunJournal {
 public:
  static Result<std::shared_ptr<StepJournal>> open(const std::filesystem::path& file);
  ~StepJournal() override;
  Result<std::optional<Response>> response(std::uint32_t turn) override;
  Result<void> record_response(std::uint32_t turn, const Response& response) override;
  Result<ToolEntry> tool(const std::string& key) override;
  Result<void> tool_started(const std::string& key, const ToolCall& call) override;
  Result<void> tool_finished(const std::string& key, const ToolResult& result) override;

 private:
  explicit StepJournal(int fd) : fd_(fd) {}
  Result<void> append(const Json& line, bool sync);
  void replay(const std::string& text);
  std::mutex mutex_;
  int fd_ = -1;
  std::map<std::uint32_t, Response> responses_;
  std::map<std::string, ToolEntry> tools_;
};

}  // namespace kernex::topology::detail
