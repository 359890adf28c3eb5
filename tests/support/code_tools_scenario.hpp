// Runs whose tools come from MCP servers installed from npm (cmake/KernexNpm.cmake), and issue 20's
// scenario on them, shared by tests/interop/code_tools_scenario_test.cpp and bench/repl: a 1.7 MB
// log in the workspace, served by server-filesystem inside the sandbox, whose server errors the
// model copies into errors.log either with code that calls the tools (Mode::CodeTools) or by
// calling read_text_file and write_file itself (Mode::DirectCalls). The kernel is the same in
// both; only the replay script differs. Every request the model receives is recorded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/kernel.hpp"

namespace kernex::scenario {

namespace fs = std::filesystem;

// Where this build keeps what the runs need.
struct Environment {
  fs::path npm_dir;     // its node_modules holds @modelcontextprotocol/server-*
  fs::path node;        // the node program
  fs::path plugin_dir;  // this build's plugins
  fs::path source_dir;  // the source tree: examples/code-tools/skills, data/pricing.yaml
};

// A kernel whose model plays a replay script (recorded to `record`), with the `repl` toolbox
// (offer: always) and the `mcp` toolbox working in `workspace`, MCP servers granted the npm
// packages read-only, the skills of `skill_dirs` loaded and `activate` activated in every run,
// trajectories under dir/data. A run may give another script with
// RunOptions::provider_options {"script": FILE}.
struct KernelSpec {
  fs::path dir;
  fs::path workspace;
  std::vector<fs::path> skill_dirs;
  std::vector<std::string> activate;
  std::vector<std::string> servers;  // the MCP servers' names
  fs::path script;
  fs::path record;
  std::uint32_t max_turns = 10;
};
Result<std::unique_ptr<Kernel>> make_kernel(const Environment& env, const KernelSpec& spec);

// Writes skills_dir/<server>/SKILL.md, a skill declaring the MCP server `server`: node running
// the npm package `package`'s dist/index.js with `args`.
void write_server_skill(const Environment& env, const fs::path& skills_dir,
                        const std::string& server, const std::string& package,
                        const std::vector<std::string>& args);

// Replay script lines: the model calls `calls` (each {"name", "arguments"}), or answers `text`.
Json calls_line(const std::vector<Json>& calls);
Json text_line(const std::string& text);
void write_script(const fs::path& path, const std::vector<Json>& lines);

// The log: 20 000 requests, every 997th a server error (21), 1.7 MB; the same lines as
// examples/code-tools/run writes.
struct AccessLog {
  std::string errors;  // the error lines, each ended by '\n': what errors.log must hold
  std::uintmax_t bytes = 0;
};
AccessLog write_access_log(const fs::path& path);
// A line from the middle of the log, not an error: it reaches the model only if the log does.
inline constexpr const char* kMiddleOfLog = "req=r0010000";

enum class Mode { CodeTools, DirectCalls };
struct Outcome {
  Result<RunResult> run;
  std::vector<std::string> requests;  // every request the model received, as recorded
  std::string written;                // workspace/errors.log afterwards
  AccessLog log;
  fs::path data_dir;  // the run's trajectory is there
};
// The scenario in `dir` (made empty first).
Outcome run_scenario(const Environment& env, Mode mode, const fs::path& dir);

// Tokens the model was sent, estimated the same way for any run: ceil(bytes / 4) of each request
// as recorded (system prompt, every message with its tool calls and results, the offered tools:
// what a chat API is sent on every call, since it keeps no state), summed over the requests.
std::uint64_t estimated_tokens(const std::vector<std::string>& requests);

}  // namespace kernex::scenario
