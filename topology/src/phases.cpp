// Each kind of phase as steps: standard (one call), map (a call per item), corrective loop
// (reviewer, then fixer, at most N rounds), handoff (the conversation passed on).
#include <atomic>
#include <thread>

#include "kernex/suspend.hpp"
#include "run_context.hpp"
#include "schema.hpp"

namespace kernex::topology::detail {
namespace {

// One step, journaled under the phase's name once its output passed the post checks: that record
// is also the phase's (one journal write per phase).
Result<Json> run_standard(RunContext& ctx, const Phase& phase) {
  const auto message = phase_message(ctx, phase, phase.agent, "");
  KERNEX_ASSIGN_OR_RETURN(
      auto out, run_step(ctx, {phase.name, &phase, phase.agent, message, {}},
                         [&](const std::string& text) -> Result<Json> {
                           KERNEX_ASSIGN_OR_RETURN(auto value, accept_output(ctx, phase, text));
                           KERNEX_RETURN_IF_ERROR(
                               check_validations(ctx, phase, phase.post_validation, value, "post"));
                           return value;
                         }));
  return out.output;
}

Result<Json> run_map(RunContext& ctx, const Phase& phase) {
  const Json& items = ctx.artifacts[phase.map_over];
  if (!items.is_array())
    return fail(ErrorCode::Parse, "phase '" + phase.name + "': map_over '" + phase.map_over +
                                      "' is not a JSON array");
  if (items.size() > phase.max_items)
    return fail(ErrorCode::Limit, "phase '" + phase.name + "': " + std::to_string(items.size()) +
                                      " items, more than max_items " +
                                      std::to_string(phase.max_items));
  std::vector<Result<StepOutput>> results(items.size(), fail(ErrorCode::Internal, "not run"));
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    for (std::size_t i; (i = next++) < items.size();) {
      const std::string extra =
          "## Item " + std::to_string(i + 1) + " of " + std::to_string(items.size()) + "\n" +
          (items[i].is_string() ? items[i].get<std::string>() : items[i].dump(2)) + "\n";
      results[i] =
          run_step(ctx,
                   {phase.name + "/item/" + std::to_string(i),
                    &phase,
                    phase.agent,
                    phase_message(ctx, phase, phase.agent, extra),
                    {}},
                   [&](const std::string& text) { return accept_output(ctx, phase, text); });
    }
  };
  std::vector<std::jthread> threads;
  const std::size_t n = std::min<std::size_t>(phase.concurrency, items.size());
  for (std::size_t t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  {
    const BlockingScope joining;
    threads.clear();
  }
  Json out = Json::array();
  for (auto& r : results) {
    if (!r) return std::unexpected(r.error());
    out.push_back(r->output);
  }
  return out;
}

Result<Json> verdict_of(const Phase& phase, const std::string& text) {
  Json v = extract_json(text);
  if (!v.is_object() || !v.contains("verdict") || !v["verdict"].is_string() ||
      (v["verdict"] != "pass" && v["verdict"] != "fail"))
    return fail(ErrorCode::Parse,
                "the reviewer's answer holds no verdict (a JSON object with "
                "\"verdict\": \"pass\" or \"fail\")");
  KERNEX_RETURN_IF_ERROR(validate(phase.verdict_schema, v, "the reviewer's verdict"));
  return v;
}

Result<Json> run_loop(RunContext& ctx, const Phase& phase) {
  for (std::uint32_t round = 0;; ++round) {
    const std::string tag = "round " + std::to_string(round + 1);
    KERNEX_ASSIGN_OR_RETURN(
        auto review,
        run_step(ctx,
                 {phase.name + "/review/" + std::to_string(round),
                  &phase,
                  phase.agent,
                  phase_message(ctx, phase, phase.agent,
                                "## Review (" + tag +
                                    ")\nAnswer with a JSON object holding "
                                    "\"verdict\": \"pass\" or \"fail\" and your findings.\n"),
                  {}},
                 [&](const std::string& text) { return verdict_of(phase, text); }));
    if (review.output["verdict"] == "pass") return review.output;
    if (round >= phase.max_rounds)
      return fail(ErrorCode::Tool, "phase '" + phase.name +
                                       "': the reviewer still fails the work "
                                       "after " +
                                       std::to_string(phase.max_rounds) + " fix round(s)");
    const std::string findings =
        "## Findings to fix (" + tag + ")\n" + review.output.dump(2) + "\n";
    KERNEX_RETURN_IF_ERROR(run_step(ctx,
                                    {phase.name + "/fix/" + std::to_string(round),
                                     &phase,
                                     phase.fix_agent,
                                     phase_message(ctx, phase, phase.fix_agent, findings),
                                     {}},
                                    [](const std::string& text) { return Json(text); }));
  }
}

// An answer that hands the conversation on: {"handoff": "<agent>"} (with a note, optionally).
std::optional<std::string> handoff_target(const std::string& text) {
  Json j = extract_json(text);
  if (j.is_object() && j.contains("handoff") && j["handoff"].is_string())
    return j["handoff"].get<std::string>();
  return std::nullopt;
}

Result<Json> run_handoff(RunContext& ctx, const Phase& phase) {
  std::string agent = phase.agent;
  std::vector<ContextEntry> history;
  std::string message = phase_message(ctx, phase, agent, "");
  for (std::uint32_t hop = 0;; ++hop) {
    KERNEX_ASSIGN_OR_RETURN(
        auto out,
        run_step(ctx, {phase.name + "/hop/" + std::to_string(hop), &phase, agent, message, history},
                 [](const std::string& text) { return Json(text); }));
    auto target = handoff_target(out.text);
    if (!target) return accept_output(ctx, phase, out.text);
    if (std::ranges::find(phase.handoffs, *target) == phase.handoffs.end())
      return fail(ErrorCode::Parse, "phase '" + phase.name + "': agent '" + agent +
                                        "' handed off to '" + target->substr(0, 64) +
                                        "', which is not in its handoffs");
    if (hop >= phase.max_handoffs)
      return fail(ErrorCode::Limit, "phase '" + phase.name + "': more than " +
                                        std::to_string(phase.max_handoffs) + " handoffs");
    history.push_back(ContextEntry::user(message));
    history.push_back(ContextEntry::assistant(out.text));
    message = "The conversation was handed to you (agent " + *target + ") by agent " + agent +
              ". Continue it.";
    agent = *target;
  }
}

}  // namespace

bool single_step(const Phase& phase) {
  return phase.type == PhaseType::Standard || phase.type == PhaseType::ParseBrief ||
         phase.type == PhaseType::ParseSummary;
}

Result<Json> run_phase(RunContext& ctx, const Phase& phase) {
  Json inputs = Json::object();
  for (const auto& name : phase.inputs) inputs[name] = ctx.artifacts[name];
  KERNEX_RETURN_IF_ERROR(check_validations(ctx, phase, phase.pre_validation, inputs, "pre"));
  Result<Json> output = fail(ErrorCode::Internal, "unknown phase type");
  switch (phase.type) {
    case PhaseType::Map:
      output = run_map(ctx, phase);
      break;
    case PhaseType::CorrectiveLoop:
      output = run_loop(ctx, phase);
      break;
    case PhaseType::Handoff:
      output = run_handoff(ctx, phase);
      break;
    default:
      return run_standard(ctx, phase);
  }
  if (!output) return output;
  KERNEX_RETURN_IF_ERROR(check_validations(ctx, phase, phase.post_validation, *output, "post"));
  return output;
}

}  // namespace kernex::topology::detail
