// `kernex providers [--json]`: the provider plugins found, the known network providers and
// OpenAI-compatible presets, their default models, and whether each key variable is set.
// Key values are never read into the output.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/config.hpp"
#include "kernex/doctor.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/providers/catalog.hpp"

namespace kernex::cli {

namespace {

struct Row {
  std::string name;
  const PluginInfo* plugin = nullptr;
  const providers::CatalogEntry* entry = nullptr;
  std::string key_env;  // after config overrides (api_key_env)
  bool key_in_config = false;
};

bool env_set(const std::string& name) {
  const char* v = name.empty() ? nullptr : std::getenv(name.c_str());
  return v != nullptr && *v != '\0';
}

std::string key_state(const Row& r) {
  if (r.entry == nullptr) return "-";
  if (r.key_env.empty() && !r.key_in_config) return "not needed";
  if (r.key_in_config) return "set in config";
  return env_set(r.key_env) ? "set" : "not set";
}

Json row_json(const Row& r) {
  Json j{{"name", r.name}, {"found", r.plugin != nullptr && r.plugin->ok()}};
  j["path"] = r.plugin != nullptr ? Json(r.plugin->path.string()) : Json(nullptr);
  if (r.entry != nullptr) {
    j["api"] = std::string(r.entry->api);
    j["base_url"] = std::string(r.entry->base_url);
    j["default_model"] = std::string(r.entry->default_model);
    j["key_env"] = r.key_env.empty() ? Json(nullptr) : Json(r.key_env);
    j["key_set"] = r.key_in_config || env_set(r.key_env);
    j["preset"] = r.entry->api == "openai";
  }
  return j;
}

}  // namespace

namespace {

int providers_command(const ConfigFile& config_file, bool json) {
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return report(config.error());
  const PluginHost host = PluginHost::discover(plugin_search_dirs(*config));

  std::map<std::string, Row> rows;
  for (const auto& p : host.plugins()) {
    if (p.kind == PluginKind::Provider && p.ok()) rows[p.name].plugin = &p;
  }
  for (const auto& e : providers::kOpenAiPresets) rows[std::string(e.name)].entry = &e;
  for (const auto& e : providers::kOtherProviders) rows[std::string(e.name)].entry = &e;
  for (auto& [name, row] : rows) {
    row.name = name;
    if (row.entry != nullptr) row.key_env = std::string(row.entry->key_env);
    if (auto it = config->provider_options.find(name);
        it != config->provider_options.end() && it->second.is_object()) {
      if (it->second.contains("api_key_env") && it->second.at("api_key_env").is_string()) {
        row.key_env = it->second.at("api_key_env").get<std::string>();
      }
      row.key_in_config = it->second.contains("api_key");
    }
  }

  if (json) {
    Json out{{"providers", Json::array()}, {"presets", Json::array()}};
    for (const auto& [name, row] : rows) out["providers"].push_back(row_json(row));
    for (const auto& e : providers::kOpenAiPresets) out["presets"].push_back(std::string(e.name));
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
    return kExitOk;
  }
  std::size_t w_name = 4, w_model = 13, w_key = 12;
  for (const auto& [name, row] : rows) {
    w_name = std::max(w_name, name.size());
    if (row.entry != nullptr) w_model = std::max(w_model, row.entry->default_model.size());
    w_key = std::max(w_key, row.key_env.size());
  }
  auto pad = [](std::string_view s, std::size_t w) {
    return std::string(s) + std::string(w - std::min(w, s.size()) + 2, ' ');
  };
  std::cout << pad("NAME", w_name) << pad("FOUND", 5) << pad("API", 9)
            << pad("DEFAULT MODEL", w_model) << pad("KEY VARIABLE", w_key) << "KEY\n";
  for (const auto& [name, row] : rows) {
    const bool found = row.plugin != nullptr;
    std::cout << pad(name, w_name) << pad(found ? "yes" : "no", 5)
              << pad(row.entry != nullptr ? row.entry->api : "-", 9)
              << pad(row.entry != nullptr ? row.entry->default_model : "-", w_model)
              << pad(row.key_env.empty() ? "-" : row.key_env, w_key) << key_state(row) << '\n';
  }
  std::cout << "\nOpenAI-compatible presets run as `--provider NAME` or `--provider openai "
               "--provider-opt "
               "preset=NAME`;\nany other compatible server: `--provider openai --provider-opt "
               "base_url=URL`.\n";
  return kExitOk;
}

}  // namespace

CommandRun setup_providers(Command command, std::string&) {
  auto json = std::make_shared<bool>(false);
  command.add_flag("--json", *json, "print a JSON object");
  return [json](const ConfigFile& config) { return providers_command(config, *json); };
}

}  // namespace kernex::cli
