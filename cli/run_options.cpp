// Options shared by several commands: --config, repeated values, and what `run` and `rlm` share.

#include <cstdint>
#include <limits>

#include "commands.hpp"
#include "kernex/config.hpp"
#include "kernex/number.hpp"

namespace kernex::cli {

namespace {

// Checks backed by kernex/number.hpp, so a flag's range is worded like a config key's. CLI11
// prefixes the flag's name itself; "nan", "inf", "1e999", "-1" and "2.5" (for a count) all fail.
std::string without_name(const Error& e) {
  const auto at = e.message.find("`: ");
  return at == std::string::npos ? e.message : e.message.substr(at + 3);
}

}  // namespace

Check number_in(double min, double max) {
  return [=](const std::string& text) {
    auto v = parse_number(text, "", min, max);
    return v ? std::string() : without_name(v.error());
  };
}

Check uint_in(std::uint64_t min, std::uint64_t max) {
  return [=](const std::string& text) {
    auto v = parse_uint(text, "", min, max);
    return v ? std::string() : without_name(v.error());
  };
}

Result<Config> load_config_with(const ConfigFile& file, const std::optional<std::string>& data_dir,
                                const std::vector<std::string>& skill_dirs) {
  auto config = Config::load(file ? std::optional<std::filesystem::path>(*file) : std::nullopt);
  if (!config) return config;
  if (data_dir) {
    config->data_dir = absolute_path(*data_dir);
    register_kernel_files(*config);
  }
  for (const auto& dir : skill_dirs) config->skill_dirs.push_back(absolute_path(dir));
  return config;
}

void add_config_option(Command app, std::string& config, const std::string& help) {
  app.add_option("--config", config, help).type_name("FILE");
}

Option add_repeated(Command app, const std::string& name, std::vector<std::string>& values,
                    const std::string& help) {
  return app.add_option(name, values, help).allow_extra_args(false);
}

void add_provider_options(Command app, ProviderArgs args) {
  app.add_option("--provider", args.provider, "provider plugin to use (overrides `provider:`)")
      .type_name("NAME");
  app.add_option("--model", args.model, "model id passed to the provider").type_name("MODEL");
  app.add_option("--provider-opt", args.provider_opts,
                 "provider option (repeatable); VALUE is JSON if it parses, else a string")
      .allow_extra_args(false)
      .type_name("KEY=VALUE");
}

void add_run_options(Command app, RunArgs& args) {
  add_provider_options(app, {args.provider, args.model, args.provider_opts});
  app.add_option("--data-dir", args.data_dir,
                 "data directory (overrides data_dir and KERNEX_DATA_DIR)")
      .type_name("DIR");
  constexpr auto u32 = std::numeric_limits<std::uint32_t>::max();
  app.add_option("--max-turns", args.budgets.max_turns, "model calls allowed in this run")
      .check(uint_in(0, u32))
      .type_name("N");
  app.add_option("--token-budget", args.budgets.token_budget, "billed tokens allowed in this run")
      .check(uint_in(0, std::numeric_limits<std::uint64_t>::max()))
      .type_name("N");
  app.add_option("--cost-budget", args.budgets.cost_budget_usd, "USD allowed in this run")
      .check(number_in(0, kMaxCostBudgetUsd))
      .type_name("USD");
  app.add_option("--tool-budget", args.budgets.tool_call_budget, "tool calls allowed in this run")
      .check(uint_in(0, u32))
      .type_name("N");
  app.add_flag("--overlay", args.overlay,
               "tools write into the session's overlay, not the current directory (review with "
               "`kernex workspace`); overrides workspace.mode");
  app.add_flag("--no-overlay", args.no_overlay, "tools write into the current directory")
      .excludes("--overlay");
  app.add_flag("--approve", args.approve,
               "run tool calls that need approval (ask rules, hooks) without asking; without it "
               "they are asked about on a terminal and denied otherwise");
}

}  // namespace kernex::cli
