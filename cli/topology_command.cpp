// `kernex topology run|lint|show`: topologies of several agents (kernex::topology).
#include <csignal>
#include <iostream>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/topology/runner.hpp"
#include "kernex/topology/topology.hpp"
#include "skill_trust.hpp"
#include "terminal_text.hpp"

namespace kernex::cli {
namespace {

struct TopologyArgs {
  RunArgs run;
  std::string target;  // NAME or FILE
  std::optional<std::string> input;
  std::optional<std::string> run_id;
  std::optional<std::string> workspace;
  std::optional<std::uint32_t> wall_time_ms;
};

Result<Config> load_config(const ConfigFile& file, const RunArgs& args) {
  return load_config_with(file, args.data_dir, args.skill_dirs);
}

// --input is JSON: a JSON string is the input's text, any other value its JSON text; what does
// not parse is taken as plain text.
std::string input_text(const std::optional<std::string>& raw) {
  if (!raw) return "";
  Json j = parse_untrusted(*raw);
  if (j.is_discarded()) return *raw;
  return j.is_string() ? j.get<std::string>() : j.dump();
}

void print_event(const Json& event, bool json) {
  if (json) {
    std::cout << event.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n' << std::flush;
    return;
  }
  const std::string type = event.value("type", "");
  if (type == "delta") {
    std::cout << for_terminal(event.value("text", "")) << std::flush;
  } else if (type == "phase_start" || type == "phase_end" || type == "retry") {
    std::cerr << "kernex: topology: " << type << " " << for_terminal(event.value("phase", ""))
              << for_terminal(event.value("step", "")) << " " << event.value("status", "") << '\n';
  }
}

int report_result(const topology::TopologyResult& result, bool json) {
  if (json) {
    std::cout << topology::to_json(result).dump(-1, ' ', false, Json::error_handler_t::replace)
              << '\n';
  } else {
    std::cout << for_terminal(result.text);
    if (!result.text.empty() && result.text.back() != '\n') std::cout << '\n';
  }
  std::cout.flush();
  if (result.outcome == "end_turn") return kExitOk;
  std::cerr << "kernex: limit: topology run " << result.run_id << " ended by " << result.outcome
            << "; its finished phases are kept (resume with --run-id " << result.run_id << ")\n";
  return kExitLimit;
}

int run_topology(const ConfigFile& file, const TopologyArgs& args) {
  auto config = load_config(file, args.run);
  if (!config) return report(config.error());
  auto topo = topology::resolve(args.target, config->data_dir);
  if (!topo) return report(topo.error());
  auto tiers = topology::tiers_from_config(*config);
  if (!tiers) return report(tiers.error());
  auto base = run_options(args.run);
  if (!base) return report(base.error());
  const Config copy = *config;
  auto kernel = Kernel::create(std::move(*config));
  if (!kernel) return report(kernel.error());

  topology::RunnerOptions options;
  options.input = input_text(args.input);
  options.workspace = absolute_path(args.workspace.value_or("."));
  options.run_id = args.run_id.value_or(topology::new_run_id());
  options.tiers = std::move(*tiers);
  options.base = std::move(*base);
  options.wall_time_ms = args.wall_time_ms;
  options.stream = args.run.stream;
  const bool json = args.run.json;
  if (args.run.stream) options.on_event = [json](const Json& e) { print_event(e, json); };
  options.sources_for =
      [&copy](const topology::Agent& agent) -> Result<std::vector<std::shared_ptr<ContextSource>>> {
    std::vector<std::shared_ptr<ContextSource>> out;
    if (agent.skills.empty()) return out;
    KERNEX_ASSIGN_OR_RETURN(auto source, load_run_skills(copy, agent.skills));
    if (source) out.push_back(source);
    return out;
  };
  std::cerr << "kernex: topology run " << options.run_id << '\n';
  auto result = topology::run(**kernel, *topo, options);
  if (!result) {
    std::cerr << "kernex: topology run " << options.run_id
              << " failed; its finished phases are kept (resume with --run-id " << options.run_id
              << ")\n";
    return report(result.error());
  }
  return report_result(*result, json);
}

int lint(const ConfigFile& file, const RunArgs& dirs, const std::vector<std::string>& targets,
         bool json) {
  auto config = load_config(file, dirs);
  if (!config) return report(config.error());
  int code = kExitOk;
  for (const auto& target : targets) {
    auto topo = topology::resolve(target, config->data_dir);
    if (json) {
      Json line{{"target", target}, {"ok", bool(topo)}};
      if (topo)
        line["phases"] = topo->phases.size(), line["agents"] = topo->agents.size();
      else
        line["error"] = topo.error().describe();
      std::cout << line.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
    } else if (topo) {
      std::cout << "ok: " << topo->name << " (" << topo->phases.size() << " phases, "
                << topo->agents.size() << " agents)\n";
    }
    if (!topo) code = json ? kExitConfig : report(topo.error());
  }
  return code;
}

int show(const ConfigFile& file, const RunArgs& dirs, const std::string& target, bool json) {
  auto config = load_config(file, dirs);
  if (!config) return report(config.error());
  auto topo = topology::resolve(target, config->data_dir);
  if (!topo) return report(topo.error());
  if (json)
    std::cout << topology::to_json(*topo).dump(-1, ' ', false, Json::error_handler_t::replace)
              << '\n';
  else
    std::cout << for_terminal(topology::describe(*topo));
  return kExitOk;
}

}  // namespace

CommandRun setup_topology(Command command, std::string& config) {
  command.require_subcommand();
  auto args = std::make_shared<TopologyArgs>();
  Command run = command.add_subcommand("run", "Run a topology (NAME under the data dir, or FILE)");
  add_config_option(run, config);
  add_run_options(run, args->run);
  run.add_option("topology", args->target, "topology NAME or FILE/folder").required();
  run.add_option("--input", args->input, "the run's input (JSON; a JSON string is its text)");
  run.add_option("--run-id", args->run_id,
                 "the run's id: a run started again with the id of one that died resumes it");
  run.add_option("--workspace", args->workspace, "the shared workspace (default: .)");
  run.add_option("--wall-time-ms", args->wall_time_ms, "wall time allowed for the whole run")
      .check(uint_in(1, std::numeric_limits<std::uint32_t>::max()));
  add_repeated(run, "--skills", args->run.skill_dirs, "a directory of skills (repeatable)");
  run.add_flag("--json", args->run.json, "print the result as one line of JSON");
  run.add_flag("--stream", args->run.stream,
               "print progress and text as it arrives (with --json: one event per line)");

  auto targets = std::make_shared<std::vector<std::string>>();
  auto lint_json = std::make_shared<bool>(false);
  Command lint_cmd = command.add_subcommand("lint", "Check topologies strictly");
  add_config_option(lint_cmd, config);
  lint_cmd.add_option("topology", *targets, "topology NAMEs or FILEs").required();
  lint_cmd.add_flag("--json", *lint_json, "one JSON line per topology");
  auto dirs = std::make_shared<RunArgs>();
  for (Command sub : {lint_cmd}) {
    sub.add_option("--data-dir", dirs->data_dir, "data directory (where topologies/ is)");
  }

  auto show_target = std::make_shared<std::string>();
  auto show_json = std::make_shared<bool>(false);
  Command show_cmd = command.add_subcommand("show", "Print a topology's graph");
  add_config_option(show_cmd, config);
  show_cmd.add_option("topology", *show_target, "topology NAME or FILE").required();
  show_cmd.add_flag("--json", *show_json, "the topology as JSON");
  show_cmd.add_option("--data-dir", dirs->data_dir, "data directory (where topologies/ is)");

  return [=](const ConfigFile& file) {
    if (run) return run_topology(file, *args);
    if (lint_cmd) return lint(file, *dirs, *targets, *lint_json);
    return show(file, *dirs, *show_target, *show_json);
  };
}

}  // namespace kernex::cli
