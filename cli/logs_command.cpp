// `kernex logs list|show|view`: the run trajectories under <data_dir>/trajectories.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/config.hpp"
#include "kernex/trajectory_view.hpp"

namespace kernex::cli {
namespace {

struct LogsArgs {
  std::optional<std::string> data_dir;
  std::string run = "last";
  std::string html;
  bool json = false;
};

Result<std::filesystem::path> trajectories_dir(const std::optional<std::string>& config_file,
                                               const LogsArgs& args) {
  if (args.data_dir) return std::filesystem::path(*args.data_dir) / "trajectories";
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return std::unexpected(config.error());
  return config->data_dir / "trajectories";
}

int list(const std::filesystem::path& dir, bool json) {
  auto runs = list_trajectories(dir);
  if (!runs) return report(runs.error());
  if (json) {
    Json out = Json::array();
    for (const auto& r : *runs) out.push_back(to_json(r));
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
    return kExitOk;
  }
  if (runs->empty()) std::cout << "no runs recorded in " << dir.string() << '\n';
  for (const auto& r : *runs) {
    char cost[32];
    std::snprintf(cost, sizeof cost, "$%.6f", r.cost_usd);
    std::cout << r.run_id << "  " << (r.kind.empty() ? "?" : r.kind) << "  "
              << (r.outcome.empty() ? (r.error.empty() ? "unfinished" : "error") : r.outcome)
              << "  " << r.input_tokens + r.output_tokens << " tok  " << cost << "  "
              << for_terminal(r.question) << '\n';
  }
  return kExitOk;
}

int show_or_view(const std::filesystem::path& dir, const LogsArgs& args, bool view) {
  auto events = read_trajectory(dir, args.run);
  if (!events) return report(events.error());
  if (view) {
    std::ofstream out(args.html, std::ios::binary | std::ios::trunc);
    out << render_trajectory_html(*events);
    out.close();
    if (!out) return report(Error(ErrorCode::Io, "cannot write " + args.html));
    std::cout << args.html << '\n';
    return kExitOk;
  }
  if (args.json) {
    for (const auto& e : *events)
      std::cout << e.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  } else {
    std::cout << for_terminal(render_trajectory_text(*events));
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_logs(Command command, std::string& config) {
  auto args = std::make_shared<LogsArgs>();
  Command logs = command;
  logs.require_subcommand();
  Command list_cmd = logs.add_subcommand("list", "List the recorded runs, oldest first");
  Command show_cmd =
      logs.add_subcommand("show", "Print one run's events (text, or JSON Lines with --json)");
  Command view_cmd = logs.add_subcommand("view", "Write one run as a self-contained HTML page");
  for (Command sub : {list_cmd, show_cmd, view_cmd}) {
    sub.footer(kExitCodeHelp);
    add_config_option(sub, config, "kernex.yaml to read (its data_dir)");
    sub.add_option("--data-dir", args->data_dir,
                   "data directory (overrides data_dir and KERNEX_DATA_DIR)")
        .type_name("DIR");
  }
  list_cmd.add_flag("--json", args->json, "print a JSON array");
  show_cmd.add_flag("--json", args->json, "print the events as JSON Lines");
  for (Command sub : {show_cmd, view_cmd}) {
    sub.add_option("run", args->run, "run id, a unique prefix of one, or `last` (default)")
        .type_name("RUN");
  }
  view_cmd.add_option("--html", args->html, "the HTML file to write").required().type_name("FILE");
  return [args, list_cmd, view_cmd](const ConfigFile& config_file) {
    auto dir = trajectories_dir(config_file, *args);
    if (!dir) return report(dir.error());
    if (list_cmd) return list(*dir, args->json);
    return show_or_view(*dir, *args, static_cast<bool>(view_cmd));
  };
}

}  // namespace kernex::cli
