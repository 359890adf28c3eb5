// Skills that REPL code saved with save_skill() (toolbox-repl keeps them in
// <data_dir>/repl-skills/<tenant>/<name>: SKILL.md and <name>.py), as a run's skills: only those
// a person trusted since (`kernex skills trust`) with their current hash. Sandboxed code chose
// every byte of them, so the tenant's area counts as a writable location and an untrusted or
// changed folder is left out (without a warning on every run: importing one from code says how
// to trust it). One tenant's area is all a run looks at: another tenant's skills never load.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/trust.hpp"

namespace kernex::skills {

// <data_dir>/repl-skills/<tenant>; empty when there is no data dir or the tenant could name
// another place (empty, ".", "..", a '/' or a NUL, a leading '.').
std::filesystem::path saved_skills_area(const std::filesystem::path& data_dir,
                                        const std::string& tenant);

// The trusted skill folders of `area`, sorted (at most 1 000; real directories only, never a
// symlink, and the area and its parent real directories too). Adds `area` to rule.writable.
std::vector<std::filesystem::path> trusted_saved_skills(const std::filesystem::path& area,
                                                        TrustRule& rule);

// The tenant's trusted saved skills, loaded under `rule` (the kernel's trust rule: its store).
std::vector<Skill> load_trusted_saved_skills(const std::filesystem::path& data_dir,
                                             const std::string& tenant, TrustRule rule);

// One source for a run of `tenant`: `loaded` (the kernel's skills) and the tenant's trusted saved
// skills after them (a saved skill named like a loaded one is left out: the configured one wins),
// activating `activate`. One source, so the run has one catalog and one activate_skill. Null when
// the tenant has no trusted saved skill (the caller's source stays as it was).
Result<std::shared_ptr<SkillContextSource>> source_with_saved_skills(
    const std::vector<Skill>& loaded, const std::filesystem::path& data_dir,
    const std::string& tenant, TrustRule rule, std::vector<std::string> activate);

}  // namespace kernex::skills
