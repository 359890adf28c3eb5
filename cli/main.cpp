// `kernex`: parses the command line and hands over to the library; nothing else lives here.
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/log.hpp"

namespace {

using kernex::cli::RunArgs;

// --config is accepted before the subcommand and on each subcommand; all bind to one value,
// so the last one given wins.
void add_config_option(CLI::App& app, std::string& config) {
  app.add_option("--config", config, "kernex.yaml to read (default: $KERNEX_CONFIG, else built-in defaults)")
      ->type_name("FILE");
}

// One value per occurrence, so `--skills a MESSAGE` never swallows the message.
template <class T>
CLI::Option* add_repeated(CLI::App& app, const std::string& name, T& values, const std::string& help) {
  return app.add_option(name, values, help)->allow_extra_args(false);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kernex: an agent kernel with plugin providers and sandboxed tools", "kernex"};
  app.set_version_flag("--version", std::string("kernex ") + KERNEX_VERSION);
  app.require_subcommand(1);
  app.footer(kernex::cli::kExitCodeHelp);

  std::string config;
  bool verbose = false;
  add_config_option(app, config);
  app.add_flag("-v,--verbose", verbose, "log info and debug messages to stderr");

  RunArgs run_args;
  CLI::App* run = app.add_subcommand("run", "Run one turn: send MESSAGE to the provider, run tools, print the answer");
  run->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*run, config);
  run->add_option("--provider", run_args.provider, "provider plugin to use (overrides `provider:`)")->type_name("NAME");
  run->add_option("--model", run_args.model, "model id passed to the provider")->type_name("MODEL");
  add_repeated(*run, "--skills", run_args.skill_dirs, "a directory of skills (repeatable)")->type_name("DIR");
  add_repeated(*run, "--skill", run_args.skills, "activate this skill whatever the message says (repeatable)")
      ->type_name("NAME");
  run->add_option("--data-dir", run_args.data_dir, "data directory (overrides data_dir and KERNEX_DATA_DIR)")->type_name("DIR");
  run->add_option("--max-turns", run_args.max_turns, "model calls allowed in this run")->type_name("N");
  run->add_option("--token-budget", run_args.token_budget, "billed tokens allowed in this run")->type_name("N");
  run->add_option("--cost-budget", run_args.cost_budget_usd, "USD allowed in this run")
      ->check(CLI::NonNegativeNumber)
      ->type_name("USD");
  run->add_option("--tool-budget", run_args.tool_call_budget, "tool calls allowed in this run")->type_name("N");
  add_repeated(*run, "--provider-opt", run_args.provider_opts,
               "provider option (repeatable); VALUE is JSON if it parses, else a string")
      ->type_name("KEY=VALUE");
  run->add_flag("--json", run_args.json, "print the whole result as one line of JSON");
  run->add_flag("--stream", run_args.stream,
                "print the answer as it arrives (the default on a terminal); with --json, one JSON event per line "
                "before the result line");
  run->add_option("message", run_args.message, "the message (several words are joined; - reads stdin)")
      ->required()
      ->type_name("MESSAGE");

  bool plugins_json = false;
  CLI::App* plugins = app.add_subcommand("plugins", "List the plugins found in the plugin directories");
  plugins->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*plugins, config);
  plugins->add_flag("--json", plugins_json, "print a JSON array");

  bool doctor_json = false;
  CLI::App* doctor =
      app.add_subcommand("doctor", "Check the sandbox features, configuration and plugins of this machine");
  doctor->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*doctor, config);
  doctor->add_flag("--json", doctor_json, "print the report as JSON");

  bool providers_json = false;
  CLI::App* providers_cmd = app.add_subcommand(
      "providers", "List the provider plugins, OpenAI-compatible presets, default models and which keys are set");
  providers_cmd->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*providers_cmd, config);
  providers_cmd->add_flag("--json", providers_json, "print a JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "kernex: usage: " << e.what() << "\nRun with --help for more information.\n";
    return kernex::cli::kExitUsage;
  }

  if (verbose) {
    kernex::set_log_sink([](kernex::LogLevel level, std::string_view message) {
      std::cerr << "kernex: " << kernex::to_string(level) << ": " << message << '\n';
    });
  }

  const std::optional<std::string> config_file = config.empty() ? std::nullopt : std::optional(config);
  try {
    if (*run) return kernex::cli::run_command(config_file, run_args);
    if (*plugins) return kernex::cli::plugins_command(config_file, plugins_json);
    if (*doctor) return kernex::cli::doctor_command(config_file, doctor_json);
    if (*providers_cmd) return kernex::cli::providers_command(config_file, providers_json);
  } catch (const std::exception& e) {
    // Errors are values everywhere below; reaching this is a bug, reported as one.
    return kernex::cli::report(kernex::Error(kernex::ErrorCode::Internal, e.what()));
  }
  return kernex::cli::kExitUsage;
}
