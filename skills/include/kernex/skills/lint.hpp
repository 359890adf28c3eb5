// Linting skill folders: `lint_spec` judges exactly the Agent Skills specification, the way
// its reference validator (skills-ref) does; `lint` judges what the kernel will load.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kernex/skills/skill.hpp"

namespace kernex::skills {

struct LintVerdict {
  std::filesystem::path path;  // the folder judged
  std::string name;            // lint(): the skill's name when it loaded, else ""
  bool valid = false;
  std::string message;                  // the first error ("" when valid)
  std::vector<std::string> errors;      // every error, in the reference validator's order
  int line = 0;                         // line of SKILL.md the first error points at, 0 if none
  std::vector<Diagnostic> diagnostics;  // lint(): errors and warnings with file/line/field
};

// Agent Skills conformance. Messages follow skills-ref word for word (e.g. "Skill name
// 'Upper-Case' must be lowercase", "Missing required field in frontmatter: description"), and
// its parser is emulated: the file must start with "---", the frontmatter ends at the next
// "---" anywhere, and the YAML is StrictYAML (no flow collections, tags, anchors or duplicate
// keys; every scalar is a string).
LintVerdict lint_spec(const std::filesystem::path& folder);

// What the kernel loads: the frontmatter (YAML or TOML), the kernex fields, mcp.json and
// toolbox.json, and the load-time permission checks; warnings (unknown fields, unrestricted
// commands, ...) do not make it invalid.
LintVerdict lint(const std::filesystem::path& folder);

// Expands DIRs: a DIR with a SKILL.md is one skill folder; otherwise each of its non-hidden
// subfolders is one (sorted), with or without a SKILL.md, so that the linters report a missing
// one. A DIR that is not a directory, or has no subfolders, is returned as is.
std::vector<std::filesystem::path> skill_folders(const std::vector<std::filesystem::path>& dirs);

// Judges every folder of skill_folders(dirs) (lint_spec when `spec`), in order. Without `spec`,
// a folder whose skill name an earlier folder already has is invalid, by the loader's rule
// (SkillNameClaims): `kernex skills list` would refuse it.
std::vector<LintVerdict> lint_folders(const std::vector<std::filesystem::path>& dirs, bool spec);

Json to_json(const LintVerdict& verdict);

}  // namespace kernex::skills
