// One agent call as a Kernel::run: the agent's provider or tier, prompt, tools, workspace view,
// limits (its own, capped by what is left of the run's totals) and kernel (its own when it names a
// sandbox profile, toolboxes or permission rules); a watchdog for wall time; a turn journal.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <thread>

#include "kernex/suspend.hpp"
#include "kernex/workspace/sessions.hpp"
#include "run_context.hpp"

namespace kernex::topology::detail {
namespace {

bool has_own_kernel(const Agent& a) {
  return a.sandbox_profile || !a.toolboxes.empty() || !a.allow.empty() || !a.ask.empty() ||
         !a.deny.empty();
}

Result<Kernel*> kernel_for(RunContext& ctx, const Agent& agent) {
  if (!has_own_kernel(agent)) return &ctx.kernel;
  std::lock_guard lock(ctx.mutex);
  if (auto it = ctx.agent_kernels.find(agent.name); it != ctx.agent_kernels.end())
    return it->second.get();
  Config config = ctx.kernel.config();
  config.allow.insert(config.allow.end(), agent.allow.begin(), agent.allow.end());
  config.ask.insert(config.ask.end(), agent.ask.begin(), agent.ask.end());
  config.deny.insert(config.deny.end(), agent.deny.begin(), agent.deny.end());
  if (agent.sandbox_profile || !agent.toolboxes.empty()) {
    // Its toolboxes (the sandboxed files and script ones by default), each with the options the
    // config gives it and, for those that spawn commands, the agent's profile.
    const std::vector<std::string> names =
        agent.toolboxes.empty() ? std::vector<std::string>{"files", "script"} : agent.toolboxes;
    std::vector<PluginRef> boxes;
    for (const auto& name : names) {
      PluginRef ref{name, Json::object()};
      for (const auto& configured : config.toolboxes.value_or(std::vector<PluginRef>{})) {
        if (configured.name == name) ref.config = configured.config;
      }
      if (agent.sandbox_profile && (name == "files" || name == "script"))
        ref.config["profile"] = agent.sandbox_profile->string();
      boxes.push_back(std::move(ref));
    }
    config.toolboxes = std::move(boxes);
  }
  auto made = Kernel::create(std::move(config));
  if (!made) return fail(ErrorCode::Config, "agent '" + agent.name + "': its kernel", made.error());
  auto* kernel = made->get();
  ctx.agent_kernels.emplace(agent.name, std::move(*made));
  return kernel;
}

template <class T>
std::optional<T> min_of(std::optional<T> a, std::optional<T> b) {
  if (a && b) return std::min(*a, *b);
  return a ? a : b;
}

// The tools a read-only agent may have: those that only read.
const std::vector<std::string>& read_only_tools() {
  static const std::vector<std::string> tools{"read", "glob", "grep"};
  return tools;
}

Result<RunOptions> agent_options(RunContext& ctx, const StepCall& call, const Agent& agent) {
  RunOptions o = ctx.options.base;
  o.sink = nullptr;
  o.trajectory = nullptr;
  o.journal = nullptr;
  const auto tier = agent.tier ? agent.tier : std::optional<std::string>(call.phase->model_tier);
  if (auto it = ctx.options.tiers.find(tier.value_or("")); it != ctx.options.tiers.end()) {
    if (it->second.provider) o.provider = it->second.provider;
    if (it->second.model) o.model = it->second.model;
  } else if (agent.tier) {
    return fail(ErrorCode::Config, "agent '" + agent.name + "': tier '" + *agent.tier +
                                       "' is not mapped in the config (topology.tiers)");
  }
  if (agent.provider) o.provider = agent.provider;
  if (agent.model) o.model = agent.model;
  const Budgets& own = agent.limits.budgets;
  o.budgets.max_turns = call.phase->max_turns ? call.phase->max_turns : own.max_turns;
  if (!o.budgets.max_turns) o.budgets.max_turns = ctx.options.base.budgets.max_turns;
  o.budgets.token_budget = min_of(own.token_budget, ctx.ledger->tokens_left());
  o.budgets.cost_budget_usd = min_of(own.cost_budget_usd, ctx.ledger->cost_left());
  o.budgets.tool_call_budget = min_of(own.tool_call_budget, ctx.ledger->tools_left());
  o.allowed_tools = agent.tools;
  if (agent.workspace == WorkspaceView::ReadOnly) {
    std::vector<std::string> allowed;
    for (const auto& t : agent.tools.value_or(read_only_tools())) {
      if (std::ranges::find(read_only_tools(), t) != read_only_tools().end()) allowed.push_back(t);
    }
    o.allowed_tools = std::move(allowed);
  }
  o.history = call.history;  // set: no memory is read or written, the agent sees only this
  o.extra_system_prompt = agent.prompt;
  o.kind = "run";
  if (!ctx.options.workspace.empty()) o.workspace = ctx.options.workspace;
  if (agent.workspace != WorkspaceView::Shared && !ctx.options.workspace.empty()) {
    // Its own layer over the workspace (a read-only agent's too: whatever a tool tries to write
    // never reaches the real tree); `kernex workspace --session topology-<run>-<agent>`.
    KERNEX_ASSIGN_OR_RETURN(
        auto overlay, workspace::session_overlay(
                          workspace::overlays_dir(ctx.kernel.config().data_dir),
                          "topology-" + ctx.run_id + "-" + agent.name, ctx.options.workspace));
    o.workspace = overlay.lower();
    o.workspace_layers = overlay.layer_dir();
  }
  if (ctx.options.sources_for) {
    KERNEX_ASSIGN_OR_RETURN(auto sources, ctx.options.sources_for(agent));
    o.sources.insert(o.sources.end(), sources.begin(), sources.end());
  }
  return o;
}

// Stops the call when its wall time (its own, or what is left of the run's) runs out.
class Watchdog {
 public:
  Watchdog(RunContext& ctx, const Agent& agent, std::stop_source call_stop) {
    std::optional<std::chrono::milliseconds> own;
    if (agent.limits.wall_time_ms) own = std::chrono::milliseconds(*agent.limits.wall_time_ms);
    const auto total = ctx.ledger->wall_left();
    if (!own && !total) return;
    const bool run_total = total && (!own || *total <= *own);
    const auto limit = run_total ? *total : *own;
    thread_ = std::jthread([this, &ctx, limit, run_total, call_stop](std::stop_token st) mutable {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait_for(lock, st, limit, [] { return false; });
      if (st.stop_requested()) return;
      fired_ = true;
      if (run_total) ctx.ledger->exhaust("wall_time");
      call_stop.request_stop();
    });
  }
  bool fired() const { return fired_; }

 private:
  std::atomic<bool> fired_{false};
  std::jthread thread_;
};

std::string journal_name(const std::string& id, std::uint32_t attempt) {
  std::string name = id;
  std::ranges::replace(name, '/', '.');
  return name + "." + std::to_string(attempt) + ".jsonl";
}

Result<RunResult> call_once(RunContext& ctx, const StepCall& call, const Agent& agent,
                            std::uint32_t attempt, bool& timed_out) {
  KERNEX_ASSIGN_OR_RETURN(auto options, agent_options(ctx, call, agent));
  KERNEX_ASSIGN_OR_RETURN(auto* kernel, kernel_for(ctx, agent));
  KERNEX_ASSIGN_OR_RETURN(options.journal, StepJournal::open(ctx.log->dir() / "steps" /
                                                             journal_name(call.id, attempt)));
  options.trajectory = std::make_shared<StepTrajectory>(ctx.trajectory, ctx.ledger, call.id,
                                                        call.phase->name, agent.name);
  if (ctx.options.stream && ctx.options.on_event) {
    options.sink = [&ctx, &call, &agent](const StreamEvent& e) {
      if (e.kind == StreamEvent::Kind::TextDelta)
        ctx.emit({{"type", "delta"},
                  {"step", call.id},
                  {"phase", call.phase->name},
                  {"agent", agent.name},
                  {"text", e.text}});
    };
  }
  std::stop_source call_stop;
  std::stop_callback link(ctx.stop.get_token(), [&call_stop] { call_stop.request_stop(); });
  options.stop = call_stop.get_token();
  Watchdog watchdog(ctx, agent, call_stop);
  auto result = kernel->run(Request::from_text("topology", call.message), options);
  timed_out = watchdog.fired();
  return result;
}

// A call that did not end its turn: the limit that ended it, as the run's outcome.
std::unexpected<Error> not_finished(RunContext& ctx, const StepCall& call, const RunResult& r,
                                    bool timed_out) {
  const std::string who = "phase '" + call.phase->name + "', agent '" + call.agent + "'";
  if (auto total = ctx.ledger->exhausted())
    return ctx.limit("budget_exhausted:" + *total,
                     who + ": the run's " + *total + " budget is used up");
  if (r.outcome == Outcome::Cancelled && timed_out)
    return ctx.limit("budget_exhausted:wall_time", who + ": its wall time ran out");
  if (r.outcome == Outcome::Cancelled) return fail(ErrorCode::Cancelled, who + ": cancelled");
  return ctx.limit(std::string(to_string(r.outcome)),
                   who + ": ended by " + std::string(to_string(r.outcome)));
}

// Waits out a backoff; false when the run was stopped meanwhile.
bool backoff(RunContext& ctx, std::chrono::milliseconds wait) {
  const BlockingScope waiting;
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  const auto token = ctx.stop.get_token();
  cv.wait_for(lock, token, wait, [] { return false; });
  return !token.stop_requested();
}

Result<StepOutput> resumed(RunContext& ctx, const StepCall& call, const Json& entry) {
  StepReport report{call.id,
                    call.phase->name,
                    call.agent,
                    true,
                    entry["usage"].get<Usage>(),
                    entry.value("turns", 0U)};
  ctx.ledger->restore(call.agent, report.usage);
  ctx.add_step(std::move(report));
  return StepOutput{entry["text"].get<std::string>(), entry.value("output", Json())};
}

}  // namespace

Result<StepOutput> run_step(RunContext& ctx, const StepCall& call, const Accept& accept) {
  if (auto entry = ctx.log->step(call.id)) return resumed(ctx, call, *entry);
  const Agent& agent = ctx.topology.agents.at(call.agent);
  ctx.emit({{"type", "step_start"},
            {"step", call.id},
            {"phase", call.phase->name},
            {"agent", call.agent}});
  std::chrono::milliseconds wait(call.phase->backoff_ms);
  for (std::uint32_t attempt = 0;; ++attempt) {
    if (ctx.stop.stop_requested()) {
      if (auto total = ctx.ledger->exhausted())
        return ctx.limit("budget_exhausted:" + *total,
                         "the run's " + *total + " budget is used up");
      return fail(ErrorCode::Cancelled, "the run was stopped");
    }
    bool timed_out = false;
    auto result = call_once(ctx, call, agent, attempt, timed_out);
    Result<Json> output = fail(ErrorCode::Internal, "not run");
    if (result && result->outcome != Outcome::EndTurn)
      return not_finished(ctx, call, *result, timed_out);
    if (!result && ctx.ledger->exhausted()) return not_finished(ctx, call, RunResult{}, false);
    if (result) output = accept(result->text);
    if (result && output) {
      StepReport report{call.id, call.phase->name, call.agent, false, result->usage, result->turns};
      KERNEX_RETURN_IF_ERROR(ctx.log->record(call.id, {{"text", result->text},
                                                       {"output", *output},
                                                       {"usage", result->usage},
                                                       {"turns", result->turns},
                                                       {"agent", call.agent}}));
      ctx.add_step(std::move(report));
      ctx.emit({{"type", "step_end"},
                {"step", call.id},
                {"phase", call.phase->name},
                {"agent", call.agent}});
      return StepOutput{result->text, *output};
    }
    const Error error = result ? output.error() : result.error();
    if (error.code == ErrorCode::Cancelled || error.code == ErrorCode::Limit ||
        attempt >= call.phase->retries)
      return fail(
          error.code,
          "phase '" + call.phase->name + "', step '" + call.id + "' (agent '" + call.agent + "')",
          error);
    ctx.emit({{"type", "retry"},
              {"step", call.id},
              {"attempt", attempt + 1},
              {"error", error.describe()},
              {"backoff_ms", wait.count()}});
    if (!backoff(ctx, wait)) return fail(ErrorCode::Cancelled, "the run was stopped");
    wait = std::min(wait * 2, std::chrono::milliseconds(kMaxBackoffMs));
  }
}

std::optional<std::filesystem::path> layer_dir_of(const RunContext& ctx, const std::string& agent) {
  auto found = workspace::find_layer_in(workspace::overlays_dir(ctx.kernel.config().data_dir),
                                        "topology-" + ctx.run_id + "-" + agent);
  if (!found) return std::nullopt;
  return *found;
}

}  // namespace kernex::topology::detail
