// Runs the script toolboxes that a run's skills declare (Context::toolboxes), each inside the
// Landlock + seccomp sandbox: arguments as JSON on stdin (and through "{name}" argument templates
// on argv), stdout as the result. Config: see kernex::sandbox::ToolboxRunOptions (workspace,
// profile, timeout, max_output, network_ports, protect).
#include "kernex/plugin.hpp"
#include "kernex/sandbox/toolbox.hpp"

namespace {

using kernex::Result;

class ScriptToolbox final : public kernex::ToolExecutor {
 public:
  explicit ScriptToolbox(kernex::sandbox::ToolboxRunOptions options) : runner_(std::move(options)) {}

  Result<std::vector<kernex::ToolSpec>> list_tools(const kernex::Context& context) override {
    std::vector<kernex::ToolSpec> specs;
    for (const auto& toolbox : context.toolboxes) specs.push_back(toolbox.spec());
    return specs;
  }

  Result<kernex::ToolResult> execute(const kernex::Context& context, const kernex::ToolCall& call) override {
    for (const auto& toolbox : context.toolboxes) {
      if (toolbox.name == call.name) return runner_.run(toolbox, call);
    }
    return kernex::fail(kernex::ErrorCode::Tool, "toolbox-script: no toolbox named '" + call.name + "' in this run");
  }

 private:
  kernex::sandbox::ToolboxRunner runner_;
};

Result<std::shared_ptr<kernex::ToolExecutor>> make_script_toolbox(const kernex::Json& config) {
  auto options = kernex::sandbox::ToolboxRunOptions::from_json(config, "toolbox-script");
  if (!options) return std::unexpected(options.error());
  return std::make_shared<ScriptToolbox>(std::move(*options));
}

}  // namespace

KERNEX_PLUGIN(Toolbox, "script", "1.0.0", "Runs skills' script toolboxes in the Landlock + seccomp sandbox",
              make_script_toolbox)
