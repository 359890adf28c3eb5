// SKILL.md with YAML frontmatter through the loader's text entry point (parse_skill): the
// frontmatter split, yaml-cpp events into the node tree (aliases bounded), every manifest field's
// conversion and the load-time checks; what loads must serialise.
#include "fuzz.hpp"
#include "kernex/skills/loader.hpp"
#include "skill_files.hpp"

KERNEX_FUZZ_TARGET(skill_yaml) {
  auto skill = kernex::skills::parse_skill(kernex::fuzz::text(data, size), "/fuzz/skill/SKILL.md",
                                           "/fuzz/skill");
  kernex::fuzz::serialise(skill);
  return 0;
}
