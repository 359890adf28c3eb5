// A toolbox offering one tool, "reverse", that returns its "text" argument reversed.
#include <algorithm>

#include "kernex/plugin.hpp"

namespace {

class ReverseToolbox final : public kernex::ToolExecutor {
 public:
  kernex::Result<std::vector<kernex::ToolSpec>> list_tools(const kernex::Context&) override {
    kernex::ToolSpec spec;
    spec.name = "reverse";
    spec.description = "Reverses a string";
    spec.parameters = {{"type", "object"},
                       {"properties", {{"text", {{"type", "string"}}}}},
                       {"required", {"text"}}};
    return std::vector<kernex::ToolSpec>{spec};
  }
  kernex::Result<kernex::ToolResult> execute(const kernex::Context&, const kernex::RunHandles&,
                                             const kernex::ToolCall& call) override {
    kernex::ToolResult result{call.id, call.name, {}, false};
    if (call.name != "reverse")
      return kernex::fail(kernex::ErrorCode::Tool, "unknown tool " + call.name);
    auto text = call.arguments.find("text");
    if (text == call.arguments.end() || !text->is_string()) {
      result.content = "argument 'text' must be a string";
      result.is_error = true;
      return result;
    }
    result.content = text->get<std::string>();
    std::reverse(result.content.begin(), result.content.end());
    return result;
  }
};

kernex::Result<std::shared_ptr<kernex::ToolExecutor>> make_reverse(const kernex::Json&) {
  return std::make_shared<ReverseToolbox>();
}

}  // namespace

KERNEX_PLUGIN(Toolbox, "reverse", "1.0.0", "One tool that reverses text", make_reverse)
