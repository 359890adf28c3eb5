// A run's trajectory: every provider call, tool call, code run and sub-call of one `kernex run`
// or `kernex rlm`, as JSON Lines, so a run can be listed, shown and viewed afterwards.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex {

// Event conventions (every event also gets "seq", "ts_ms" and "type" from the recorder):
//   run_start      {run_id, kind: "run"|"rlm", question, provider, model, conversation_id?}
//   provider_call  {span, depth, turn, model, input_tokens, output_tokens, cost_usd, latency_ms,
//                   tool_calls, error?}
//   tool_call      {span, depth, name, arguments, result, is_error, duration_ms, code_run?}
//                  (code_run: the id of the code run that called the tool from code)
//   code_run       {span, depth, session, id, code, stdout, stderr, wall_ms, cpu_ms, peak_rss_kb,
//                   tool_calls?, error?, state_lost?}
//   result         {span, depth, code_run, value}  (submit_result from code)
//   sub_call       {span, parent, depth, kind: "llm_query"|"rlm_query", model, prompt, answer,
//                   input_tokens, output_tokens, cost_usd, latency_ms, error?}
//   run_end        {outcome, text, turns, input_tokens, output_tokens, cost_usd, result?, error?}
// Spans name the sub-call tree: the root run is "0"; a sub-call of span S gets "S.1", "S.2", ...
// Text fields may be capped by the recorder (with a "…[truncated N bytes]" marker).
class Trajectory {
 public:
  virtual ~Trajectory() = default;
  virtual const std::string& run_id() const = 0;
  // Appends one event. Thread-safe (batched sub-calls record concurrently); never throws: a
  // write failure is logged once and the run goes on.
  virtual void record(std::string_view type, Json fields) = 0;
  // Appends one event without waiting for its write: the process's trajectory writer writes it
  // soon (batched with other runs'), and a later record() of the run returns only once this one
  // is written too (a run's events keep their order). For an event nothing has been told of yet,
  // a run's run_start: a kill -9 in the moment before the writer gets to it loses it, which
  // record() never does. The default is record().
  virtual void record_soon(std::string_view type, Json fields) { record(type, std::move(fields)); }
};

// Creates `<dir>/<run_id>.jsonl` (and `dir`), run ids sort by start time:
// "20261122T155012Z-3f9a0c". Text fields longer than `field_cap` bytes are cut with a marker.
Result<std::shared_ptr<Trajectory>> open_trajectory(const std::filesystem::path& dir,
                                                    std::size_t field_cap = 256 * 1024);

// Caps one text for a trajectory field: the first `cap` bytes (not splitting a UTF-8
// sequence) plus "…[truncated N bytes]".
std::string cap_field(std::string_view text, std::size_t cap);

}  // namespace kernex
