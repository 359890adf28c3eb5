// The run: groups in order (a parallel group's phases on threads of their own), each phase taken
// from the journal when it finished before, the outcome and report at the end.
#include "kernex/topology/runner.hpp"

#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "kernex/suspend.hpp"
#include "kernex/trajectory_segments.hpp"
#include "run_context.hpp"

namespace kernex::topology {

std::filesystem::path runs_dir(const std::filesystem::path& data_dir) {
  return data_dir / "topology-runs";
}

Result<std::map<std::string, TierModel>> tiers_from_config(const Config& config) {
  std::map<std::string, TierModel> out;
  auto it = config.sections.find("topology");
  if (it == config.sections.end()) return out;
  const std::string where = "kernex.yaml: topology";
  const Json& section = it->second;
  if (!section.is_object()) return fail(ErrorCode::Config, where + ": expected a mapping");
  for (const auto& [key, value] : section.items()) {
    if (key != "tiers") return fail(ErrorCode::Config, where + "." + key + ": unknown key (tiers)");
    if (!value.is_object()) return fail(ErrorCode::Config, where + ".tiers: expected a mapping");
    for (const auto& [tier, spec] : value.items()) {
      const std::string at = where + ".tiers." + tier;
      if (!valid_name(tier) || !spec.is_object())
        return fail(ErrorCode::Config, at + ": expected a tier name and {provider, model}");
      TierModel m;
      for (const auto& [field, v] : spec.items()) {
        if ((field != "provider" && field != "model") || !v.is_string() ||
            v.get<std::string>().empty())
          return fail(ErrorCode::Config,
                      at + "." + field + ": expected provider or model, a string");
        (field == "provider" ? m.provider : m.model) = v.get<std::string>();
      }
      out.emplace(tier, std::move(m));
    }
  }
  return out;
}

namespace detail {

void RunContext::emit(Json event) {
  if (!options.on_event) return;
  std::lock_guard lock(mutex);
  options.on_event(event);
}

std::unexpected<Error> RunContext::limit(const std::string& outcome, const std::string& message) {
  {
    std::lock_guard lock(mutex);
    if (!limit_outcome) limit_outcome = outcome;
  }
  return fail(ErrorCode::Limit, message);
}

void RunContext::add_step(StepReport report) {
  std::lock_guard lock(mutex);
  steps.push_back(std::move(report));
}

namespace {

std::string make_run_id() {
  return format_run_id(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()),
                       std::random_device{}());
}

std::string as_text(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return value.dump(2, ' ', false, Json::error_handler_t::replace);
}

// One phase, from the journal when it finished before a crash.
Result<Json> phase_or_journal(RunContext& ctx, const Phase& phase, PhaseReport& report) {
  const std::string id = single_step(phase) ? phase.name : "phase:" + phase.name;
  report.name = phase.name;
  if (auto entry = ctx.log->step(id)) {
    if (single_step(phase)) {  // its one step's record: what it used counts again
      const auto usage = (*entry)["usage"].get<Usage>();
      ctx.ledger->restore(phase.agent, usage);
      ctx.add_step({phase.name, phase.name, phase.agent, true, usage, entry->value("turns", 0U)});
    }
    report.status = "resumed";
    report.output = entry->value("output", Json());
    return report.output;
  }
  ctx.emit({{"type", "phase_start"},
            {"phase", phase.name},
            {"agent", phase.agent},
            {"kind", to_string(phase.type)}});
  auto output = run_phase(ctx, phase);
  if (!output) {
    report.status = "failed";
    report.error = output.error().describe();
    ctx.emit({{"type", "phase_end"},
              {"phase", phase.name},
              {"status", "failed"},
              {"error", report.error}});
    return output;
  }
  if (!single_step(phase)) {
    KERNEX_RETURN_IF_ERROR(
        ctx.log->record(id, {{"text", as_text(*output)}, {"output", *output}, {"usage", Usage{}}}));
  }
  report.status = "done";
  report.output = *output;
  ctx.emit({{"type", "phase_end"}, {"phase", phase.name}, {"status", "done"}});
  return output;
}

// A group's phases run concurrently; every one ends (and journals) before the first error is
// returned, so a resume re-runs only those that did not finish.
Result<void> run_group(RunContext& ctx, const std::vector<std::size_t>& group,
                       std::vector<PhaseReport>& reports) {
  std::vector<Result<Json>> results(group.size(), fail(ErrorCode::Internal, "not run"));
  std::vector<PhaseReport> mine(group.size());
  if (group.size() == 1) {
    results[0] = phase_or_journal(ctx, ctx.topology.phases[group[0]], mine[0]);
  } else {
    const BlockingScope joining;  // the phases run on threads of their own
    std::vector<std::jthread> threads;
    for (std::size_t k = 0; k < group.size(); ++k) {
      threads.emplace_back(
          [&, k] { results[k] = phase_or_journal(ctx, ctx.topology.phases[group[k]], mine[k]); });
    }
  }
  std::optional<Error> first;
  for (std::size_t k = 0; k < group.size(); ++k) {
    const Phase& phase = ctx.topology.phases[group[k]];
    if (results[k]) {
      ctx.artifacts[phase.output] = *results[k];
      ctx.types[phase.output] = phase.output_type;
    } else if (!first || first->code == ErrorCode::Cancelled) {
      first = results[k].error();
    }
    reports.push_back(std::move(mine[k]));
  }
  if (first) return std::unexpected(*first);
  return {};
}

Result<void> run_groups(RunContext& ctx, std::vector<PhaseReport>& reports) {
  const auto groups = ctx.topology.groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto done = run_group(ctx, groups[g], reports);
    if (!done) {
      for (std::size_t rest = g + 1; rest < groups.size(); ++rest) {
        for (auto i : groups[rest])
          reports.push_back({ctx.topology.phases[i].name, "not_run", Json(), ""});
      }
      return done;
    }
  }
  return {};
}

std::shared_ptr<Trajectory> open_run_trajectory(const Kernel& kernel) {
  const Config& config = kernel.config();
  if (!config.trajectories || config.data_dir.empty()) return nullptr;
  auto opened = open_trajectory(config.data_dir / "trajectories");
  return opened ? *opened : nullptr;
}

}  // namespace
}  // namespace detail

Result<TopologyResult> run(Kernel& kernel, const Topology& topology, const RunnerOptions& options) {
  const auto& data_dir = kernel.config().data_dir;
  if (data_dir.empty()) return fail(ErrorCode::Config, "a topology run needs a data dir");
  std::string run_id = options.run_id.empty() ? new_run_id() : options.run_id;
  if (!valid_name(run_id))
    return fail(ErrorCode::Usage, "run id \"" + run_id.substr(0, 80) +
                                      "\" is not valid (1-64 letters, digits, '-', '_')");
  KERNEX_ASSIGN_OR_RETURN(
      auto log, detail::RunLog::open(runs_dir(data_dir) / run_id, topology.digest(), topology.name,
                                     options.input, options.durable));
  AgentLimits totals = topology.limits;
  totals.budgets = options.base.budgets.over(totals.budgets);  // (its max_turns goes unused)
  if (options.wall_time_ms) totals.wall_time_ms = options.wall_time_ms;
  detail::RunContext ctx(kernel, topology, options, run_id, std::move(log));
  std::stop_callback cancel(options.base.stop, [&ctx] { ctx.stop.request_stop(); });
  ctx.ledger = std::make_shared<detail::Ledger>(totals, ctx.stop);
  ctx.trajectory = detail::open_run_trajectory(kernel);
  ctx.artifacts["input"] = options.input;
  ctx.types["input"] = ArtifactType::Text;
  if (ctx.trajectory)
    ctx.trajectory->record("run_start", {{"run_id", ctx.trajectory->run_id()},
                                         {"kind", "topology"},
                                         {"question", options.input},
                                         {"topology", topology.name},
                                         {"topology_run", run_id},
                                         {"resumed", ctx.log->resumed()},
                                         {"provider", ""},
                                         {"model", ""}});
  TopologyResult result;
  result.run_id = run_id;
  auto done = detail::run_groups(ctx, result.phases);
  if (!done && done.error().code == ErrorCode::Limit && ctx.limit_outcome)
    result.outcome = *ctx.limit_outcome;
  else if (!done && done.error().code == ErrorCode::Cancelled)
    result.outcome =
        ctx.ledger->exhausted() ? "budget_exhausted:" + *ctx.ledger->exhausted() : "cancelled";
  result.artifacts = ctx.artifacts;
  result.steps = std::move(ctx.steps);
  result.usage = ctx.ledger->total();
  result.per_agent = ctx.ledger->per_agent();
  result.tool_calls = ctx.ledger->tool_calls();
  if (ctx.trajectory) {
    result.trajectory_id = ctx.trajectory->run_id();
    ctx.trajectory->record("run_end", {{"outcome", result.outcome},
                                       {"input_tokens", result.usage.input_tokens},
                                       {"output_tokens", result.usage.output_tokens},
                                       {"cost_usd", result.usage.cost_usd},
                                       {"error", done ? "" : done.error().describe()}});
  }
  if (!done && result.outcome == "end_turn") return std::unexpected(done.error());
  if (done && !topology.phases.empty())
    result.text = detail::as_text(ctx.artifacts[topology.phases.back().output]);
  return result;
}

std::string new_run_id() { return detail::make_run_id(); }

Json to_json(const TopologyResult& r) {
  Json phases = Json::array();
  for (const auto& p : r.phases) {
    Json j{{"name", p.name}, {"status", p.status}, {"output", p.output}};
    if (!p.error.empty()) j["error"] = p.error;
    phases.push_back(std::move(j));
  }
  Json steps = Json::array();
  for (const auto& s : r.steps) {
    steps.push_back({{"id", s.id},
                     {"phase", s.phase},
                     {"agent", s.agent},
                     {"resumed", s.resumed},
                     {"turns", s.turns},
                     {"usage", s.usage}});
  }
  Json agents = Json::object();
  for (const auto& [name, usage] : r.per_agent) agents[name] = usage;
  return {{"run_id", r.run_id},
          {"outcome", r.outcome},
          {"text", r.text},
          {"artifacts", r.artifacts},
          {"phases", phases},
          {"steps", steps},
          {"usage", r.usage},
          {"per_agent", agents},
          {"tool_calls", r.tool_calls},
          {"trajectory", r.trajectory_id}};
}

}  // namespace kernex::topology
