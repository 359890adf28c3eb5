#include "run_plan.hpp"

#include "kernex/number.hpp"

namespace kernex {
namespace {

Json merged_options(const Config& config, const std::string& name, const Json& overrides) {
  Json options = Json::object();
  if (config.provider.name == name && config.provider.config.is_object())
    options = config.provider.config;
  if (auto it = config.provider_options.find(name);
      it != config.provider_options.end() && it->second.is_object()) {
    options.merge_patch(it->second);
  }
  if (overrides.is_object()) options.merge_patch(overrides);
  return options;
}

// The config's limits with the run's overrides: one Limits type from kernex.yaml to the loop.
Limits root_limits(const Limits& config, const RunOptions& options) {
  Limits limits = config;
  limits.budgets = options.budgets.over(config.budgets);
  limits.max_depth = options.max_depth.value_or(config.max_depth);
  return limits;
}

}  // namespace

Result<RunPlan> plan_run(const Config& config, const RunOptions& options, const Request& request) {
  RunPlan plan;
  plan.parent = dynamic_cast<KernelRunServices*>(options.parent.get());
  if (options.parent && plan.parent == nullptr)
    return fail(ErrorCode::Internal, "RunOptions::parent must come from a kernel run");
  plan.provider = options.provider.value_or(config.provider.name);
  if (plan.provider.empty()) {
    return fail(ErrorCode::Config,
                "no provider: set `provider:` in kernex.yaml, or pass --provider NAME to kernex "
                "run, chat or serve");
  }
  plan.provider_options = merged_options(config, plan.provider, options.provider_options);
  // An embedder's NaN budget would compare false and switch the limit off: refuse it.
  for (const auto& [budget, name] :
       {std::pair{options.budgets.cost_budget_usd, "cost_budget_usd"},
        std::pair{config.limits.budgets.cost_budget_usd, "limits.cost_budget_usd"}}) {
    if (!budget) continue;
    if (auto problem = number_problem(*budget, 0, kMaxCostBudgetUsd))
      return fail(ErrorCode::Config, std::string(name) + ": " + *problem);
  }
  if (plan.parent != nullptr) {
    plan.limits = plan.parent->tree()->limits();
    plan.limits.budgets.max_turns = options.budgets.max_turns.value_or(config.limits.max_turns());
  } else {
    plan.limits = root_limits(config.limits, options);
  }
  const bool memory_kept = !options.history || options.memory_with_history;
  plan.uses_memory = plan.parent == nullptr && memory_kept;
  plan.audits_to_memory = memory_kept;
  plan.conversation = options.conversation.value_or(
      ConversationKey{config.channel, request.sender_id, config.project});
  return plan;
}

}  // namespace kernex
