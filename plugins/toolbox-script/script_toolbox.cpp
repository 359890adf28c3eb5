// Runs the script toolboxes that a run's skills declare (Context::toolboxes), each inside the
// Landlock + seccomp sandbox: arguments as JSON on stdin (and through "{name}" argument templates
// on argv), stdout as the result. Config: see kernex::sandbox::ToolboxRunOptions (workspace,
// profile, timeout, max_output, network_ports, protect).
#include <mutex>

#include "kernex/kernel_files.hpp"
#include "kernex/plugin.hpp"
#include "kernex/sandbox/toolbox.hpp"

namespace {

using kernex::Result;

class ScriptToolbox final : public kernex::ToolExecutor {
 public:
  explicit ScriptToolbox(kernex::sandbox::ToolboxRunOptions options)
      : options_(std::move(options)),
        runner_(std::make_shared<kernex::sandbox::ToolboxRunner>(options_)) {}

  Result<std::vector<kernex::ToolSpec>> list_tools(const kernex::Context& context) override {
    std::vector<kernex::ToolSpec> specs;
    for (const auto& toolbox : context.toolboxes) specs.push_back(toolbox.spec());
    return specs;
  }

  Result<kernex::ToolResult> execute(const kernex::Context& context, const kernex::RunHandles&,
                                     const kernex::ToolCall& call) override {
    for (const auto& toolbox : context.toolboxes) {
      if (toolbox.name == call.name)
        return runner()->run(toolbox, call, kernex::sandbox::CallScope::of(context));
    }
    return kernex::fail(kernex::ErrorCode::Tool,
                        "toolbox-script: no toolbox named '" + call.name + "' in this run");
  }

 private:
  // The runner caches one policy per toolbox; a kernel file registered since (a skill loaded, a
  // project file read) must reach them too, so the cache starts afresh when the registry moved.
  std::shared_ptr<kernex::sandbox::ToolboxRunner> runner() {
    std::lock_guard lock(mutex_);
    const std::uint64_t generation = kernex::kernel_files_generation();
    if (generation != generation_) {
      runner_ = std::make_shared<kernex::sandbox::ToolboxRunner>(options_);
      generation_ = generation;
    }
    return runner_;
  }

  kernex::sandbox::ToolboxRunOptions options_;
  std::mutex mutex_;
  std::shared_ptr<kernex::sandbox::ToolboxRunner> runner_;
  std::uint64_t generation_ = kernex::kernel_files_generation();
};

Result<std::shared_ptr<kernex::ToolExecutor>> make_script_toolbox(const kernex::Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto options,
                          kernex::sandbox::ToolboxRunOptions::from_json(config, "toolbox-script"));
  return std::make_shared<ScriptToolbox>(std::move(options));
}

}  // namespace

KERNEX_PLUGIN(Toolbox, "script", "1.0.0",
              "Runs skills' script toolboxes in the Landlock + seccomp sandbox",
              make_script_toolbox)
