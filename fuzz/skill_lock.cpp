// kernex.lock, read and compared with the folder it locks (verify_lock): a scratch folder holding
// SKILL.md and one asset, the input as its lock file.
#include "fuzz.hpp"
#include "kernex/skills/lock.hpp"
#include "skill_files.hpp"

KERNEX_FUZZ_TARGET(skill_lock) {
  static const kernex::fuzz::ScratchSkill scratch("lock");
  static const bool written = [] {
    scratch.write("SKILL.md", "---\nname: fuzz-skill\ndescription: Fuzzes kernex.lock.\n---\n");
    scratch.write("asset.txt", "asset\n");
    return true;
  }();
  (void)written;
  scratch.write("kernex.lock", kernex::fuzz::text(data, size));
  auto check = kernex::skills::verify_lock(scratch.folder());
  if (check && *check)
    (void)kernex::skills::to_json(**check).dump(-1, ' ', false,
                                                kernex::Json::error_handler_t::replace);
  else if (!check)
    (void)check.error().describe();
  return 0;
}
