// What a tool may use of the run it is called in, beside the Context's data: live objects the
// kernel holds for the run, and grants only the host may give. Never serialized; a default
// RunHandles (a call outside any run, a test) has none of them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kernex {

class RunServices;
class Trajectory;

struct RunHandles {
  // Services tools may call back into during the run, e.g. llm_query from a REPL (may be null).
  std::shared_ptr<RunServices> services;
  // Where this run records its events (may be null).
  std::shared_ptr<Trajectory> trajectory;
  // Files outside the workspace that the host lets this run's sandboxed tools read (the contexts
  // of `kernex rlm --context`). Set by host code only (RunOptions::read_grants); tool arguments
  // never add to it.
  std::vector<std::string> read_grants;
  // Nonzero when code called the tool (a REPL's tools.call), not the model: return the whole
  // result up to this many bytes, never the model's cut view (structured, when the tool has a
  // structured form), and fail saying so past it. Zero: the model's call, cut as usual.
  std::size_t code_result_max_bytes = 0;
};

}  // namespace kernex
