// Plugs skills into the kernel: on every run, activates the skills named explicitly and those
// whose triggers match the message, then adds the catalogue and their instructions, toolboxes
// and MCP servers to the Context (SkillActivator::apply, stable order). It also offers the
// model the `activate_skill` tool for that run (ActivateSkillTool).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/kernel.hpp"
#include "kernex/skills/activation.hpp"
#include "kernex/skills/skill.hpp"
#include "kernex/toolbox.hpp"

namespace kernex::skills {

class SkillContextSource final : public ContextSource {
 public:
  // An explicit name that no loaded skill has is an ErrorCode::Skill error listing the names.
  static Result<std::shared_ptr<SkillContextSource>> create(std::vector<Skill> skills,
                                                            std::vector<std::string> activate);

  Result<void> contribute(Context& context, const Request& request) override;
  // `activate_skill`, knowing which skills this request already activated; none without skills.
  std::vector<std::shared_ptr<ContextTool>> context_tools(const Request& request) override;

 private:
  SkillContextSource(std::vector<Skill> skills, std::vector<std::string> activate)
      : skills_(std::move(skills)), explicit_(std::move(activate)) {}
  SkillActivator activator_for(const Request& request) const;

  std::vector<Skill> skills_;
  std::vector<std::string> explicit_;
};

// The `activate_skill` tool of one run. A call returns the skill's instructions as its result
// (the system prompt is left alone, so its prompt-cache prefix holds) and appends the skill's
// toolboxes and MCP servers to the running Context, after those already there: what the model
// activates joins in the order it activated it, and earlier tools keep their places.
class ActivateSkillTool final : public ContextTool {
 public:
  explicit ActivateSkillTool(SkillActivator activator);
  ToolSpec spec() const override { return spec_; }
  Result<ToolResult> execute(Context& context, const ToolCall& call) override;
  const SkillActivator& activator() const { return activator_; }

 private:
  SkillActivator activator_;
  ToolSpec spec_;
};

}  // namespace kernex::skills
