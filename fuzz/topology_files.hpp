// Shared by the topology targets: a scratch topology folder (agents/a.md, agents/b.md and a schema)
// made once per process, so inputs that name those agents get past the agent checks; and what a
// loaded topology must survive (the graph text, its JSON, its digest).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "kernex/topology/topology.hpp"

namespace kernex::fuzz {

inline const std::filesystem::path& topology_folder() {
  static const std::filesystem::path folder = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kx-fuzz-topology-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    const std::filesystem::path root = pattern;
    std::filesystem::create_directories(root / "agents");
    for (const char* agent : {"a", "b"})
      std::ofstream(root / "agents" / (std::string(agent) + ".md")) << "agent\n";
    std::ofstream(root / "s.json") << R"({"type": "object", "required": ["verdict"]})";
    return root;
  }();
  return folder;
}

inline void judge_topology(std::string_view text, bool yaml) {
  const auto dir = topology_folder();
  auto loaded = topology::parse(text, yaml, dir / (yaml ? "TOPOLOGY.yaml" : "TOPOLOGY.toml"), dir);
  if (loaded) {
    (void)topology::describe(*loaded);
    (void)topology::to_json(*loaded).dump(-1, ' ', false, Json::error_handler_t::replace);
    (void)loaded->digest();
  } else {
    (void)loaded.error().describe();
  }
}

}  // namespace kernex::fuzz
