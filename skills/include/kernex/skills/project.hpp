// Projects (kernex): a folder whose AGENTS.md (preferred) or ROLE.md gives standing
// instructions and may name skills in its frontmatter (TOML `skills = [...]` or YAML
// `skills: [...]`). A project adds its instructions to the system prompt and activates the
// skills it names.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/kernel.hpp"

namespace kernex::skills {

struct Project {
  std::string name;                 // the folder's name
  std::string instructions;         // the file's body, frontmatter removed, trimmed
  std::filesystem::path path;       // the project folder
  std::filesystem::path file;       // AGENTS.md or ROLE.md
  std::vector<std::string> skills;  // skills it names, in its order
};

// Frontmatter and body of a project file's text (BOM and CRLF accepted). Without frontmatter
// the whole trimmed text is the body and no skills are named. A frontmatter that is neither
// TOML nor YAML with `skills` a list of strings is an error naming `file` and the line.
Result<Project> parse_project(std::string_view text, const std::filesystem::path& file);

// One project folder: AGENTS.md if present, else ROLE.md. Missing both, unreadable, or empty
// (no instructions and no skills) is an ErrorCode::Skill error naming the folder or file.
Result<Project> load_project(const std::filesystem::path& folder);

// kernex `load_projects`: every subfolder of `projects_dir` that loads, sorted by name; a
// missing dir gives none, and a folder that fails is skipped (logged). Symlinked folders that
// resolve outside `projects_dir` are skipped.
std::vector<Project> load_projects(const std::filesystem::path& projects_dir);
// kernex `get_project_instructions`: nullptr when no project has that name.
const Project* find_project(const std::vector<Project>& projects, std::string_view name);

Json to_json(const Project& project);

// Adds a project's instructions to every run's system prompt (after what is there). Its
// skills are activated by giving them to SkillContextSource as explicit names.
class ProjectContextSource final : public ContextSource {
 public:
  explicit ProjectContextSource(Project project) : project_(std::move(project)) {}
  Result<void> contribute(Context& context, const Request& request) override;
  const Project& project() const { return project_; }

 private:
  Project project_;
};

}  // namespace kernex::skills
