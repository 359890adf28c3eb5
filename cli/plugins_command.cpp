#include <algorithm>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/config.hpp"
#include "kernex/doctor.hpp"
#include "kernex/plugin_host.hpp"

namespace kernex::cli {

namespace {

Json plugin_json(const PluginInfo& p) {
  return Json{{"path", p.path.string()},
              {"kind", p.kind ? Json(std::string(to_string(*p.kind))) : Json(nullptr)},
              {"name", p.name},
              {"version", p.version},
              {"abi_version", p.abi_version},
              {"ok", p.ok()},
              {"error", p.error ? Json(p.error->describe()) : Json(nullptr)}};
}

void print_table(const std::vector<PluginInfo>& plugins) {
  std::size_t kind_w = 0, name_w = 0, version_w = 0;
  for (const auto& p : plugins) {
    if (!p.ok()) continue;
    kind_w = std::max(kind_w, p.kind ? to_string(*p.kind).size() : 1);
    name_w = std::max(name_w, p.name.size());
    version_w = std::max(version_w, p.version.size());
  }
  auto pad = [](std::string s, std::size_t w) {
    return s + std::string(w - std::min(w, s.size()) + 2, ' ');
  };
  for (const auto& p : plugins) {
    if (p.ok()) {
      // A plugin's name and version are its own strings: shown with controls made visible.
      std::cout << for_terminal(pad(p.kind ? std::string(to_string(*p.kind)) : "?", kind_w) +
                                pad(p.name, name_w) + pad(p.version, version_w) + p.path.string())
                << '\n';
    } else {
      std::cout << "ERROR " << for_terminal(p.path.string() + ": " + p.error->describe()) << '\n';
    }
  }
}

}  // namespace

namespace {

int plugins_command(const ConfigFile& config_file, bool json) {
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return report(config.error());
  const auto dirs = plugin_search_dirs(*config);
  const PluginHost host = PluginHost::discover(dirs);
  const auto& plugins = host.plugins();

  if (json) {
    Json out = Json::array();
    for (const auto& p : plugins) out.push_back(plugin_json(p));
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  } else if (plugins.empty()) {
    std::cerr << "kernex: no plugins found in:";
    for (const auto& d : dirs) std::cerr << ' ' << d.string();
    std::cerr << '\n';
  } else {
    print_table(plugins);
  }
  const bool any_failed =
      std::any_of(plugins.begin(), plugins.end(), [](const auto& p) { return !p.ok(); });
  return any_failed ? kExitPlugin : kExitOk;
}

}  // namespace

CommandRun setup_plugins(Command command, std::string&) {
  auto json = std::make_shared<bool>(false);
  command.add_flag("--json", *json, "print a JSON array");
  return [json](const ConfigFile& config) { return plugins_command(config, *json); };
}

}  // namespace kernex::cli
