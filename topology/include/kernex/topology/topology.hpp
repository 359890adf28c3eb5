// A topology: several agents run as one durable run (kernex-pipelines' TOPOLOGY.toml, and a YAML
// form with the same schema). This header is the format: the types a loaded topology is made of,
// and loading from a folder or a file. Every check is made at load time, so a topology that loads
// can run: names, agents, artifacts, bounds and schemas. Errors name the file, line and field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/config.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::topology {

// Bounds of a topology file: a hostile one cannot make a run that never ends or a graph too big
// to hold.
inline constexpr std::size_t kMaxPhases = 256;
inline constexpr std::size_t kMaxAgents = 128;
inline constexpr std::size_t kMaxGroupSize = 32;
inline constexpr std::uint32_t kMaxLoopRounds = 20;
inline constexpr std::uint32_t kMaxRetries = 10;
inline constexpr std::uint32_t kMaxBackoffMs = 60'000;
inline constexpr std::uint32_t kMaxMapItems = 1000;
inline constexpr std::uint32_t kMaxHandoffs = 10;
inline constexpr std::size_t kMaxAgentPromptBytes = 256 * 1024;
inline constexpr std::size_t kMaxSchemaBytes = 256 * 1024;

// Topology, agent, phase and artifact names: 1-64 of [A-Za-z0-9_-] (no "..", "/", "\").
bool valid_name(std::string_view name);

enum class WorkspaceView {
  Shared,    // the run's workspace itself
  Overlay,   // its own overlay layer under the run's folder: writes never reach the real tree
  ReadOnly,  // no tools that write: the agent gets no tools unless it names read-only ones
};
std::string_view to_string(WorkspaceView view);

// Per agent call; a total over the whole run is the topology's `limits`.
struct AgentLimits {
  Budgets budgets;
  std::optional<std::uint32_t> wall_time_ms;
};

struct Agent {
  std::string name;
  std::string prompt;  // agents/<name>.md: its instructions (system prompt)
  std::filesystem::path prompt_file;
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::optional<std::string> tier;  // mapped to a provider and model by config `topology.tiers`
  // None: every tool; a list: only those (an empty list: no tools).
  std::optional<std::vector<std::string>> tools;
  std::vector<std::string> skills;     // activated for each of its calls
  std::vector<std::string> toolboxes;  // toolbox plugins its kernel loads; empty: the config's
  std::vector<std::string> allow, ask, deny;             // permission rules added to the config's
  std::optional<std::filesystem::path> sandbox_profile;  // a SandboxProfile YAML beside the file
  WorkspaceView workspace = WorkspaceView::Shared;
  AgentLimits limits;
};

enum class ArtifactType { Text, Json, File };
std::string_view to_string(ArtifactType type);

struct Validation {
  enum class Kind { FileExists, FilePatterns, FileNotEmpty, JsonSchema };
  Kind kind = Kind::FileExists;
  std::vector<std::string> paths;     // workspace-relative, never leaving it
  std::vector<std::string> patterns;  // a file whose name contains one must exist
  Json schema;                        // JsonSchema: over the phase's output (post) or inputs (pre)
  std::string schema_file;
};

enum class PhaseType { Standard, ParseBrief, CorrectiveLoop, ParseSummary, Map, Handoff };
std::string_view to_string(PhaseType type);

struct Phase {
  std::string name;
  std::string agent;
  PhaseType type = PhaseType::Standard;
  std::string model_tier = "complex";
  std::optional<std::uint32_t> max_turns;
  std::optional<std::string> parallel_group;
  std::string instructions;         // `prompt`: the task given to the agent before its inputs
  std::vector<std::string> inputs;  // artifact names ("input": the run's input)
  std::string output;               // the artifact it produces (default: its name)
  ArtifactType output_type = ArtifactType::Text;
  Json output_schema;  // Json outputs: checked against it (null: any JSON)
  std::string output_schema_file;
  std::string output_path;  // File outputs: the workspace file the agent writes
  std::vector<Validation> pre_validation, post_validation;
  // Corrective loop: `agent` reviews, `fix_agent` fixes, at most `max_rounds` fixes.
  std::uint32_t max_rounds = 0;
  std::string fix_agent;
  Json verdict_schema;  // the reviewer's verdict: a JSON object with "verdict": "pass"|"fail"
  // Map: the agent runs once per item of `map_over` (a JSON array artifact), `concurrency` at once.
  std::string map_over;
  std::uint32_t max_items = 64;
  std::uint32_t concurrency = 4;
  // Handoff: the agent may pass the conversation to one of these, at most `max_handoffs` times.
  std::vector<std::string> handoffs;
  std::uint32_t max_handoffs = 3;
  // Retry of a failed attempt (a provider error, an output that fails its checks).
  std::uint32_t retries = 0;
  std::uint32_t backoff_ms = 500;  // doubled after each failed attempt
  int line = 0;
};

struct Topology {
  std::string name;
  std::string description;
  std::int64_t version = 1;
  std::filesystem::path dir;   // where agents/ and schemas live
  std::filesystem::path file;  // TOPOLOGY.toml / .yaml
  std::map<std::string, Agent> agents;
  std::vector<Phase> phases;
  AgentLimits limits;  // totals over the whole run (max_turns unused)

  // Consecutive phases sharing `parallel_group` form one group; others are groups of one.
  std::vector<std::vector<std::size_t>> groups() const;
  const Phase* phase(std::string_view name) const;
  // A stable digest of everything that decides what a run does (a resumed run must match it).
  std::string digest() const;
};

// Loads `{dir}/TOPOLOGY.toml` (or TOPOLOGY.yaml / .yml) and its agents. Errors: ErrorCode::Config
// naming the file, line and field.
Result<Topology> load_dir(const std::filesystem::path& dir);
// Loads a TOPOLOGY file (.toml, .yaml or .yml); its folder holds agents/ and schemas.
Result<Topology> load_file(const std::filesystem::path& file);
// Parses text in memory (agents' .md files are still read from `dir`). `yaml`: YAML, else TOML.
Result<Topology> parse(std::string_view text, bool yaml, const std::filesystem::path& file,
                       const std::filesystem::path& dir);
// `{data_dir}/topologies/{name}` after checking the name, or the file/folder a path names.
Result<Topology> resolve(const std::string& name_or_path, const std::filesystem::path& data_dir);

// The graph as text (`kernex topology show`) and as JSON.
std::string describe(const Topology& topology);
Json to_json(const Topology& topology);

}  // namespace kernex::topology
