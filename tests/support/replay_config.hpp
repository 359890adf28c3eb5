// A kernel Config on the replay provider and the builtin toolbox: `lines` are the script (kept in
// `dir`), every request the provider receives is recorded to dir/record.jsonl. Needs
// KERNEX_SOURCE_DIR (the pricing table).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kernex/config.hpp"
#include "temp_dir.hpp"

namespace kernex::testing {

inline Config replay_builtin_config(const TempDir& dir, const std::vector<std::string>& lines) {
  std::string script;
  for (const auto& l : lines) script += l + "\n";
  Config config;
  config.provider.name = "replay";
  config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                            {"record", (dir / "record.jsonl").string()}};
  config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
  config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  return config;
}

}  // namespace kernex::testing
