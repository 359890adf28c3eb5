// The Agent Skills spec lint (lint_spec), which judges a folder: the input is its SKILL.md, in a
// scratch folder named fuzz-skill (so a seed whose name is fuzz-skill can be valid).
#include "fuzz.hpp"
#include "kernex/skills/lint.hpp"
#include "skill_files.hpp"

KERNEX_FUZZ_TARGET(skill_spec_lint) {
  static const kernex::fuzz::ScratchSkill scratch("spec-lint");
  scratch.write("SKILL.md", kernex::fuzz::text(data, size));
  (void)kernex::skills::to_json(kernex::skills::lint_spec(scratch.folder()))
      .dump(-1, ' ', false, kernex::Json::error_handler_t::replace);
  return 0;
}
