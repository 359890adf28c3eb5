#include "kernex/skills/context_source.hpp"

#include <algorithm>

namespace kernex::skills {

Result<std::shared_ptr<SkillContextSource>> SkillContextSource::create(
    std::vector<Skill> skills, std::vector<std::string> activate) {
  SkillActivator probe(skills);
  for (const auto& name : activate) {
    KERNEX_RETURN_IF_ERROR(probe.activate(name));
  }
  return std::shared_ptr<SkillContextSource>(
      new SkillContextSource(std::move(skills), std::move(activate)));
}

SkillActivator SkillContextSource::activator_for(const Request& request) const {
  // A fresh activator per run: what one message triggered must not leak into the next.
  SkillActivator activator(skills_);
  for (const auto& name : explicit_) (void)activator.activate(name);  // checked in create()
  activator.activate_triggered(request.text);
  return activator;
}

Result<void> SkillContextSource::contribute(Context& context, const Request& request) {
  activator_for(request).apply(context);
  return {};
}

std::vector<std::shared_ptr<ContextTool>> SkillContextSource::context_tools(
    const Request& request) {
  if (skills_.empty()) return {};
  return {std::make_shared<ActivateSkillTool>(activator_for(request))};
}

ActivateSkillTool::ActivateSkillTool(SkillActivator activator)
    : activator_(std::move(activator)), spec_(activate_skill_tool(activator_.skills())) {}

Result<ToolResult> ActivateSkillTool::execute(Context& context, const ToolCall& call) {
  const Json& args = call.arguments;
  const std::string name = args.is_object() && args.contains("name") && args["name"].is_string()
                               ? args["name"].get<std::string>()
                               : "";
  const bool was_active = activator_.active().contains(name);
  ToolResult result = activator_.handle_tool_call(call);
  if (result.is_error || was_active) return result;
  const Activation& a = activator_.active().find(name)->second;
  for (const auto& t : a.toolboxes) {
    if (std::none_of(context.toolboxes.begin(), context.toolboxes.end(),
                     [&](const Toolbox& x) { return x.name == t.name; })) {
      context.toolboxes.push_back(t);
    }
  }
  for (const auto& m : a.mcp_servers) {
    if (std::none_of(context.mcp_servers.begin(), context.mcp_servers.end(),
                     [&](const McpServer& x) { return x.name == m.name; })) {
      context.mcp_servers.push_back(m);
    }
  }
  return result;
}

}  // namespace kernex::skills
