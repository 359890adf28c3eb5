// The effective limits of one run, read by the loop and by the run tree.
#pragma once

#include <cstdint>
#include <optional>

namespace kernex {

// The config's limits overridden by the run's options (see plan_run). The budgets and the
// depth cover a root run and every sub-call under it (the RunTree's); max_turns is each run's.
struct RunLimits {
  std::uint32_t max_turns = 50;  // model calls of this run
  std::uint32_t max_depth = 1;   // how deep rlm_query may recurse below the root (depth 0)
  std::optional<std::uint64_t> token_budget;  // billed tokens (Usage::billed_tokens)
  std::optional<double> cost_budget_usd;
  std::optional<std::uint32_t> tool_call_budget;
};

}  // namespace kernex
