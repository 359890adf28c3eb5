// `kernex mcp serve|list|call`: argument handling over kernex_mcp. The protocol lives in the
// library (kernex/mcp/*.hpp); this file only wires skills, config and the kernel to it.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/kernel.hpp"
#include "kernex/log.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/mcp/server.hpp"
#include "kernex/mcp/toolbox.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/loader.hpp"
#include "mcp_serve_tools.hpp"
#include "provider_opt.hpp"
#include "skill_trust.hpp"

namespace kernex::cli {

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
namespace {

namespace fs = std::filesystem;

std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// An MCP client is no run: it has no allowed tools that could name the REPL's tools, which the
// repl toolbox offers by default only to runs that do (`offer: when_allowed`, for `kernex rlm`).
// So whenever the repl toolbox is configured, mcp serve tells it its tools are offered, by the
// option a user would set, unless the user set `offer` themself. The kernel's own instance (for
// kernex_run) keeps the configured options.
// It also gets the data dir, as the kernel's own does (saved skills, checkpoints).
Json serve_options(const std::string& toolbox, Json options, const fs::path& data_dir) {
  if (toolbox != "repl") return options;
  if (options.is_null()) options = Json::object();
  if (options.is_object() && !options.contains("offer")) options["offer"] = "always";
  if (options.is_object() && !options.contains("data_dir") && !data_dir.empty())
    options["data_dir"] = absolute_path(data_dir.string()).string();
  return options;
}

Result<Config> load_config(const std::optional<std::string>& file,
                           const std::vector<std::string>& skill_dirs) {
  auto config = Config::load(file ? std::optional<fs::path>(*file) : std::nullopt);
  if (!config) return config;
  for (const auto& dir : skill_dirs) config->skill_dirs.push_back(absolute_path(dir));
  return config;
}

// The toolbox-mcp options from kernex.yaml (`toolboxes: [{name: mcp, config: {...}}]`), if any.
Result<mcp::ToolboxConfig> toolbox_config(const Config& config) {
  if (config.toolboxes) {
    for (const auto& ref : *config.toolboxes) {
      if (ref.name == "mcp") return mcp::ToolboxConfig::from_json(ref.config);
    }
  }
  return mcp::ToolboxConfig::from_json(Json::object());
}

struct DeclaredServer {
  McpServer server;
  std::string skill;
};

// Every loaded skill's MCP servers, each carrying its skill's permissions (the loader applies
// them).
struct SkillServers {
  std::vector<DeclaredServer> servers;
  std::vector<skills::Skill> skills;
  std::string refused;  // why skills or servers were refused (skills::refusal_reasons)
};

Result<SkillServers> skill_servers(const Config& config) {
  skills::LoadOptions options = skill_load_options(config);
  const std::vector<fs::path> dirs = run_skill_dirs(config, options);  // saved ones too
  skills::LoadedSkills loaded = skills::load_skills(dirs, options);
  for (const auto& failure : loaded.failures)
    log(LogLevel::Warn, "skill not loaded: " + failure.describe());
  SkillServers out;
  std::map<std::string, std::string> seen;
  for (const auto& skill : loaded.skills) {
    for (const auto& server : skill.mcp_servers) {
      if (auto it = seen.find(server.name); it != seen.end()) {
        log(LogLevel::Warn, "MCP server '" + server.name + "' of skill '" + skill.name +
                                "' ignored: skill '" + it->second +
                                "' declares one with that name");
        continue;
      }
      seen.emplace(server.name, skill.name);
      out.servers.push_back({server, skill.name});
    }
  }
  out.refused = skills::refusal_reasons(loaded);
  out.skills = std::move(loaded.skills);
  return out;
}

// What list and call work on: the config, the skills' MCP servers, and the toolbox that starts
// them.
struct SkillMcp {
  std::unique_ptr<mcp::McpToolbox> box;
  SkillServers declared;
};

Result<SkillMcp> open_skill_mcp(const std::optional<std::string>& config_file,
                                const McpArgs& args) {
  KERNEX_ASSIGN_OR_RETURN(auto config, load_config(config_file, args.skill_dirs));
  KERNEX_ASSIGN_OR_RETURN(auto box_config, toolbox_config(config));
  auto box = std::make_unique<mcp::McpToolbox>(std::move(box_config));
  KERNEX_ASSIGN_OR_RETURN(auto declared, skill_servers(config));
  return SkillMcp{std::move(box), std::move(declared)};
}

// One declared server and the tools it lists, or why it could not list them.
Json list_server(mcp::McpToolbox& box, const DeclaredServer& d) {
  Json entry = {{"server", d.server.name},
                {"skill", d.skill},
                {"command", d.server.command},
                {"args", d.server.args}};
  auto client = box.client(d.server);
  auto tools = client->list_tools();
  if (!tools) {
    entry["error"] = tools.error().describe();
    return entry;
  }
  entry["protocol_version"] = client->protocol_version();
  Json list = Json::array();
  for (const auto& t : *tools) {
    list.push_back({{"name", t.name},
                    {"exposed_name", mcp::exposed_tool_name(d.server.name, t.name)},
                    {"description", t.description},
                    {"inputSchema", t.input_schema}});
  }
  entry["tools"] = std::move(list);
  return entry;
}

// Manifests and the servers' own tool lists: controls made visible.
void print_servers(const Json& out) {
  if (out.empty()) std::cout << "no MCP servers declared by the skills in the given directories\n";
  for (const auto& e : out) {
    std::string line = e["server"].get<std::string>() + " (skill " + e["skill"].get<std::string>() +
                       "): " + e["command"].get<std::string>();
    for (const auto& a : e["args"]) line += ' ' + a.get<std::string>();
    std::cout << for_terminal(line) << '\n';
    if (e.contains("error")) {
      std::cout << "  error: " << for_terminal(e["error"].get<std::string>()) << '\n';
      continue;
    }
    for (const auto& t : e["tools"]) {
      std::string desc = t["description"].get<std::string>();
      if (auto nl = desc.find('\n'); nl != std::string::npos) desc = desc.substr(0, nl);
      std::cout << "  "
                << for_terminal(t["name"].get<std::string>() + (desc.empty() ? "" : " - " + desc))
                << '\n';
    }
  }
}

int mcp_list_command(const std::optional<std::string>& config_file, const McpArgs& args) {
  auto skill_mcp = open_skill_mcp(config_file, args);
  if (!skill_mcp) return report(skill_mcp.error());
  Json out = Json::array();
  bool failed = false;
  for (const auto& d : skill_mcp->declared.servers) {
    out.push_back(list_server(*skill_mcp->box, d));
    failed = failed || out.back().contains("error");
  }
  skill_mcp->box->shutdown();
  if (args.json)
    std::cout << json_text(out) << '\n';
  else
    print_servers(out);
  std::cout.flush();
  return failed ? kExitTool : kExitOk;
}

int mcp_call_command(const std::optional<std::string>& config_file, const McpArgs& args) {
  Json arguments = parse_untrusted(args.arguments);
  if (arguments.is_discarded() || !arguments.is_object()) {
    return report(Error(ErrorCode::Usage,
                        "the tool arguments must be a JSON object, got `" + args.arguments + "`"));
  }
  auto skill_mcp = open_skill_mcp(config_file, args);
  if (!skill_mcp) return report(skill_mcp.error());
  const DeclaredServer* target = nullptr;
  std::string names;
  for (const auto& d : skill_mcp->declared.servers) {
    if (d.server.name == args.server) target = &d;
    names += (names.empty() ? "" : ", ") + d.server.name;
  }
  if (target == nullptr) {
    return report(Error(ErrorCode::Usage, "no skill declares an MCP server named '" + args.server +
                                              "'; declared: " + (names.empty() ? "(none)" : names) +
                                              skill_mcp->declared.refused));
  }
  auto result = skill_mcp->box->client(target->server)->call_tool(args.tool, arguments);
  skill_mcp->box->shutdown();
  if (!result) return report(result.error());
  if (args.json) {
    std::cout << json_text(result->raw) << '\n';
  } else {
    std::cout << for_terminal(result->rendered.text);
    if (!result->rendered.text.empty() && result->rendered.text.back() != '\n') std::cout << '\n';
  }
  std::cout.flush();
  return result->rendered.is_error ? kExitTool : kExitOk;
}

// The MCP client has no run to carry what code submitted (submit_result): the value comes back in
// the eval_code answer itself, as `result`.
void with_submitted(ToolResult& result, Json value) {
  Json body = parse_untrusted(result.content);
  if (!body.is_object()) return;
  body["result"] = std::move(value);
  result.content = body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<RunOptions> serve_run_options(const McpArgs& args) {
  RunOptions run_options;
  run_options.provider = args.provider;
  for (const auto& raw : args.provider_opts) {
    KERNEX_ASSIGN_OR_RETURN(auto kv, parse_provider_opt(raw));
    run_options.provider_options[kv.first] = std::move(kv.second);
  }
  return run_options;
}

// The executors direct tool calls go to, made from the kernel's plugins with the configured
// options (the REPL's `offer` aside, see serve_options); with no toolboxes configured, every
// toolbox plugin that loads.
struct ServeToolboxes {
  std::vector<std::shared_ptr<ToolExecutor>> executors;
  const ToolExecutor* repl = nullptr;  // the REPL toolbox, whose code gets services
};

Result<ServeToolboxes> serve_toolboxes(Kernel& kernel, const Config& config) {
  ServeToolboxes out;
  auto add_toolbox = [&](const std::string& name, const Json& options) -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(auto box, kernel.plugins().create_toolbox(
                                          name, serve_options(name, options, config.data_dir)));
    if (name == "repl") out.repl = box.get();
    out.executors.push_back(std::move(box));
    return {};
  };
  if (config.toolboxes) {
    for (const auto& ref : *config.toolboxes) {
      if (auto added = add_toolbox(ref.name, ref.config); !added)
        return fail(ErrorCode::Plugin, "toolbox plugin '" + ref.name + "'", added.error());
    }
  } else {
    for (const auto& info : kernel.plugins().plugins()) {
      if (info.ok() && info.kind == PluginKind::Toolbox)
        (void)add_toolbox(info.name, Json::object());
    }
  }
  return out;
}

// Skill permissions travel on each McpServer (skills::apply_permissions), as in `kernex run`.
// The Context direct calls run in: every loaded skill's toolboxes and MCP servers.
std::shared_ptr<Context> skills_context(const SkillServers& declared) {
  auto context = std::make_shared<Context>();
  for (const auto& skill : declared.skills) {
    if (!skill.available) continue;
    context->toolboxes.insert(context->toolboxes.end(), skill.toolboxes.begin(),
                              skill.toolboxes.end());
  }
  for (const auto& d : declared.servers) context->mcp_servers.push_back(d.server);
  return context;
}

ToolSpec kernex_run_spec() {
  ToolSpec run_tool;
  run_tool.name = "kernex_run";
  run_tool.description =
      "Run one full kernex agent turn: the configured model answers `message`, using the kernel's "
      "tools, skills, "
      "hooks and permission rules, and the final answer is returned.";
  run_tool.parameters = Json::parse(R"({"type":"object","properties":{"message":{"type":"string",
      "description":"The user message for the agent."}},"required":["message"]})");
  return run_tool;
}

// A provider named (in the config or with --provider) answers the code's llm_query; with none
// the client does (deferred mode), so a model as the client needs no API key here.
Result<void> attach_provider(ServeRunServices& services, Kernel* kernel, const Config& config,
                             const RunOptions& run_options) {
  if (!run_options.provider && config.provider.name.empty()) return {};
  KERNEX_ASSIGN_OR_RETURN(auto provider, kernel->create_provider(run_options));
  // Each of a batch's queries leases an instance of its own (plugins need not be thread-safe).
  services.set_provider(
      provider, [kernel, run_options, first = provider]() -> Result<std::shared_ptr<Provider>> {
        if (auto twin = first->concurrent_instance()) return twin;
        return kernel->create_provider(run_options);
      });
  return {};
}

// kernex_run: one full turn through the kernel, stopped by the client's notifications/cancelled.
ToolResult run_turn(Kernel& kernel, RunOptions options, const std::string& name,
                    const Json& arguments, std::stop_token stop) {
  if (!arguments.contains("message") || !arguments["message"].is_string()) {
    return ToolResult{"", name, "kernex_run needs {\"message\": string}", true};
  }
  options.stop = stop;
  auto run =
      kernel.run(Request::from_text("mcp", arguments["message"].get<std::string>()), options);
  if (!run) return ToolResult{"", name, run.error().describe(), true};
  std::string text = run->text;
  if (run->outcome != Outcome::EndTurn)
    text += "\n[kernex: run ended by " + std::string(to_string(run->outcome)) + "]";
  return ToolResult{"", name, text, run->outcome != Outcome::EndTurn};
}

// `kernex mcp serve`: config and provider options -> the skills' servers -> the kernel (with the
// skills as context) -> the toolboxes for direct calls -> their tools and the REPL's services ->
// handlers (kernex_run through the kernel, everything else direct) -> stdio until EOF.
// Direct tool calls go to executors of their own; `kernex_run` goes through the kernel (its
// toolboxes, hooks and rules). Both are created from the same plugins and options.
int mcp_serve_command(const std::optional<std::string>& config_file, const McpArgs& args) {
  auto config = load_config(config_file, args.skill_dirs);
  if (!config) return report(config.error());
  auto run_options = serve_run_options(args);
  if (!run_options) return report(run_options.error());
  auto declared = skill_servers(*config);
  if (!declared) return report(declared.error());
  auto kernel = Kernel::create(*config);
  if (!kernel) return report(kernel.error());
  if (!declared->skills.empty()) {
    auto source = skills::SkillContextSource::create(declared->skills, {});
    if (!source) return report(source.error());
    (*kernel)->add_context_source(*source);
  }
  auto boxes = serve_toolboxes(**kernel, *config);
  if (!boxes) return report(boxes.error());
  const ToolSpec run_tool = kernex_run_spec();
  ServeTools tools((*kernel)->permissions(), skills_context(*declared), boxes->executors,
                   {run_tool.name});
  // One session per serve process: stdio carries one MCP session, whose REPL persists.
  auto services = std::make_shared<ServeRunServices>(tools, boxes->repl,
                                                     "mcp-serve-" + std::to_string(::getpid()));
  if (auto attached = attach_provider(*services, kernel->get(), *config, *run_options); !attached)
    return report(attached.error());
  tools.set_handles(RunHandles{services, nullptr, {}});
  tools.set_hooks((*kernel)->hooks(), HookScope{services->session(), "mcp", "mcp-serve"});
  mcp::ServerHandlers handlers;
  handlers.list_tools = [&]() -> Result<std::vector<ToolSpec>> {
    std::vector<ToolSpec> specs{run_tool};
    for (auto& spec : tools.list()) specs.push_back(std::move(spec));
    return specs;
  };
  handlers.call_tool_stoppable = [&](const std::string& name, const Json& arguments,
                                     std::stop_token stop) -> Result<ToolResult> {
    if (name == run_tool.name) return run_turn(**kernel, *run_options, name, arguments, stop);
    services->take_submitted();  // only what this call's code submits
    ToolResult result = tools.call(ToolCall{"mcp", name, arguments}, nullptr, stop);
    if (auto submitted = services->take_submitted()) with_submitted(result, std::move(*submitted));
    return result;
  };
  mcp::ServerInfo info;
  info.instructions =
      "kernex: call kernex_run for a full agent turn, or the kernel's tools directly.";
  mcp::StdioServer server(info, handlers);
  std::ios::sync_with_stdio(false);
  server.serve(std::cin, std::cout);
  return kExitOk;
}

}  // namespace

CommandRun setup_mcp(Command mcp, std::string& config) {
  auto args = std::make_shared<McpArgs>();
  mcp.require_subcommand();
  Command serve =
      mcp.add_subcommand("serve", "Speak MCP on stdin/stdout: the kernel's tools and kernex_run");
  Command list = mcp.add_subcommand(
      "list", "Start every MCP server the skills declare (sandboxed) and list its tools");
  Command call = mcp.add_subcommand("call", "Call one tool of a skill's MCP server (sandboxed)");
  for (Command sub : {serve, list, call}) {
    sub.footer(kExitCodeHelp);
    add_config_option(sub, config);
    add_repeated(sub, "--skills", args->skill_dirs, "a directory of skills (repeatable)")
        .type_name("DIR");
  }
  list.add_flag("--json", args->json, "print a JSON array of servers and their tools");
  call.add_flag("--json", args->json, "print the CallToolResult as JSON");
  call.add_option("server", args->server, "the server's name").required().type_name("SERVER");
  call.add_option("tool", args->tool, "the tool's name as the server lists it")
      .required()
      .type_name("TOOL");
  call.add_option("arguments", args->arguments, "the arguments, a JSON object")
      .required()
      .type_name("JSON");
  serve.add_option("--provider", args->provider, "provider plugin for kernex_run")
      .type_name("NAME");
  add_repeated(serve, "--provider-opt", args->provider_opts,
               "provider option for kernex_run (repeatable)")
      .type_name("KEY=VALUE");
  return [args, serve, list](const ConfigFile& config) {
    if (serve) return mcp_serve_command(config, *args);
    if (list) return mcp_list_command(config, *args);
    return mcp_call_command(config, *args);
  };
}

}  // namespace kernex::cli
