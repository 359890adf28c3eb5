// What every part of one topology run shares: the kernel(s), the journal, the budget tree, the
// trajectory, the artifacts made so far, and the report being built.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "journal.hpp"
#include "kernex/kernel.hpp"
#include "kernex/topology/runner.hpp"
#include "ledger.hpp"

namespace kernex::topology::detail {

struct RunContext {
  RunContext(Kernel& k, const Topology& t, const RunnerOptions& o, std::string id,
             std::unique_ptr<RunLog> journal)
      : kernel(k), topology(t), options(o), run_id(std::move(id)), log(std::move(journal)) {}
  Kernel& kernel;
  const Topology& topology;
  const RunnerOptions& options;
  std::string run_id;
  std::unique_ptr<RunLog> log;
  std::stop_source stop;
  std::shared_ptr<Ledger> ledger;
  std::shared_ptr<Trajectory> trajectory;
  Json artifacts = Json::object();  // written between groups only; read during them
  std::map<std::string, ArtifactType> types;

  std::mutex mutex;  // guards the members below
  std::vector<StepReport> steps;
  std::map<std::string, std::unique_ptr<Kernel>> agent_kernels;
  std::optional<std::string> limit_outcome;

  void emit(Json event);
  // The first limit that ended something names the run's outcome.
  std::unexpected<Error> limit(const std::string& outcome, const std::string& message);
  void add_step(StepReport report);
};

// One agent call made as a step: taken from the journal when it finished before, else run (with
// its own turn journal) and, once `accept` takes its answer, journaled. Failed attempts (a
// provider error, an answer `accept` refuses) are retried with backoff as the phase allows.
struct StepCall {
  std::string id;  // unique in the run: "review", "map/item/3", "loop/fix/1"
  const Phase* phase = nullptr;
  std::string agent;
  std::string message;
  std::vector<ContextEntry> history;
};
using Accept = std::function<Result<Json>(const std::string& text)>;
struct StepOutput {
  std::string text;
  Json output;
};
Result<StepOutput> run_step(RunContext& ctx, const StepCall& call, const Accept& accept);

// The message an agent gets: its phase, its task, and only the inputs the phase declares.
std::string phase_message(const RunContext& ctx, const Phase& phase, const std::string& agent,
                          const std::string& extra);
// The output artifact of a standard step: text as is, JSON found and checked, a file read back.
Result<Json> accept_output(const RunContext& ctx, const Phase& phase, const std::string& text);
Result<void> check_validations(const RunContext& ctx, const Phase& phase,
                               const std::vector<Validation>& checks, const Json& value,
                               const char* when);
// Standard phases are one step, whose journal record is the phase's.
bool single_step(const Phase& phase);
// Runs one phase (not journaled as a whole yet, unless single_step): its artifact's value.
Result<Json> run_phase(RunContext& ctx, const Phase& phase);
// Where an overlay-view agent's writes go.
std::optional<std::filesystem::path> layer_dir_of(const RunContext& ctx, const std::string& agent);

}  // namespace kernex::topology::detail
