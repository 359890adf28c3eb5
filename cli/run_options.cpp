// Options shared by several commands: --config, repeated values, and what `run` and `rlm` share.
#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace kernex::cli {

void add_config_option(CLI::App& app, std::string& config, const std::string& help) {
  app.add_option("--config", config, help)->type_name("FILE");
}

CLI::Option* add_repeated(CLI::App& app, const std::string& name, std::vector<std::string>& values,
                          const std::string& help) {
  return app.add_option(name, values, help)->allow_extra_args(false);
}

void add_run_options(CLI::App& app, RunArgs& args) {
  app.add_option("--provider", args.provider, "provider plugin to use (overrides `provider:`)")
      ->type_name("NAME");
  app.add_option("--model", args.model, "model id passed to the provider")->type_name("MODEL");
  app.add_option("--data-dir", args.data_dir,
                 "data directory (overrides data_dir and KERNEX_DATA_DIR)")
      ->type_name("DIR");
  app.add_option("--max-turns", args.max_turns, "model calls allowed in this run")->type_name("N");
  app.add_option("--token-budget", args.token_budget, "billed tokens allowed in this run")
      ->type_name("N");
  app.add_option("--cost-budget", args.cost_budget_usd, "USD allowed in this run")
      ->check(CLI::NonNegativeNumber)
      ->type_name("USD");
  app.add_option("--tool-budget", args.tool_call_budget, "tool calls allowed in this run")
      ->type_name("N");
  app.add_option("--provider-opt", args.provider_opts,
                 "provider option (repeatable); VALUE is JSON if it parses, else a string")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
}

}  // namespace kernex::cli
