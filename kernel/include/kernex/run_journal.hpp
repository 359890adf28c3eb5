// Makes a run resumable after its process died (kill -9 while an approval waited). The loop
// records each model answer and each tool call's start and result under keys that are the same
// when the run is started again with the same journal; a resumed run replays what is recorded
// instead of calling the provider or running a tool again. A call recorded as started but not
// finished is never run a second time: its result says it was interrupted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kernex/error.hpp"
#include "kernex/message.hpp"
#include "kernex/tool.hpp"

namespace kernex {

class RunJournal {
 public:
  virtual ~RunJournal() = default;

  // The root loop's answer of model call `turn` (1, 2, ...), if recorded.
  virtual Result<std::optional<Response>> response(std::uint32_t turn) = 0;
  virtual Result<void> record_response(std::uint32_t turn, const Response& response) = 0;

  struct ToolEntry {
    bool started = false;
    std::optional<ToolResult> result;  // set once finished
  };
  // Keys: "<turn>.<index>" for the model's calls (index from 0 in the answer's order), and
  // "<turn>.<index>/<n>" for the n-th call (from 1) made by code that tool ran.
  virtual Result<ToolEntry> tool(const std::string& key) = 0;
  // Stored before the tool runs: an error means the tool is not run.
  virtual Result<void> tool_started(const std::string& key, const ToolCall& call) = 0;
  virtual Result<void> tool_finished(const std::string& key, const ToolResult& result) = 0;
};

// The start of the result of a call that was started before a restart and never finished.
inline constexpr const char* kInterruptedToolText =
    "Tool call interrupted: the server stopped after the tool started and before its result was "
    "stored; it was not run again";

}  // namespace kernex
