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
  app.add_option("--config", config,
                 "kernex.yaml to read (default: $KERNEX_CONFIG, else built-in defaults)")
      ->type_name("FILE");
}

// One value per occurrence, so `--skills a MESSAGE` never swallows the message.
template <class T>
CLI::Option* add_repeated(CLI::App& app, const std::string& name, T& values,
                          const std::string& help) {
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
  CLI::App* run = app.add_subcommand(
      "run", "Run one turn: send MESSAGE to the provider, run tools, print the answer");
  run->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*run, config);
  kernex::cli::add_run_options(*run, run_args);
  add_repeated(*run, "--skills", run_args.skill_dirs, "a directory of skills (repeatable)")
      ->type_name("DIR");
  add_repeated(*run, "--skill", run_args.skills,
               "activate this skill whatever the message says (repeatable)")
      ->type_name("NAME");
  run->add_option(
         "--project", run_args.project,
         "a project folder: its AGENTS.md (or ROLE.md) instructions and the skills it names")
      ->type_name("DIR");
  run->add_flag("--json", run_args.json, "print the whole result as one line of JSON");
  run->add_flag("--stream", run_args.stream,
                "print the answer as it arrives (the default on a terminal); with --json, one JSON "
                "event per line "
                "before the result line");
  run->add_option("message", run_args.message,
                  "the message (several words are joined; - reads stdin)")
      ->required()
      ->type_name("MESSAGE");

  bool plugins_json = false;
  CLI::App* plugins =
      app.add_subcommand("plugins", "List the plugins found in the plugin directories");
  plugins->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*plugins, config);
  plugins->add_flag("--json", plugins_json, "print a JSON array");

  bool doctor_json = false;
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Check the sandbox features, configuration and plugins of this machine");
  doctor->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*doctor, config);
  doctor->add_flag("--json", doctor_json, "print the report as JSON");

  auto sandbox_command = kernex::cli::add_sandbox_command(app, config);
  auto tool_command = kernex::cli::add_tool_command(app, config);
  auto rlm_command = kernex::cli::add_rlm_command(app, config);
  auto logs_command = kernex::cli::add_logs_command(app, config);
  auto serve_command = kernex::cli::add_serve_command(app, config);
  kernex::cli::SkillsArgs skills_args;
  CLI::App* skills =
      app.add_subcommand("skills", "Inspect skill folders: list, lint, lock, verify, trust, show");
  skills->footer(kernex::cli::kExitCodeHelp);
  skills->require_subcommand(1);
  add_config_option(*skills, config);
  auto skills_action = [&](const std::string& name, const std::string& help) {
    CLI::App* sub = skills->add_subcommand(name, help);
    sub->footer(kernex::cli::kExitCodeHelp);
    add_config_option(*sub, config);
    sub->final_callback([&skills_args, name] { skills_args.action = name; });
    return sub;
  };
  const std::string dir_help =
      "a skill folder or a folder of skill folders (default: skill_dirs from kernex.yaml)";
  CLI::App* skills_list =
      skills_action("list", "Load the skills and list them, with the error of each that failed");
  skills_list->add_flag("--json", skills_args.json, "print {skills, failures} as JSON");
  skills_list->add_option("dir", skills_args.dirs, dir_help)->type_name("DIR");
  CLI::App* skills_lint = skills_action(
      "lint", "Judge skill folders, one verdict per folder; exit 0 only if all are valid");
  skills_lint->add_flag("--spec", skills_args.spec,
                        "check exactly the Agent Skills specification (no kernex fields)");
  skills_lint->add_flag("--json", skills_args.json, "print the verdicts as a JSON array");
  skills_lint->add_option("dir", skills_args.dirs, dir_help)->type_name("DIR");
  CLI::App* skills_lock = skills_action(
      "lock", "Record the SHA-256 of every file of each skill in <skill>/kernex.lock");
  skills_lock->add_option("dir", skills_args.dirs, dir_help)->type_name("DIR");
  CLI::App* skills_verify =
      skills_action("verify", "Compare skills with their lock: changed, missing and extra files");
  skills_verify->add_flag("--json", skills_args.json, "print the results as a JSON array");
  skills_verify->add_option("dir", skills_args.dirs, dir_help)->type_name("DIR");
  CLI::App* skills_trust = skills_action("trust",
                                         "Trust skill folders in a writable location (a workspace) "
                                         "as they are now: record their hash");
  skills_trust->add_option("dir", skills_args.dirs, dir_help)->type_name("DIR");
  CLI::App* skills_show = skills_action("show", "Print one skill's parsed model as JSON");
  skills_show->add_option("name", skills_args.name, "the skill's name")
      ->required()
      ->type_name("NAME");
  add_repeated(*skills_show, "--skills", skills_args.dirs, dir_help + " (repeatable)")
      ->type_name("DIR");
  kernex::cli::MemoryArgs memory_args;
  CLI::App* memory = kernex::cli::add_memory_command(app, memory_args);
  memory->footer(kernex::cli::kExitCodeHelp);
  add_config_option(*memory, config);
  kernex::cli::McpArgs mcp_args;
  CLI::App* mcp = app.add_subcommand(
      "mcp", "Model Context Protocol: serve the kernel over stdio, list or call skills' servers");
  mcp->require_subcommand(1);
  CLI::App* mcp_serve =
      mcp->add_subcommand("serve", "Speak MCP on stdin/stdout: the kernel's tools and kernex_run");
  CLI::App* mcp_list = mcp->add_subcommand(
      "list", "Start every MCP server the skills declare (sandboxed) and list its tools");
  CLI::App* mcp_call =
      mcp->add_subcommand("call", "Call one tool of a skill's MCP server (sandboxed)");
  for (CLI::App* sub : {mcp_serve, mcp_list, mcp_call}) {
    sub->footer(kernex::cli::kExitCodeHelp);
    add_config_option(*sub, config);
    add_repeated(*sub, "--skills", mcp_args.skill_dirs, "a directory of skills (repeatable)")
        ->type_name("DIR");
  }
  mcp_list->add_flag("--json", mcp_args.json, "print a JSON array of servers and their tools");
  mcp_call->add_flag("--json", mcp_args.json, "print the CallToolResult as JSON");
  mcp_call->add_option("server", mcp_args.server, "the server's name")
      ->required()
      ->type_name("SERVER");
  mcp_call->add_option("tool", mcp_args.tool, "the tool's name as the server lists it")
      ->required()
      ->type_name("TOOL");
  mcp_call->add_option("arguments", mcp_args.arguments, "the arguments, a JSON object")
      ->required()
      ->type_name("JSON");
  mcp_serve->add_option("--provider", mcp_args.provider, "provider plugin for kernex_run")
      ->type_name("NAME");
  add_repeated(*mcp_serve, "--provider-opt", mcp_args.provider_opts,
               "provider option for kernex_run (repeatable)")
      ->type_name("KEY=VALUE");
  bool providers_json = false;
  CLI::App* providers_cmd = app.add_subcommand("providers",
                                               "List the provider plugins, OpenAI-compatible "
                                               "presets, default models and which keys are set");
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

  const std::optional<std::string> config_file =
      config.empty() ? std::nullopt : std::optional(config);
  try {
    if (*run) return kernex::cli::run_command(config_file, run_args);
    if (*plugins) return kernex::cli::plugins_command(config_file, plugins_json);
    if (*doctor) return kernex::cli::doctor_command(config_file, doctor_json);
    if (auto code = sandbox_command()) return *code;
    if (auto code = tool_command()) return *code;
    if (auto code = rlm_command()) return *code;
    if (auto code = logs_command()) return *code;
    if (auto code = serve_command()) return *code;
    if (*skills) return kernex::cli::skills_command(config_file, skills_args);
    if (*memory) return kernex::cli::memory_command(config_file, memory_args);
    if (*mcp_serve) return kernex::cli::mcp_serve_command(config_file, mcp_args);
    if (*mcp_list) return kernex::cli::mcp_list_command(config_file, mcp_args);
    if (*mcp_call) return kernex::cli::mcp_call_command(config_file, mcp_args);
    if (*providers_cmd) return kernex::cli::providers_command(config_file, providers_json);
  } catch (const std::exception& e) {
    // Errors are values everywhere below; reaching this is a bug, reported as one.
    return kernex::cli::report(kernex::Error(kernex::ErrorCode::Internal, e.what()));
  }
  return kernex::cli::kExitUsage;
}
