// Plugs skills into the kernel: on every run, activates the skills named explicitly and those
// whose triggers match the message, then adds the catalogue and their instructions, toolboxes
// and MCP servers to the Context (SkillActivator::apply, stable order).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/kernel.hpp"
#include "kernex/skills/skill.hpp"

namespace kernex::skills {

class SkillContextSource final : public ContextSource {
 public:
  // An explicit name that no loaded skill has is an ErrorCode::Skill error listing the names.
  static Result<std::shared_ptr<SkillContextSource>> create(std::vector<Skill> skills,
                                                            std::vector<std::string> activate);

  Result<void> contribute(Context& context, const Request& request) override;

 private:
  SkillContextSource(std::vector<Skill> skills, std::vector<std::string> activate)
      : skills_(std::move(skills)), explicit_(std::move(activate)) {}

  std::vector<Skill> skills_;
  std::vector<std::string> explicit_;
};

}  // namespace kernex::skills
