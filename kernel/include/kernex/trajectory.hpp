// A run's trajectory: every provider call, tool call, code run and sub-call of one `kernex run`
// or `kernex rlm`, as JSON Lines, so a run can be listed, shown and viewed afterwards.
#pragma once

#include <string>
#include <string_view>

#include "kernex/json.hpp"

namespace kernex {

// Event conventions (every event also gets "seq", "ts_ms" and "type" from the recorder):
//   run_start      {run_id, kind: "run"|"rlm", question, provider, model}
//   provider_call  {span, depth, turn, model, input_tokens, output_tokens, cost_usd, latency_ms,
//                   tool_calls, error?}
//   tool_call      {span, depth, name, arguments, result, is_error, duration_ms}
//   code_run       {span, depth, session, code, stdout, stderr, wall_ms, cpu_ms, peak_rss_kb,
//                   error?, state_lost?}
//   sub_call       {span, parent, depth, kind: "llm_query"|"rlm_query", model, prompt, answer,
//                   input_tokens, output_tokens, cost_usd, latency_ms, error?}
//   run_end        {outcome, text, turns, input_tokens, output_tokens, cost_usd, error?}
// Spans name the sub-call tree: the root run is "0"; a sub-call of span S gets "S.1", "S.2", ...
// Text fields may be capped by the recorder (with a "…[truncated N bytes]" marker).
class Trajectory {
 public:
  virtual ~Trajectory() = default;
  virtual const std::string& run_id() const = 0;
  // Appends one event. Thread-safe (batched sub-calls record concurrently); never throws: a
  // write failure is logged once and the run goes on.
  virtual void record(std::string_view type, Json fields) = 0;
};

}  // namespace kernex
