// `kernex rlm`: a question over context files loaded as REPL variables (kernex/rlm.hpp).
#include <CLI/CLI.hpp>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/kernel.hpp"
#include "kernex/rlm.hpp"
#include "stream_printer.hpp"

namespace kernex::cli {
namespace {

struct RlmArgs {
  RunArgs run;
  std::vector<std::string> contexts;
  std::optional<std::uint32_t> max_depth;
};

int rlm(const std::optional<std::string>& config_file, const RlmArgs& args) {
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return report(config.error());
  if (args.run.data_dir) config->data_dir = absolute_path(*args.run.data_dir);
  auto opts = run_options(args.run);
  if (!opts) return report(opts.error());
  if (!opts->provider && config->provider.name.empty()) {
    return report(
        Error(ErrorCode::Config,
              "no provider configured: pass --provider NAME, or set `provider:` in kernex.yaml"));
  }
  auto question = message_text(args.run.message);
  if (!question) return report(question.error());
  opts->max_depth = args.max_depth;

  auto kernel = Kernel::create(std::move(*config));
  if (!kernel) return report(kernel.error());
  RlmOptions rlm;
  for (const auto& file : args.contexts) rlm.context_files.push_back(absolute_path(file));
  StreamPrinter printer(args.run.json ? StreamPrinter::Mode::JsonEvents
                                      : StreamPrinter::Mode::Text);
  if (args.run.stream) opts->sink = printer.sink();
  rlm.run = std::move(*opts);
  return print_run_result(run_rlm(**kernel, *question, rlm), printer, args.run.json);
}

}  // namespace

std::function<std::optional<int>()> add_rlm_command(CLI::App& app, std::string& config) {
  auto args = std::make_shared<RlmArgs>();
  CLI::App* cmd = app.add_subcommand("rlm",
                                     "Answer QUESTION over large context files: they become REPL "
                                     "variables the model works on with code "
                                     "and sub-queries");
  cmd->footer(kExitCodeHelp);
  cmd->add_option("--config", config, "kernex.yaml to read")->type_name("FILE");
  add_run_options(*cmd, args->run);
  cmd->add_option("--context", args->contexts,
                  "a file loaded as `context`, then `context_1`, ... (repeatable)")
      ->allow_extra_args(false)
      ->type_name("FILE");
  cmd->add_option("--max-depth", args->max_depth,
                  "how deep rlm_query may recurse (default: limits.max_depth)")
      ->type_name("N");
  cmd->add_flag("--json", args->run.json, "print the whole result as one line of JSON");
  cmd->add_flag("--stream", args->run.stream, "print model output as it arrives");
  cmd->add_option("question", args->run.message,
                  "the question (several words are joined; - reads stdin)")
      ->required()
      ->type_name("QUESTION");
  return [args, cmd, &config]() -> std::optional<int> {
    if (!*cmd) return std::nullopt;
    return rlm(config.empty() ? std::nullopt : std::optional<std::string>(config), *args);
  };
}

}  // namespace kernex::cli
