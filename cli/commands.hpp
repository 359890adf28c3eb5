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
  std::vector<std::string> message;  // joined with spaces; a lone "-" reads stdin
};

struct McpArgs {
  std::vector<std::string> skill_dirs;
  bool json = false;
  std::string server;      // call
  std::string tool;        // call
  std::string arguments;   // call: a JSON object
  std::optional<std::string> provider;     // serve: for kernex_run
  std::vector<std::string> provider_opts;  // serve: KEY=VALUE
};

// `config` is the --config value, nullopt when not given.
int run_command(const std::optional<std::string>& config, const RunArgs& args);
int plugins_command(const std::optional<std::string>& config, bool json);
int doctor_command(const std::optional<std::string>& config, bool json);
int mcp_list_command(const std::optional<std::string>& config, const McpArgs& args);
int mcp_call_command(const std::optional<std::string>& config, const McpArgs& args);
int mcp_serve_command(const std::optional<std::string>& config, const McpArgs& args);

// "kernex: <code>: <description>" on stderr; returns the mapped exit code.
int report(const Error& error);

}  // namespace kernex::cli
