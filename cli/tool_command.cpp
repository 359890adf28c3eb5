// `kernex tool run`: run one skill toolbox exactly as the agentic loop's toolbox-script plugin
// would (same translation to a sandbox policy, same argument handling, same result), and print the
// result the model would see.
#include <cmath>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/config.hpp"
#include "kernex/sandbox/toolbox.hpp"
#include "kernex/skills/loader.hpp"
#include "skill_trust.hpp"

namespace kernex::cli {

namespace {

namespace sb = kernex::sandbox;

struct ToolRunArgs {
  std::vector<std::string> skill_dirs;
  std::string tool;
  std::string args = "{}";
  std::optional<std::string> workspace;
  std::optional<std::string> profile;
  std::optional<double> timeout;
  bool json = false;
};

// The toolbox-script plugin's options from kernex.yaml (`toolboxes: [{name: script, options:
// ...}]`), so the command sees the same workspace and profile as a run would.
Json script_plugin_config(const Config& config) {
  if (config.toolboxes) {
    for (const auto& ref : *config.toolboxes) {
      if (ref.name == "script") return ref.config;
    }
  }
  return Json::object();
}

int tool_run(const std::optional<std::string>& config_file, const ToolRunArgs& args) {
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return report(config.error());

  const Json arguments = parse_untrusted(args.args);
  if (arguments.is_discarded())
    return report(Error(ErrorCode::Usage,
                        "--args: expected a JSON object, got text that is not JSON"
                        " (or nests deeper than " +
                            std::to_string(kMaxJsonDepth) + ")"));
  if (!arguments.is_object())
    return report(
        Error(ErrorCode::Usage, "--args: expected a JSON object, got " + arguments.dump()));

  Json plugin_config = script_plugin_config(*config);
  if (args.workspace) {
    std::error_code ec;
    plugin_config["workspace"] =
        std::filesystem::absolute(*args.workspace, ec).lexically_normal().string();
  }
  if (args.profile) plugin_config["profile"] = *args.profile;
  if (args.timeout) plugin_config["timeout"] = *args.timeout;
  auto options = sb::ToolboxRunOptions::from_json(plugin_config, "tool run");
  if (!options) return report(options.error());
  // The kernel's own files (the config, what it names, the data dir) were registered by
  // Config::load; every policy keeps them out of reach.

  std::vector<std::filesystem::path> dirs;
  for (const auto& d : args.skill_dirs) dirs.emplace_back(std::filesystem::absolute(d));
  std::vector<std::filesystem::path> writable{options->workspace};
  writable.insert(writable.end(), options->base.read_write.begin(), options->base.read_write.end());
  if (options->base.workspace) writable.push_back(*options->base.workspace);
  skills::LoadedSkills loaded = skills::load_skills(dirs, skill_load_options(*config, writable));
  for (const auto& failure : loaded.failures)
    std::cerr << "kernex: skill not loaded: " << for_terminal(failure.describe()) << '\n';
  const Toolbox* found = nullptr;
  std::vector<std::string> names;
  for (const auto& skill : loaded.skills) {
    for (const auto& t : skill.toolboxes) {
      names.push_back(t.name);
      if (t.name == args.tool && found == nullptr) found = &t;
    }
  }
  if (found == nullptr) {
    std::string have;
    for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
    return report(Error(ErrorCode::Usage, "--tool: no toolbox named '" + args.tool +
                                              "' in the skills loaded (" +
                                              (have.empty() ? std::string("none") : have) + ")" +
                                              skills::refusal_reasons(loaded)));
  }

  sb::ToolboxRunner runner(std::move(*options));
  ToolResult result = runner.run(*found, ToolCall{"cli", found->name, arguments});
  if (args.json) {
    std::cout << Json{{"tool", result.name},
                      {"content", result.content},
                      {"is_error", result.is_error}}
                     .dump(-1, ' ', false, Json::error_handler_t::replace)
              << '\n';
  } else {
    std::cout << for_terminal(result.content);
    if (!result.content.empty() && result.content.back() != '\n') std::cout << '\n';
  }
  std::cout.flush();
  if (result.is_error) {
    std::cerr << "kernex: tool: toolbox '" << found->name << "' returned an error\n";
    return kExitTool;
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_tool(Command tool, std::string& config) {
  auto args = std::make_shared<ToolRunArgs>();
  tool.require_subcommand();
  Command run = tool.add_subcommand(
      "run", "Run one toolbox of a skill in the sandbox, exactly as a run would");
  run.footer(kExitCodeHelp);
  add_config_option(run, config,
                    "kernex.yaml to read (its `script` toolbox options and data dir apply)");
  run.add_option("--skills", args->skill_dirs, "a skill folder or a folder of skills (repeatable)")
      .allow_extra_args(false)
      .required()
      .type_name("DIR");
  run.add_option("--tool", args->tool, "the toolbox to run").required().type_name("NAME");
  run.add_option("--args", args->args, "the tool's arguments as a JSON object (default {})")
      .type_name("JSON");
  run.add_option("--workspace", args->workspace,
                 "read-write working directory (default: the current directory)")
      .type_name("DIR");
  run.add_option("--profile", args->profile, "YAML file with a sandbox profile").type_name("FILE");
  run.add_option("--timeout", args->timeout, "seconds before the toolbox is killed").type_name("S");
  run.add_flag("--json", args->json, "print {tool, content, is_error} as JSON");
  return [args](const ConfigFile& config) { return tool_run(config, *args); };
}

}  // namespace kernex::cli
