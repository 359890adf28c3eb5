// SKILL.md with kernex's TOML frontmatter through parse_skill. An input that does not open with a
// fence gets "+++" in front, so the mutations stay in TOML rather than drifting into YAML.
#include <string>

#include "fuzz.hpp"
#include "kernex/skills/loader.hpp"
#include "skill_files.hpp"

KERNEX_FUZZ_TARGET(skill_toml) {
  const std::string_view input = kernex::fuzz::text(data, size);
  std::string text;
  if (!input.starts_with("+++") && !input.starts_with("---")) text = "+++\n";
  text += input;
  auto skill = kernex::skills::parse_skill(text, "/fuzz/skill/SKILL.md", "/fuzz/skill");
  kernex::fuzz::serialise(skill);
  return 0;
}
