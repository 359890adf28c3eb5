// kernex.yaml, validated once at start. Unknown keys and wrong types are errors naming the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex {

struct PluginRef {
  std::string name;
  Json config = Json::object();  // handed to the plugin's factory unchanged
};

// Ranges of the limits that are not plain counters (cli/README.md lists them): a budget past a
// billion dollars is a typo, and ten years of idle minutes stay far from chrono's overflow.
inline constexpr double kMaxCostBudgetUsd = 1e9;
inline constexpr std::uint64_t kMaxIdleMinutes = 10ULL * 365 * 24 * 60;

inline constexpr std::uint32_t kDefaultMaxTurns = 50;

// The four budgets of a run, declared once: kernex.yaml's `limits:` (Limits::budgets), a run's
// overrides (RunOptions::budgets), `kernex run`'s flags and a topology agent's limits all hold
// this. Unset: no limit of that kind (max_turns: the config's). Users spell the fields the same
// everywhere (YAML, JSON, TOML keys); the CLI flags are --max-turns, --token-budget,
// --cost-budget and --tool-budget.
struct Budgets {
  std::optional<std::uint32_t> max_turns;         // model calls per run
  std::optional<std::uint64_t> token_budget;      // billed tokens over a run and its sub-calls
  std::optional<double> cost_budget_usd;          // USD, [0, kMaxCostBudgetUsd], finite
  std::optional<std::uint32_t> tool_call_budget;  // tool calls over a run and its sub-calls

  // Each budget this one sets, else `base`'s: a run's overrides over the config's limits.
  Budgets over(const Budgets& base) const {
    return {max_turns ? max_turns : base.max_turns, token_budget ? token_budget : base.token_budget,
            cost_budget_usd ? cost_budget_usd : base.cost_budget_usd,
            tool_call_budget ? tool_call_budget : base.tool_call_budget};
  }
  bool operator==(const Budgets&) const = default;
};

struct Limits {
  // max_turns is always set here.
  Budgets budgets{.max_turns = kDefaultMaxTurns,
                  .token_budget = std::nullopt,
                  .cost_budget_usd = std::nullopt,
                  .tool_call_budget = std::nullopt};
  // How deep rlm_query may recurse below the root run (depth 0). The token, cost and tool-call
  // budgets above cover the whole tree of sub-calls, not each run alone.
  std::uint32_t max_depth = 1;
  std::size_t max_context_messages = 50;
  CompactionStrategy compaction = CompactionStrategy::Drop;
  std::chrono::minutes conversation_idle{120};

  // The model calls a run may make.
  std::uint32_t max_turns() const { return budgets.max_turns.value_or(kDefaultMaxTurns); }
};

// Where a run's sandboxed tools write (`workspace: {mode: ...}`): straight into the workspace, or
// into an overlay layer per session that a person reviews and accepts (`kernex workspace`).
enum class WorkspaceMode { Plain, Overlay };

struct Config {
  std::optional<std::filesystem::path> source;  // the file it was read from
  std::filesystem::path data_dir;  // default $XDG_DATA_HOME/kernex or ~/.local/share/kernex
  std::vector<std::filesystem::path> plugin_dirs;  // searched before the default dirs
  std::vector<std::filesystem::path> skill_dirs;
  std::string system_prompt;
  std::string channel = "cli";
  std::string project;
  PluginRef provider;                            // default provider and its options
  std::map<std::string, Json> provider_options;  // per-provider options by name
  // Unset: the kernel runs without memory. Config::load and parse_yaml start from the sqlite
  // store (<data_dir>/memory.db); `memory: none` unsets it. A Config built in code has none.
  std::optional<PluginRef> memory;
  std::vector<PluginRef> hooks;  // run in this order
  // Toolbox plugins to load; unset: every toolbox plugin found, with empty options.
  std::optional<std::vector<PluginRef>> toolboxes;
  std::optional<std::filesystem::path> permissions_file;
  std::vector<std::string> allow;  // inline rules, merged after the file's
  std::vector<std::string> deny;
  std::vector<std::string> ask;  // calls needing a person's approval (approval.hpp)
  std::optional<std::filesystem::path> pricing_file;  // default: the installed data/pricing.yaml
  Limits limits;
  // Whether runs write a JSON Lines trajectory under <data_dir>/trajectories.
  bool trajectories = true;
  // Channel plugins a host runs (`kernex serve`, `kernex channel run NAME`), each named once: the
  // name is the plugin's and names the channel's state (<data_dir>/channels/<name>).
  std::vector<PluginRef> channels;
  // `workspace: {mode: overlay}`: hosts run tools over an overlay of the workspace (`kernex run`
  // and `kernex serve` sessions; `kernex run --overlay` sets it for one run).
  WorkspaceMode workspace_mode = WorkspaceMode::Plain;
  // Sections for the layers above the kernel, as JSON, checked by the layer that reads them:
  // "serve" (kernex serve). Relative paths in them resolve against `source`'s directory.
  std::map<std::string, Json> sections;

  // Reads `file` (or, when unset, $KERNEX_CONFIG, else no file: defaults), then applies the
  // environment override KERNEX_DATA_DIR, and registers the kernel files it names
  // (register_kernel_files). A missing named file is an error. (KERNEX_PLUGIN_PATH
  // is read by PluginHost::default_dirs.) Relative paths resolve against the file's directory.
  static Result<Config> load(const std::optional<std::filesystem::path>& file);
  static Result<Config> parse_yaml(std::string_view text, std::string_view origin);
  // What load() starts from without a file: the default data dir, with KERNEX_DATA_DIR applied
  // when it is valid. For a report that goes on when the configuration cannot be read.
  static Config defaults();
};

// Registers the files `config` makes the kernel read or keep (kernex/kernel_files.hpp): the config
// file, the rules and pricing files, plugin and skill dirs read-only, the data dir hidden.
// Config::load and Kernel::create call it; an entry point that changes data_dir after loading calls
// it again.
void register_kernel_files(const Config& config);

// The pricing table shipped with the kernel: <datadir>/kernex/pricing.yaml found relative to
// the loaded libkernex (the source tree's data/ when running from the build tree).
std::filesystem::path default_pricing_file();

}  // namespace kernex
