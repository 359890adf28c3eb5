// `kernex`: parses the command line and hands over to the library; nothing else lives here.
#include <sqlite3.h>

#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "exit_codes.hpp"
#include "suggest.hpp"
#include "terminal_text.hpp"
#include "kernex/log.hpp"

namespace {

using kernex::cli::CommandEntry;

// Every subcommand, in the order `kernex --help` lists them.
const CommandEntry kCommands[] = {
    {"run", "Run one turn: send MESSAGE to the provider, run tools, print the answer",
     kernex::cli::setup_run},
    {"plugins", "List the plugins found in the plugin directories", kernex::cli::setup_plugins},
    {"doctor", "Check the sandbox features, configuration and plugins of this machine",
     kernex::cli::setup_doctor},
    {"sandbox", "Run commands in the Landlock + seccomp sandbox", kernex::cli::setup_sandbox},
    {"tool", "Run skill toolboxes", kernex::cli::setup_tool},
    {"rlm",
     "Answer QUESTION over large context files: they become REPL variables the model works on "
     "with code and sub-queries",
     kernex::cli::setup_rlm},
    {"logs", "Recorded run trajectories: list, show, view as HTML", kernex::cli::setup_logs},
    {"serve",
     "Serve the kernel over HTTP: sessions, runs with SSE, cancel, an OpenAI-compatible API, "
     "tenants",
     kernex::cli::setup_serve},
    {"channel", "Run a configured chat channel (kernex.yaml `channels:`) alone",
     kernex::cli::setup_channel},
    {"chat",
     "Chat on this terminal: streamed answers, /new, /history, approvals, Ctrl-C stops a turn",
     kernex::cli::setup_chat},
    {"skills", "Inspect skill folders: list, lint, lock, verify, trust, show",
     kernex::cli::setup_skills},
    {"memory", "Read the memory store: recall, facts, history, usage, backup",
     kernex::cli::setup_memory},
    {"mcp", "Model Context Protocol: serve the kernel over stdio, list or call skills' servers",
     kernex::cli::setup_mcp},
    {"workspace",
     "Review a session's overlay workspace: status, diff, accept into the real tree, reject",
     kernex::cli::setup_workspace},
    {"providers",
     "List the provider plugins, OpenAI-compatible presets, default models and which keys are set",
     kernex::cli::setup_providers},
    {"topology",
     "Topologies of several agents as one durable run: run (resumable with --run-id), lint, show",
     kernex::cli::setup_topology},
};

// Warnings and errors (every level with --verbose) to stderr, controls made visible: log lines
// quote skill manifests and tool output. The kernel redacted keys already.
void log_to_stderr(bool verbose) {
  kernex::set_log_sink([verbose](kernex::LogLevel level, std::string_view message) {
    if (!verbose && level < kernex::LogLevel::Warn) return;
    std::cerr << "kernex: " << kernex::to_string(level) << ": "
              << kernex::cli::for_terminal(message) << '\n';
  });
}

}  // namespace

int main(int argc, char** argv) {
  // The process's SQLite, before its first use: no memory statistics. Nothing in kernex reads them,
  // and they take one process-wide mutex on every allocation of every connection (serve's runs
  // contended on it: futex calls a run). Set here, by the program, not by the library: a host
  // embedding kernex may rely on them (sqlite3_soft_heap_limit64, sqlite3_memory_used).
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  using kernex::cli::Command;
  const kernex::cli::CommandLine line{
      "kernex: an agent kernel with plugin providers and sandboxed tools", "kernex"};
  line.version_flag("--version", std::string("kernex ") + KERNEX_VERSION);
  const Command app = line.root();
  app.require_subcommand();
  app.footer(kernex::cli::kExitCodeHelp);

  std::string config;
  bool verbose = false;
  kernex::cli::add_config_option(app, config);
  app.add_flag("-v,--verbose", verbose, "log info and debug messages to stderr");

  std::vector<std::pair<Command, kernex::cli::CommandRun>> commands;
  for (const CommandEntry& c : kCommands) {
    const Command sub = app.add_subcommand(c.name, c.summary);
    sub.footer(kernex::cli::kExitCodeHelp);
    kernex::cli::add_config_option(sub, config);
    commands.emplace_back(sub, c.setup(sub, config));
  }

  if (const auto failed = line.parse(argc, argv)) {
    if (failed->printed) return failed->exit_code;  // --help, --version
    const auto hint = kernex::cli::unknown_subcommand_hint(app, argc, argv);
    std::cerr << "kernex: usage: " << kernex::cli::for_terminal(hint ? *hint : failed->message)
              << "\nRun with --help for more information.\n";
    return kernex::cli::kExitUsage;
  }
  log_to_stderr(verbose);

  const kernex::cli::ConfigFile config_file = config.empty() ? std::nullopt : std::optional(config);
  try {
    for (const auto& [sub, run] : commands) {
      if (sub) return run(config_file);
    }
  } catch (const std::exception& e) {
    // Errors are values everywhere below; reaching this is a bug, reported as one.
    return kernex::cli::report(kernex::Error(kernex::ErrorCode::Internal, e.what()));
  }
  return kernex::cli::kExitUsage;
}
