// Services a tool may call back into while a run is going on (RunHandles::services). The kernel
// provides them per run; the REPL toolbox uses them for llm_query / rlm_query made by sandboxed
// code. One budget covers a run and every sub-call under it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"

namespace kernex {

class RunServices {
 public:
  virtual ~RunServices() = default;
  // 0 for a root run, 1 for a run started by rlm_query from depth 0, and so on.
  virtual std::uint32_t depth() const = 0;
  // This run's span in the trajectory's sub-call tree ("0" for the root; see trajectory.hpp).
  virtual const std::string& span() const = 0;
  // The same for a whole tree of runs and, when memory is on, for every turn of one
  // conversation (its id); a fresh id otherwise. With span() it keys per-run state such as a
  // REPL session.
  virtual const std::string& session() const = 0;
  // False when nothing can answer sub-queries (deferred mode: no provider); the REPL then hands
  // pending queries back to its caller instead of calling these.
  virtual bool can_query() const = 0;
  // One completion by the run's provider (or `model`), tools off. Counted against the tree's
  // budget; a used-up budget is an Error with ErrorCode::Limit naming it ("tokens", "cost",
  // "tool_calls", "depth").
  virtual Result<std::string> llm_query(const std::string& prompt,
                                        const std::optional<std::string>& model) = 0;
  // Several completions run concurrently (bounded); results in the order of `prompts`.
  virtual std::vector<Result<std::string>> llm_query_batched(
      const std::vector<std::string>& prompts, const std::optional<std::string>& model) = 0;
  // A recursive sub-agent one level deeper with a REPL of its own; `context`, when given, is
  // loaded there as the variable `context`. Returns its final answer. Error (Limit) past max_depth.
  virtual Result<std::string> rlm_query(const std::string& prompt,
                                        const std::optional<std::string>& context) = 0;
};

}  // namespace kernex
