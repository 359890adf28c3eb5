#include "ledger.hpp"

namespace kernex::topology::detail {

void Ledger::charge(const std::string& agent, const Usage& usage) {
  std::lock_guard lock(mutex_);
  used_ += usage;
  per_agent_[agent] += usage;
  check_locked();
}

void Ledger::tool_call(const std::string& agent) {
  std::lock_guard lock(mutex_);
  ++tools_;
  (void)agent;
  check_locked();
}

void Ledger::restore(const std::string& agent, const Usage& usage) {
  std::lock_guard lock(mutex_);
  used_ += usage;
  per_agent_[agent] += usage;
}

void Ledger::check_locked() {
  if (exhausted_) return;
  if (totals_.budgets.token_budget && used_.billed_tokens() >= *totals_.budgets.token_budget)
    exhausted_ = "tokens";
  else if (totals_.budgets.cost_budget_usd && used_.cost_usd >= *totals_.budgets.cost_budget_usd)
    exhausted_ = "cost";
  else if (totals_.budgets.tool_call_budget && tools_ > *totals_.budgets.tool_call_budget)
    exhausted_ = "tools";
  if (exhausted_) stop_.request_stop();
}

void Ledger::exhaust(const std::string& what) {
  {
    std::lock_guard lock(mutex_);
    if (!exhausted_) exhausted_ = what;
  }
  stop_.request_stop();
}

std::optional<std::string> Ledger::exhausted() const {
  std::lock_guard lock(mutex_);
  return exhausted_;
}

std::optional<std::uint64_t> Ledger::tokens_left() const {
  std::lock_guard lock(mutex_);
  if (!totals_.budgets.token_budget) return std::nullopt;
  const auto used = used_.billed_tokens();
  return used >= *totals_.budgets.token_budget ? 0 : *totals_.budgets.token_budget - used;
}

std::optional<double> Ledger::cost_left() const {
  std::lock_guard lock(mutex_);
  if (!totals_.budgets.cost_budget_usd) return std::nullopt;
  return std::max(0.0, *totals_.budgets.cost_budget_usd - used_.cost_usd);
}

std::optional<std::uint32_t> Ledger::tools_left() const {
  std::lock_guard lock(mutex_);
  if (!totals_.budgets.tool_call_budget) return std::nullopt;
  return tools_ >= *totals_.budgets.tool_call_budget ? 0
                                                     : *totals_.budgets.tool_call_budget - tools_;
}

std::optional<std::chrono::milliseconds> Ledger::wall_left() const {
  if (!totals_.wall_time_ms) return std::nullopt;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start_);
  const std::chrono::milliseconds total(*totals_.wall_time_ms);
  return spent >= total ? std::chrono::milliseconds(0) : total - spent;
}

Usage Ledger::total() const {
  std::lock_guard lock(mutex_);
  return used_;
}

std::map<std::string, Usage> Ledger::per_agent() const {
  std::lock_guard lock(mutex_);
  return per_agent_;
}

std::uint32_t Ledger::tool_calls() const {
  std::lock_guard lock(mutex_);
  return tools_;
}

StepTrajectory::StepTrajectory(std::shared_ptr<Trajectory> run, std::shared_ptr<Ledger> ledger,
                               std::string step, std::string phase, std::string agent)
    : run_(std::move(run)),
      ledger_(std::move(ledger)),
      step_(std::move(step)),
      phase_(std::move(phase)),
      agent_(std::move(agent)),
      id_(run_ ? run_->run_id() : std::string()) {}

const std::string& StepTrajectory::run_id() const { return id_; }

void StepTrajectory::record(std::string_view type, Json fields) {
  if (type == "provider_call" && fields.is_object()) {
    Usage usage;
    usage.input_tokens = uint_value(fields, "input_tokens");
    usage.output_tokens = uint_value(fields, "output_tokens");
    usage.cache_read_tokens = uint_value(fields, "cache_read_tokens");
    usage.cost_usd = fields.value("cost_usd", 0.0);
    ledger_->charge(agent_, usage);
  } else if (type == "tool_call") {
    ledger_->tool_call(agent_);
  }
  if (!run_) return;
  if (fields.is_object()) {
    fields["step"] = step_;
    fields["phase"] = phase_;
    fields["agent"] = agent_;
  }
  const std::string_view renamed = type == "run_start" ? "agent_start"
                                   : type == "run_end" ? "agent_end"
                                                       : type;
  run_->record(renamed, std::move(fields));
}

}  // namespace kernex::topology::detail
