// The subcommands. Each returns the process exit code and prints its own output and errors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/sandbox/policy.hpp"

namespace CLI {
class App;
}

namespace kernex {
struct RunOptions;
struct RunResult;
}  // namespace kernex

namespace kernex::cli {

struct RunArgs {
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::optional<std::string> data_dir;
  std::vector<std::string> skill_dirs;
  std::vector<std::string> skills;     // --skill NAME: activated whatever the message says
  std::optional<std::string> project;  // --project DIR: AGENTS.md/ROLE.md instructions and skills
  std::vector<std::string> provider_opts;  // KEY=VALUE
  std::optional<std::uint32_t> max_turns;
  std::optional<std::uint64_t> token_budget;
  std::optional<double> cost_budget_usd;
  std::optional<std::uint32_t> tool_call_budget;
  bool json = false;
  bool stream = false;               // --stream: print text (or, with --json, events) as it arrives
  std::vector<std::string> message;  // joined with spaces; a lone "-" reads stdin
};

// `kernex skills ACTION`: list, lint, lock, verify, show.
struct SkillsArgs {
  std::string action;
  std::vector<std::string> dirs;  // DIRs (show: --skills); none: the config's skill_dirs
  std::string name;               // show NAME
  bool json = false;
  bool spec = false;  // lint --spec: the Agent Skills specification only
};

// `kernex memory ACTION`.
struct MemoryArgs {
  std::string action;  // search | facts | history | export | import | usage
  std::optional<std::string> data_dir;
  std::string query;
  std::optional<std::string> sender;
  std::optional<std::string> conversation;
  std::string file;
  std::size_t limit = 100;
  bool deleted = false;
  bool json = false;
};

// `kernex mcp list|call|serve`.
struct McpArgs {
  std::vector<std::string> skill_dirs;
  bool json = false;
  std::string server;                      // call
  std::string tool;                        // call
  std::string arguments;                   // call: a JSON object
  std::optional<std::string> provider;     // serve: for kernex_run
  std::vector<std::string> provider_opts;  // serve: KEY=VALUE
};

// `config` is the --config value, nullopt when not given.
int run_command(const std::optional<std::string>& config, const RunArgs& args);
int plugins_command(const std::optional<std::string>& config, bool json);
int doctor_command(const std::optional<std::string>& config, bool json);
int skills_command(const std::optional<std::string>& config, const SkillsArgs& args);

// `sandbox exec` and `tool run` register themselves; the returned function runs the command when
// it was chosen on the command line (nullopt otherwise). `config` is bound to --config.
std::function<std::optional<int>()> add_sandbox_command(CLI::App& app, std::string& config);
std::function<std::optional<int>()> add_tool_command(CLI::App& app, std::string& config);
// The sandbox section of `kernex doctor`: what the default profile enforces here.
Json sandbox_doctor_json();
std::string sandbox_doctor_text();
// Per class of the second escape battery: whether it holds here and how (doctor_protections.cpp).
Json sandbox_protections_json(const sandbox::PolicyStatus& status);
std::string sandbox_protections_text(const Json& rows);
CLI::App* add_memory_command(CLI::App& app, MemoryArgs& args);
int memory_command(const std::optional<std::string>& config, const MemoryArgs& args);
int mcp_list_command(const std::optional<std::string>& config, const McpArgs& args);
int mcp_call_command(const std::optional<std::string>& config, const McpArgs& args);
int mcp_serve_command(const std::optional<std::string>& config, const McpArgs& args);
int providers_command(const std::optional<std::string>& config, bool json);

// `kernex logs list|show|view` and `kernex rlm`, registered like `tool run`.
std::function<std::optional<int>()> add_logs_command(CLI::App& app, std::string& config);
// `kernex serve [keys ACTION]`.
std::function<std::optional<int>()> add_serve_command(CLI::App& app, std::string& config);
std::function<std::optional<int>()> add_rlm_command(CLI::App& app, std::string& config);

// Shared by `run` and `rlm`: --provider, --model, --provider-opt, --data-dir and the budgets.
void add_run_options(CLI::App& app, RunArgs& args);
std::filesystem::path absolute_path(const std::string& p);
Result<std::string> message_text(const std::vector<std::string>& words);  // a lone "-" reads stdin
Result<RunOptions> run_options(const RunArgs& args);
class StreamPrinter;
// Prints the answer (or the JSON result) and maps the outcome to the exit code.
int print_run_result(const Result<RunResult>& result, StreamPrinter& printer, bool json);

// "kernex: <code>: <description>" on stderr; returns the mapped exit code.
int report(const Error& error);

}  // namespace kernex::cli
