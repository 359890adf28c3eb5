#include "kernex/skills/context_source.hpp"

#include "kernex/skills/activation.hpp"

namespace kernex::skills {

Result<std::shared_ptr<SkillContextSource>> SkillContextSource::create(std::vector<Skill> skills,
                                                                       std::vector<std::string> activate) {
  SkillActivator probe(skills);
  for (const auto& name : activate) {
    if (auto ok = probe.activate(name); !ok) return std::unexpected(ok.error());
  }
  return std::shared_ptr<SkillContextSource>(new SkillContextSource(std::move(skills), std::move(activate)));
}

Result<void> SkillContextSource::contribute(Context& context, const Request& request) {
  // A fresh activator per run: what one message triggered must not leak into the next.
  SkillActivator activator(skills_);
  for (const auto& name : explicit_) {
    if (auto ok = activator.activate(name); !ok) return std::unexpected(ok.error());
  }
  activator.activate_triggered(request.text);
  activator.apply(context);
  return {};
}

}  // namespace kernex::skills
