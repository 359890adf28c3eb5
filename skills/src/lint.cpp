// kernex lint: everything the loader checks, plus advice that does not stop a skill loading.
#include <algorithm>

#include "kernex/skills/lint.hpp"
#include "kernex/skills/loader.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

bool has_skill_file(const fs::path& folder) {
  std::error_code ec;
  return fs::exists(folder / "SKILL.md", ec) || fs::exists(folder / "skill.md", ec);
}

void advise(const Skill& skill, std::vector<Diagnostic>& out) {
  auto warn = [&](std::string field, std::string message) {
    out.push_back({Severity::Warning, skill.file, 0, std::move(field), std::move(message)});
  };
  if (skill.permissions.commands.empty() &&
      (!skill.toolboxes.empty() || !skill.mcp_servers.empty())) {
    warn("permissions.commands",
         "not declared, so its toolboxes and MCP servers may run any program; list the programs "
         "they run");
  }
  if (!skill.metadata.is_null() && !skill.metadata.is_object()) {
    warn("metadata",
         "expected a mapping of string keys to string values (Agent Skills specification)");
  }
  for (const auto& r : skill.requirements) {
    if (!program_on_path(r))
      warn("requires", "'" + r + "' is not on PATH; the skill is listed as not installed");
  }
  if (skill.instructions.empty())
    warn("", "the Markdown body is empty; the skill gives the model no instructions");
}

// Sets errors, valid, message and line from the diagnostics.
void judge(LintVerdict& v) {
  v.errors.clear();
  for (const auto& d : v.diagnostics) {
    if (d.severity != Severity::Error) continue;
    v.errors.push_back(d.describe());
  }
  v.valid = v.errors.empty();
  if (!v.valid) {
    auto first = std::find_if(v.diagnostics.begin(), v.diagnostics.end(),
                              [](const Diagnostic& d) { return d.severity == Severity::Error; });
    v.message = first->describe();
    v.line = first->line;
  }
}

}  // namespace

LintVerdict lint(const fs::path& folder) {
  LintVerdict v;
  v.path = folder;
  auto loaded = load_skill(folder);
  if (!loaded) {
    v.diagnostics = loaded.error().problems;
  } else {
    v.name = loaded->name;
    // A refused toolbox or MCP server does not stop the skill loading, but it is a mistake the
    // author must fix, so lint judges the skill invalid.
    v.diagnostics = loaded->refused;
    v.diagnostics.insert(v.diagnostics.end(), loaded->warnings.begin(), loaded->warnings.end());
    advise(*loaded, v.diagnostics);
  }
  judge(v);
  return v;
}

std::vector<LintVerdict> lint_folders(const std::vector<fs::path>& dirs, bool spec) {
  std::vector<LintVerdict> out;
  SkillNameClaims names;
  for (const auto& folder : skill_folders(dirs)) {
    if (spec) {
      out.push_back(lint_spec(folder));
      continue;
    }
    LintVerdict v = lint(folder);
    if (!v.name.empty()) {
      if (std::string taken = names.claim(v.name, folder); !taken.empty()) {
        v.diagnostics.insert(v.diagnostics.begin(),
                             Diagnostic{Severity::Error, folder, 0, "name", std::move(taken)});
        judge(v);
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<fs::path> skill_folders(const std::vector<fs::path>& dirs) {
  std::vector<fs::path> out;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec) || has_skill_file(dir)) {
      out.push_back(dir);
      continue;
    }
    // Every subfolder is judged, not only those with a SKILL.md: a folder of skills whose member
    // lost its SKILL.md is exactly what a linter must report (hidden folders such as .git are
    // not skills).
    std::vector<fs::path> found;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code ec2;
      if (it->is_directory(ec2) && it->path().filename().string().rfind('.', 0) != 0)
        found.push_back(it->path());
    }
    if (found.empty()) {
      out.push_back(dir);  // neither a skill nor a folder of skills: let the linter say so
      continue;
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

Json to_json(const LintVerdict& v) {
  Json diagnostics = Json::array();
  for (const auto& d : v.diagnostics) diagnostics.push_back(to_json(d));
  Json j{{"path", v.path.string()},
         {"valid", v.valid},
         {"message", v.message},
         {"errors", v.errors},
         {"diagnostics", diagnostics}};
  j["line"] = v.line > 0 ? Json(v.line) : Json(nullptr);
  return j;
}

}  // namespace kernex::skills
