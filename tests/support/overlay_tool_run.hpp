// A Kernel run in overlay mode (RunOptions::workspace and workspace_layers) for the tests of every
// sandboxed tool process: the replay provider makes one tool call per model turn and then answers
// "done"; what each call returned is read back from the run's trajectory. Needs
// KERNEX_PLUGIN_BUILD_DIR and KERNEX_SOURCE_DIR, and links kernex::trajectory_view.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernex/kernel.hpp"
#include "kernex/trajectory_view.hpp"
#include "overlay_dirs.hpp"

namespace kernex::testing {

struct ScriptedCall {
  std::string name;
  Json arguments;
};

// Adds fixed script toolboxes and MCP servers to every run's Context, as skills would.
class FixedTools final : public ContextSource {
 public:
  FixedTools(std::vector<Toolbox> toolboxes, std::vector<McpServer> servers)
      : toolboxes_(std::move(toolboxes)), servers_(std::move(servers)) {}
  Result<void> contribute(Context& context, const Request&) override {
    context.toolboxes.insert(context.toolboxes.end(), toolboxes_.begin(), toolboxes_.end());
    context.mcp_servers.insert(context.mcp_servers.end(), servers_.begin(), servers_.end());
    return {};
  }

 private:
  std::vector<Toolbox> toolboxes_;
  std::vector<McpServer> servers_;
};

// Runs `calls` in overlay mode over `dirs` with the `toolboxes` plugins; every tool_call event of
// the run in order (calls made from code included), each with its `result` and `is_error`.
inline Result<std::vector<Json>> run_tools_in_overlay(
    const OverlayDirs& dirs, std::vector<PluginRef> toolboxes,
    const std::vector<ScriptedCall>& calls, std::shared_ptr<ContextSource> source = nullptr) {
  const auto script = dirs.root() / "script.jsonl";
  {
    std::ofstream out(script);
    const Json usage = {{"input_tokens", 10}, {"output_tokens", 10}};
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Json call = {{"id", "c" + std::to_string(i + 1)},
                         {"name", calls[i].name},
                         {"arguments", calls[i].arguments}};
      out << Json{{"tool_calls", Json::array({call})}, {"usage", usage}}.dump() << "\n";
    }
    out << Json{{"text", "done"}, {"usage", usage}}.dump() << "\n";
  }
  Config config;
  config.provider.name = "replay";
  config.provider.config = {{"script", script.string()}};
  config.toolboxes = std::move(toolboxes);
  config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
  config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  config.data_dir = dirs.root() / "data";
  KERNEX_ASSIGN_OR_RETURN(auto kernel, Kernel::create(config));
  RunOptions options;
  options.workspace = dirs.ws();
  options.workspace_layers = dirs.layers();
  if (source) options.sources.push_back(std::move(source));
  KERNEX_ASSIGN_OR_RETURN(auto run, kernel->run(Request::from_text("test", "go"), options));
  if (run.text != "done") return fail(ErrorCode::Internal, "the run ended early: " + run.text);
  KERNEX_ASSIGN_OR_RETURN(auto events, read_trajectory(config.data_dir / "trajectories", "last"));
  std::vector<Json> out;
  for (auto& e : events) {
    if (e["type"] == "tool_call") out.push_back(std::move(e));
  }
  return out;
}

// The text each call returned, in order.
inline std::vector<std::string> results_of(const std::vector<Json>& calls) {
  std::vector<std::string> out;
  for (const auto& c : calls) out.push_back(c.value("result", std::string()));
  return out;
}

}  // namespace kernex::testing
