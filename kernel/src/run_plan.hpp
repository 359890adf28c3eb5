// The plan of one run: what the config and the run's options decide before anything starts.
#pragma once

#include <string>

#include "kernex/config.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/kernel.hpp"
#include "kernex/memory.hpp"
#include "kernex/message.hpp"
#include "kernel_run_services.hpp"

namespace kernex {

struct RunPlan {
  std::string provider;   // the provider plugin's name
  Json provider_options;  // the config's for that provider, the run's merged over them
  // One set of limits for the run: the loop reads them, and a root run's tree is opened with
  // them. A sub-run's budgets and depth are its tree's, so they cannot grow below the root.
  Limits limits;
  // Set for a sub-run (rlm_query): the services of the run that started it, whose tree it joins.
  KernelRunServices* parent = nullptr;
  // A root run reads and writes memory unless it was given its history (RunOptions::history).
  bool uses_memory = false;
  // Runs that may write memory feed its audit log (sub-runs too); runs given history don't.
  bool audits_to_memory = false;
  ConversationKey conversation;  // whose conversation in memory
};

// Errors: no provider named anywhere (Config), a parent that no kernel run made (Internal).
Result<RunPlan> plan_run(const Config& config, const RunOptions& options, const Request& request);

}  // namespace kernex
