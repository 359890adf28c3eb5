// The subcommands. Each returns the process exit code and prints its own output and errors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "kernex/config.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/kernel.hpp"
#include "kernex/sandbox/policy.hpp"

namespace kernex::cli {

struct RunArgs {
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::optional<std::string> data_dir;
  std::vector<std::string> skill_dirs;
  std::vector<std::string> skills;     // --skill NAME: activated whatever the message says
  std::optional<std::string> project;  // --project DIR: AGENTS.md/ROLE.md instructions and skills
  std::vector<std::string> provider_opts;  // KEY=VALUE
  Budgets budgets;          // --max-turns, --token-budget, --cost-budget, --tool-budget
  bool overlay = false;     // --overlay: workspace.mode overlay for this run
  bool no_overlay = false;  // --no-overlay: plain, whatever the config says
  bool json = false;
  bool stream = false;               // --stream: print text (or, with --json, events) as it arrives
  bool approve = false;              // --approve: run calls that need approval without asking
  std::vector<std::string> message;  // joined with spaces; a lone "-" reads stdin
};

// One `kernex` subcommand. main.cpp holds the table of them: it creates each command (with
// --config bound to `config`), calls setup, and after parsing runs the chosen command.
using ConfigFile = std::optional<std::string>;  // the --config value, nullopt when not given
using CommandRun = std::function<int(const ConfigFile& config)>;
struct CommandEntry {
  const char* name;
  const char* summary;
  // Adds the command's options and its own subcommands (each given --config bound to `config`)
  // to `command`; returns what runs it.
  CommandRun (*setup)(Command command, std::string& config);
};

CommandRun setup_run(Command command, std::string& config);
CommandRun setup_rlm(Command command, std::string& config);
CommandRun setup_plugins(Command command, std::string& config);
CommandRun setup_providers(Command command, std::string& config);
CommandRun setup_doctor(Command command, std::string& config);
CommandRun setup_sandbox(Command command, std::string& config);
CommandRun setup_tool(Command command, std::string& config);
CommandRun setup_skills(Command command, std::string& config);
CommandRun setup_memory(Command command, std::string& config);
CommandRun setup_mcp(Command command, std::string& config);
CommandRun setup_logs(Command command, std::string& config);
CommandRun setup_serve(Command command, std::string& config);
CommandRun setup_workspace(Command command, std::string& config);
CommandRun setup_channel(Command command, std::string& config);
CommandRun setup_chat(Command command, std::string& config);
CommandRun setup_topology(Command command, std::string& config);

// --config, accepted before the subcommand and on each (sub)subcommand; all bind to one value, so
// the last one given wins.
void add_config_option(Command app, std::string& config,
                       const std::string& help =
                           "kernex.yaml to read (default: $KERNEX_CONFIG, else built-in defaults)");
// One value per occurrence, so `--skills a MESSAGE` never swallows the message.
Option add_repeated(Command app, const std::string& name, std::vector<std::string>& values,
                    const std::string& help);
// The sandbox section of `kernex doctor`: what the default profile enforces here.
Json sandbox_doctor_json();
std::string sandbox_doctor_text();
// Per class of the second escape battery: whether it holds here and how (doctor_protections.cpp).
Json sandbox_protections_json(const sandbox::PolicyStatus& status);
std::string sandbox_protections_text(const Json& rows);

// Checks that a flag's value is a finite number / an integer in [min, max] (kernex/number.hpp
// words the error), for every numeric flag.
Check number_in(double min, double max);
Check uint_in(std::uint64_t min, std::uint64_t max);

// Shared by `run` and `rlm`: --provider, --model, --provider-opt, --data-dir and the budgets.
// --provider, --model and --provider-opt, as `kernex run` and `kernex serve` take them.
struct ProviderArgs {
  std::optional<std::string>& provider;
  std::optional<std::string>& model;
  std::vector<std::string>& provider_opts;  // KEY=VALUE
};
void add_provider_options(Command app, ProviderArgs args);
void add_run_options(Command app, RunArgs& args);
std::filesystem::path absolute_path(const std::string& p);
// kernex.yaml (--config, else $KERNEX_CONFIG, else the defaults) with --data-dir (the kernel's
// files registered there) and each --skills DIR applied.
Result<Config> load_config_with(const ConfigFile& file, const std::optional<std::string>& data_dir,
                                const std::vector<std::string>& skill_dirs = {});
Result<std::string> message_text(const std::vector<std::string>& words);  // a lone "-" reads stdin
Result<RunOptions> run_options(const RunArgs& args);
// The preamble of `run` and `rlm`: the configuration (--config, then --data-dir and --skills
// applied), the run options from the arguments, a provider to use, and the message.
struct PreparedRun {
  Config config;
  RunOptions options;
  std::string message;
};
Result<PreparedRun> prepare_run(const ConfigFile& config, const RunArgs& args);
// workspace.mode overlay: the run's workspace is the current directory, seen through the CLI
// session's overlay (RunOptions::workspace and workspace_layers set); plain: nothing changes.
Result<void> use_workspace_mode(const Config& config, RunOptions& options);
class StreamPrinter;
// Prints the answer (or the JSON result) and maps the outcome to the exit code.
int print_run_result(const Result<RunResult>& result, StreamPrinter& printer, bool json);

// "kernex: <code>: <description>" on stderr; returns the mapped exit code.
int report(const Error& error);

}  // namespace kernex::cli
