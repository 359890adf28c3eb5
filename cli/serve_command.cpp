// `kernex serve`: arguments only; the server is kernex::server. Its `keys` and `webhooks`
// subcommands are serve_keys_command.cpp and serve_webhooks_command.cpp.
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "heap_reserve.hpp"
#include "kernex/channels/channel_host.hpp"
#include "kernex/kernel.hpp"
#include "kernex/log.hpp"
#include "kernex/server/serve_config.hpp"
#include "kernex/server/server.hpp"
#include "kernex/skills/loader.hpp"
#include "provider_opt.hpp"
#include "serve_admin.hpp"
#include "skill_trust.hpp"

namespace kernex::cli {
namespace {

struct ServeArgs {
  std::optional<std::string> listen;
  std::optional<std::string> data_dir;
  std::vector<std::string> skill_dirs;
  std::optional<std::string> provider;  // --provider, --model, --provider-opt as `kernex run`
  std::optional<std::string> model;
  std::vector<std::string> provider_opts;
};

// --provider/--model/--provider-opt become the config's provider, so every run the server starts
// (chat completions, responses, runs) uses them unless a request names its own.
Result<void> apply_provider_args(Config& config, const ServeArgs& args) {
  if (args.provider && *args.provider != config.provider.name)
    config.provider = PluginRef{*args.provider, Json::object()};
  if (!config.provider.config.is_object()) config.provider.config = Json::object();
  for (const auto& raw : args.provider_opts) {
    KERNEX_ASSIGN_OR_RETURN(auto kv, parse_provider_opt(raw));
    config.provider.config[kv.first] = std::move(kv.second);
  }
  if (args.model && config.provider.name == "replay")
    return fail(ErrorCode::Usage,
                "--model: the replay provider answers from its script, not a model");
  if (args.model) config.provider.config["model"] = *args.model;
  if ((!args.provider_opts.empty() || args.model) && config.provider.name.empty())
    return fail(ErrorCode::Usage,
                "--model and --provider-opt need a provider: pass --provider NAME");
  return {};
}

// A server whose every answer would be a 502 does not start: the provider must be named and
// constructible (its key present, its base_url accepted). The replay provider is a test double
// whose script may come with each request, so it is taken as named.
Result<void> check_provider(const Kernel& kernel) {
  const std::string& name = kernel.config().provider.name;
  if (name.empty()) {
    return fail(ErrorCode::Config,
                "kernex serve needs a provider: pass --provider NAME (and --model MODEL), or set "
                "`provider:` in kernex.yaml (given with --config or KERNEX_CONFIG); `kernex "
                "plugins` lists the providers found");
  }
  if (name == "replay") return {};
  auto provider = kernel.create_provider(RunOptions{});
  if (!provider)
    return fail(ErrorCode::Config,
                "kernex serve: the provider '" + name +
                    "' cannot be used (fix `provider:` in kernex.yaml or pass --provider-opt)",
                provider.error());
  return {};
}

Result<Config> serve_config(const std::optional<std::string>& file, const ServeArgs& args) {
  auto config = load_config_with(file, args.data_dir, args.skill_dirs);
  if (!config) return config;
  if (auto applied = apply_provider_args(*config, args); !applied)
    return std::unexpected(applied.error());
  return config;
}

// The heap a server's first burst grows into, made present before it listens, as a JVM's
// AlwaysPreTouch does (cli/heap_reserve.hpp says why). KERNEX_HEAP_RESERVE_MIB (default 64, at
// most 64, 0 for none) sets how much; it is resident from the start, used or not.
void reserve_heap() {
  std::size_t mib = 64;
  if (const char* setting = std::getenv("KERNEX_HEAP_RESERVE_MIB")) {
    const char* end = setting + std::strlen(setting);
    std::size_t parsed = 0;
    const auto [stop, error] = std::from_chars(setting, end, parsed);
    if (error != std::errc{} || stop != end || parsed > 64) {
      log(LogLevel::Warn,
          "KERNEX_HEAP_RESERVE_MIB: expected a whole number of MiB from 0 to 64, "
          "not '" +
              std::string(setting) + "'; 64 reserved");
    } else {
      mib = parsed;
    }
  }
  if (mib > 0 && kernex_populate_heap_ahead != nullptr) kernex_populate_heap_ahead(mib << 20);
}

int serve(const std::optional<std::string>& file, const ServeArgs& args) {
  auto config = serve_config(file, args);
  if (!config) return report(config.error());
  auto serve_settings = server::ServeConfig::from(*config);
  if (!serve_settings) return report(serve_settings.error());
  // Skills load before the kernel so every sandbox policy knows their folders; sessions'
  // workspaces are places tools write, so skills found there load only once trusted.
  std::vector<skills::Skill> loaded;
  std::map<std::string, std::string> refused;
  if (!config->skill_dirs.empty()) {
    skills::LoadedSkills found = skills::load_skills(
        config->skill_dirs, skill_load_options(*config, {serve_settings->workspaces_root}));
    for (const auto& failure : found.failures) {
      log(LogLevel::Warn, "skill not loaded: " + failure.describe());
      refused[failure.path.filename().string()] = failure.describe();
    }
    loaded = std::move(found.skills);
  }
  auto kernel = Kernel::create(std::move(*config));
  if (!kernel) return report(kernel.error());
  if (auto usable = check_provider(**kernel); !usable) return report(usable.error());
  // Every configured channel runs beside the server and stops when it does.
  channels::ChannelSet channels(**kernel);
  server::ServeOptions options;
  options.listen = args.listen;
  options.announce = &std::cout;
  options.refused_skills = std::move(refused);
  reserve_heap();
  if (auto served = server::serve(**kernel, std::move(loaded), options); !served)
    return report(served.error());
  return kExitOk;
}

}  // namespace

CommandRun setup_serve(Command command, std::string& config) {
  auto args = std::make_shared<ServeArgs>();
  Command cmd = command;
  cmd.add_option("--listen", args->listen,
                 "HOST:PORT to listen on (default: serve.listen, 127.0.0.1:8080)");
  cmd.add_option("--data-dir", args->data_dir, "where memory, runs and workspaces live")
      .type_name("DIR");
  cmd.add_option("--skills", args->skill_dirs, "a skills directory (repeatable)")
      .allow_extra_args(false)
      .type_name("DIR");
  add_provider_options(cmd, {args->provider, args->model, args->provider_opts});
  const LoadServeConfig load = [args](const ConfigFile& file) { return serve_config(file, *args); };
  const ServeAdminCommand keys = add_serve_keys(cmd, config, args->data_dir, load);
  const ServeAdminCommand webhooks = add_serve_webhooks(cmd, config, args->data_dir, load);
  return [args, keys, webhooks](const ConfigFile& file) {
    if (keys.command) return keys.run(file);
    if (webhooks.command) return webhooks.run(file);
    return serve(file, *args);
  };
}

}  // namespace kernex::cli
