// Reading skill folders. A broken skill never stops the others: it becomes a SkillFailure
// naming the file, line, field and what was expected.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/skills/skill.hpp"
#include "kernex/skills/trust.hpp"

namespace kernex::skills {

// SKILL.md larger than this is refused (kernex's cap).
inline constexpr std::size_t kMaxSkillFileBytes = 256 * 1024;

// Parses SKILL.md text. `folder` is the skill folder (recorded in Skill::path; mcp.json and
// toolbox.json are not read here). Errors are returned as a failure with every problem found.
std::expected<Skill, SkillFailure> parse_skill(std::string_view text,
                                               const std::filesystem::path& file,
                                               const std::filesystem::path& folder);

struct LoadOptions {
  // When set, a skill folder in a writable location loads only when trusted with its current hash
  // (trust.hpp); every kernel entry point sets it. Unset: no trust check (library use, tests).
  std::optional<TrustRule> trust;
};

// One skill folder: SKILL.md (or skill.md), then optional mcp.json / toolbox.json whose entries
// replace same-named frontmatter entries; then the load-time permission checks. The folder is
// registered as a kernel file (ReadOnly) before anything in it is read, so no sandbox of this
// process can change it.
std::expected<Skill, SkillFailure> load_skill(const std::filesystem::path& folder,
                                              const LoadOptions& options = {});

// Each dir is either one skill folder (it has a SKILL.md) or a folder of skill folders
// (subfolders without SKILL.md are ignored). A missing dir is a failure. When two folders
// declare the same name the first one (dirs in order, subfolders by name) wins and the other
// is a failure. Each dir is registered as a kernel file (ReadOnly) too, so nothing can be planted
// beside the skills while this process runs.
// The one rule for skill names within one set of skill dirs: the first folder to claim a name
// keeps it, a later folder with the same name is an error. load_skills (which refuses the later
// folder) and lint_folders (which judges it invalid) both use it, so they never disagree.
class SkillNameClaims {
 public:
  // "" when `name` was free (it is `folder`'s now), else the error naming the folder that has it.
  std::string claim(const std::string& name, const std::filesystem::path& folder);

 private:
  std::map<std::string, std::filesystem::path> owners_;
};

LoadedSkills load_skills(const std::vector<std::filesystem::path>& dirs,
                         const LoadOptions& options = {});

// Whether `program` names a regular file in some $PATH directory (kernex `requires`).
bool program_on_path(std::string_view program);

}  // namespace kernex::skills
