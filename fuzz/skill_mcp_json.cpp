// A skill's mcp.json, read by load_skill beside a fixed SKILL.md that grants the commands and
// network an MCP server asks for, so the entries get past the permission checks and are merged.
#include "fuzz.hpp"
#include "kernex/skills/loader.hpp"
#include "skill_files.hpp"

KERNEX_FUZZ_TARGET(skill_mcp_json) {
  static const kernex::fuzz::ScratchSkill scratch("mcp-json");
  static const bool written = [] {
    scratch.write("SKILL.md",
                  "---\nname: fuzz-skill\ndescription: Fuzzes mcp.json.\nmcp:\n  base:\n"
                  "    command: npx\n    args: [\"-y\", \"server\"]\n---\nBody.\n");
    return true;
  }();
  (void)written;
  scratch.write("mcp.json", kernex::fuzz::text(data, size));
  auto skill = kernex::skills::load_skill(scratch.folder());
  kernex::fuzz::serialise(skill);
  return 0;
}
