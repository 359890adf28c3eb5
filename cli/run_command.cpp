#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/kernel.hpp"
#include "kernex/log.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/project.hpp"
#include "provider_opt.hpp"
#include "skill_trust.hpp"
#include "terminal_approver.hpp"
#include "terminal_text.hpp"
#include "stream_printer.hpp"

namespace kernex::cli {

std::filesystem::path absolute_path(const std::string& p) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return (ec ? std::filesystem::path(p) : abs).lexically_normal();
}

Result<std::string> message_text(const std::vector<std::string>& words) {
  if (words.size() == 1 && words.front() == "-") {
    std::string text(std::istreambuf_iterator<char>(std::cin), {});
    if (std::cin.bad()) return fail(ErrorCode::Io, "cannot read the message from stdin");
    return text;
  }
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

Result<RunOptions> run_options(const RunArgs& args) {
  RunOptions opts;
  opts.provider = args.provider;
  opts.model = args.model;
  opts.budgets = args.budgets;
  opts.approver = terminal_approver(args.approve);
  for (const auto& raw : args.provider_opts) {
    KERNEX_ASSIGN_OR_RETURN(auto kv, parse_provider_opt(raw));
    opts.provider_options[kv.first] = std::move(kv.second);
  }
  return opts;
}

Result<PreparedRun> prepare_run(const ConfigFile& config_file, const RunArgs& args) {
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return std::unexpected(config.error());
  if (args.data_dir) config->data_dir = absolute_path(*args.data_dir);
  for (const auto& dir : args.skill_dirs) config->skill_dirs.push_back(absolute_path(dir));

  auto opts = run_options(args);
  if (!opts) return std::unexpected(opts.error());
  if (!opts->provider && config->provider.name.empty()) {
    return fail(ErrorCode::Config,
                "no provider configured: pass --provider NAME, or set `provider:` in kernex.yaml "
                "(given with --config or KERNEX_CONFIG); `kernex plugins` lists the providers "
                "found");
  }
  if (args.overlay || args.no_overlay)
    config->workspace_mode = args.overlay ? WorkspaceMode::Overlay : WorkspaceMode::Plain;
  KERNEX_ASSIGN_OR_RETURN(auto message, message_text(args.message));
  return PreparedRun{std::move(*config), std::move(*opts), std::move(message)};
}

namespace {

int run(const ConfigFile& config_file, const RunArgs& args) {
  auto prepared = prepare_run(config_file, args);
  if (!prepared) return report(prepared.error());
  Config& config = prepared->config;
  RunOptions& opts = prepared->options;

  std::optional<skills::Project> project;
  std::vector<std::string> activate = args.skills;
  if (args.project) {
    auto loaded = skills::load_project(absolute_path(*args.project));
    if (!loaded) return report(loaded.error());
    project = std::move(*loaded);
    if (config.project.empty()) config.project = project->name;  // its own conversations
    activate.insert(activate.end(), project->skills.begin(), project->skills.end());
  }
  if (auto overlay = use_workspace_mode(config, opts); !overlay) return report(overlay.error());

  // Skills load (and register their folders as kernel files) before the kernel and its plugins
  // exist, so every sandbox policy of this run is built knowing them.
  auto skill_source = load_run_skills(config, activate);
  if (!skill_source) return report(skill_source.error());
  auto kernel = Kernel::create(std::move(config));
  if (!kernel) return report(kernel.error());
  if (project)
    (*kernel)->add_context_source(
        std::make_shared<skills::ProjectContextSource>(std::move(*project)));
  if (*skill_source) (*kernel)->add_context_source(*skill_source);
  StreamPrinter printer(args.json ? StreamPrinter::Mode::JsonEvents : StreamPrinter::Mode::Text);
  if (args.stream || (!args.json && StreamPrinter::stdout_is_terminal()))
    opts.sink = printer.sink();
  return print_run_result(
      (*kernel)->run(Request::from_text("cli", std::move(prepared->message)), opts), printer,
      args.json);
}

}  // namespace

CommandRun setup_run(Command command, std::string&) {
  auto args = std::make_shared<RunArgs>();
  add_run_options(command, *args);
  add_repeated(command, "--skills", args->skill_dirs, "a directory of skills (repeatable)")
      .type_name("DIR");
  add_repeated(command, "--skill", args->skills,
               "activate this skill whatever the message says (repeatable)")
      .type_name("NAME");
  command
      .add_option(
          "--project", args->project,
          "a project folder: its AGENTS.md (or ROLE.md) instructions and the skills it names")
      .type_name("DIR");
  command.add_flag("--json", args->json, "print the whole result as one line of JSON");
  command.add_flag("--stream", args->stream,
                   "print the answer as it arrives (the default on a terminal); with --json, one "
                   "JSON event per line before the result line");
  command
      .add_option("message", args->message, "the message (several words are joined; - reads stdin)")
      .required()
      .type_name("MESSAGE");
  return [args](const ConfigFile& config) { return run(config, *args); };
}

int print_run_result(const Result<RunResult>& result, StreamPrinter& printer, bool json) {
  if (!result) return report(result.error());
  if (!json && printer.printed_text()) {
    printer.finish_line();
  } else if (json) {
    std::cout << to_json(*result).dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  } else {
    std::cout << for_terminal(result->text);
    if (!result->text.empty() && result->text.back() != '\n') std::cout << '\n';
  }
  std::cout.flush();
  if (result->outcome != Outcome::EndTurn) {
    std::cerr << "kernex: limit: run ended by " << to_string(result->outcome) << " after "
              << result->turns << " model call(s)\n";
    return kExitLimit;
  }
  return kExitOk;
}

}  // namespace kernex::cli
