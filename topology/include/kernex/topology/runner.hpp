// Runs a topology as one run: each agent call is a Kernel::run with the agent's own provider,
// prompt, tools, workspace view and limits; phases exchange named artifacts and each agent sees
// only its phase's inputs; one budget tree covers the whole run; a journal under the data dir
// (`topology-runs/<run_id>/`) records every finished step, so a run started again with the same
// id after a crash (kill -9) re-runs no finished phase, and replays the turns of an unfinished
// agent call from that call's own journal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/kernel.hpp"
#include "kernex/topology/topology.hpp"

namespace kernex::topology {

// What a tier (`model_tier` of a phase, `tier` of an agent) runs on: config `topology.tiers`.
struct TierModel {
  std::optional<std::string> provider;
  std::optional<std::string> model;
};
// Reads the config's `topology:` section ({tiers: {NAME: {provider, model}}}); none: no tiers.
Result<std::map<std::string, TierModel>> tiers_from_config(const Config& config);

struct RunnerOptions {
  std::string input;  // the `input` artifact (text)
  // The shared workspace; empty: each toolbox's own. Overlay views are layers over it.
  std::filesystem::path workspace;
  // Empty: a new run; the id of a journal under the data dir: that run, resumed.
  std::string run_id;
  std::map<std::string, TierModel> tiers;
  // Provider, model and options for agents that name none; budgets are totals for the run;
  // approver and stop apply to every agent call. Its sink is ignored (see on_event).
  RunOptions base;
  std::optional<std::uint32_t> wall_time_ms;  // total, over the run's own
  // Progress, one JSON object at a time, never concurrently: phase_start, phase_end, step_start,
  // step_end and (with `stream`) text deltas {type: "delta", phase, agent, text}.
  std::function<void(const Json&)> on_event;
  bool stream = false;
  // Each finished step's journal write is fsynced (file and folder), so it survives a power cut;
  // false: it survives the process being killed only (what the page cache keeps), for speed.
  bool durable = true;
  // Context sources for one agent's calls (its skills); unset: none.
  std::function<Result<std::vector<std::shared_ptr<ContextSource>>>(const Agent&)> sources_for;
};

struct StepReport {
  std::string id;  // "review", "map/item/2", "validate/fix/1", ...
  std::string phase;
  std::string agent;
  bool resumed = false;  // taken from the journal, not run
  Usage usage;
  std::uint32_t turns = 0;
};

struct PhaseReport {
  std::string name;
  std::string status;  // "done", "resumed", "failed", "not_run"
  Json output;         // the artifact's value
  std::string error;
};

struct TopologyResult {
  std::string run_id;
  std::string outcome = "end_turn";  // or budget_exhausted:tokens|cost|tools|wall_time,
                                     // max_turns, cancelled
  std::string text;                  // the last phase's output as text
  Json artifacts = Json::object();   // name -> value
  std::vector<PhaseReport> phases;
  std::vector<StepReport> steps;
  Usage usage;  // every agent call of this process, resumed steps' recorded usage included
  std::map<std::string, Usage> per_agent;
  std::uint32_t tool_calls = 0;
  std::string trajectory_id;
};

Json to_json(const TopologyResult& result);

// Runs `topology` on `kernel` (agents with their own sandbox profile, toolboxes or permission
// rules get a kernel of their own made from its config). A failing phase is an error naming it;
// a limit ends the run with that outcome, its finished phases journaled.
Result<TopologyResult> run(Kernel& kernel, const Topology& topology, const RunnerOptions& options);

// A fresh run id: "20261129T035512Z-3f9a0c" (sorts by start time).
std::string new_run_id();

// `<data_dir>/topology-runs`.
std::filesystem::path runs_dir(const std::filesystem::path& data_dir);

}  // namespace kernex::topology
