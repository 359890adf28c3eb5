// Splitting SKILL.md into its frontmatter block and Markdown body (the loader's lenient
// rules; the Agent Skills linter has its own, see spec_lint.cpp).
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "kernex/skills/skill.hpp"

namespace kernex::skills::detail {

struct Frontmatter {
  SourceFormat format = SourceFormat::Yaml;
  std::string block;
  int first_line = 1;  // line of the file where `block` starts
  std::string body;    // leading blank lines and trailing whitespace removed
};

struct SplitFailure {
  int line = 0;
  std::string message;
};

// `text` has LF newlines and no BOM. Leading blank lines are skipped; the first line must be
// "---" (YAML, or TOML when its first key line looks like `key = value` or `[table]`) or "+++"
// (TOML); the block ends at the next line equal to the same fence.
std::expected<Frontmatter, SplitFailure> split_frontmatter(std::string_view text);

}  // namespace kernex::skills::detail
