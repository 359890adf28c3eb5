// `kernex rlm`: a question over context files loaded as REPL variables (kernex/rlm.hpp).
#include <limits>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/kernel.hpp"
#include "kernex/rlm.hpp"
#include "skill_trust.hpp"
#include "stream_printer.hpp"

namespace kernex::cli {
namespace {

struct RlmArgs {
  RunArgs run;
  std::vector<std::string> contexts;
  std::optional<std::uint32_t> max_depth;
};

int rlm(const ConfigFile& config_file, const RlmArgs& args) {
  auto prepared = prepare_run(config_file, args.run);
  if (!prepared) return report(prepared.error());
  RunOptions& opts = prepared->options;
  opts.max_depth = args.max_depth;
  if (auto overlay = use_workspace_mode(prepared->config, opts); !overlay)
    return report(overlay.error());

  // The config's skills, as `kernex run` has them: each refused one is named with why.
  auto skill_source = load_run_skills(prepared->config, {});
  if (!skill_source) return report(skill_source.error());
  auto kernel = Kernel::create(std::move(prepared->config));
  if (!kernel) return report(kernel.error());
  if (*skill_source) (*kernel)->add_context_source(*skill_source);
  RlmOptions rlm;
  for (const auto& file : args.contexts) rlm.context_files.push_back(absolute_path(file));
  StreamPrinter printer(args.run.json ? StreamPrinter::Mode::JsonEvents
                                      : StreamPrinter::Mode::Text);
  if (args.run.stream) opts.sink = printer.sink();
  rlm.run = std::move(opts);
  return print_run_result(run_rlm(**kernel, prepared->message, rlm), printer, args.run.json);
}

}  // namespace

CommandRun setup_rlm(Command command, std::string&) {
  auto args = std::make_shared<RlmArgs>();
  add_run_options(command, args->run);
  command
      .add_option("--context", args->contexts,
                  "a file loaded as `context`, then `context_1`, ... (repeatable)")
      .allow_extra_args(false)
      .type_name("FILE");
  command
      .add_option("--max-depth", args->max_depth,
                  "how deep rlm_query may recurse (default: limits.max_depth)")
      .check(uint_in(0, std::numeric_limits<std::uint32_t>::max()))
      .type_name("N");
  command.add_flag("--json", args->run.json, "print the whole result as one line of JSON");
  command.add_flag("--stream", args->run.stream, "print model output as it arrives");
  command
      .add_option("question", args->run.message,
                  "the question (several words are joined; - reads stdin)")
      .required()
      .type_name("QUESTION");
  return [args](const ConfigFile& config) { return rlm(config, *args); };
}

}  // namespace kernex::cli
