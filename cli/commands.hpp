// The subcommands. Each returns the process exit code and prints its own output and errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::cli {

struct RunArgs {
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::optional<std::string> data_dir;
  std::vector<std::string> skill_dirs;
  std::vector<std::string> skills;  // --skill NAME: activated whatever the message says
  std::vector<std::string> provider_opts;  // KEY=VALUE
  std::optional<std::uint32_t> max_turns;
  std::optional<std::uint64_t> token_budget;
  std::optional<double> cost_budget_usd;
  std::optional<std::uint32_t> tool_call_budget;
  bool json = false;
  bool stream = false;  // --stream: print text (or, with --json, events) as it arrives
  std::vector<std::string> message;  // joined with spaces; a lone "-" reads stdin
};

// `config` is the --config value, nullopt when not given.
int run_command(const std::optional<std::string>& config, const RunArgs& args);
int plugins_command(const std::optional<std::string>& config, bool json);
int doctor_command(const std::optional<std::string>& config, bool json);
int providers_command(const std::optional<std::string>& config, bool json);

// "kernex: <code>: <description>" on stderr; returns the mapped exit code.
int report(const Error& error);

}  // namespace kernex::cli
