// The skill model: one folder with a SKILL.md whose frontmatter is the manifest. Agent Skills
// (YAML) and kernex (TOML) manifests are read into the same Skill.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/tool.hpp"

namespace kernex::skills {

enum class SourceFormat { Yaml, Toml };
std::string_view to_string(SourceFormat format) noexcept;

// What a skill declares it needs (kernex `[permissions]`). Enforced: `commands` (toolbox and MCP
// commands must match when non-empty), `env` (the only names a toolbox may receive from the
// parent environment), `network` (non-empty lets its toolboxes reach the network). `files` is
// declarative: "read:P", "write:P", "!P" (denied).
struct Permissions {
  std::vector<std::string> files;
  std::vector<std::string> network;
  std::vector<std::string> env;
  std::vector<std::string> commands;

  bool empty() const { return files.empty() && network.empty() && env.empty() && commands.empty(); }
  std::vector<std::string> read_paths() const;    // "read:P" entries without the prefix
  std::vector<std::string> write_paths() const;   // "write:P"
  std::vector<std::string> denied_paths() const;  // "!P"
  // kernex allow-list semantics: empty allows everything; an entry with '/' must equal the
  // command, otherwise it must equal the command's basename.
  bool allows_command(std::string_view command) const;
};

enum class Severity { Error, Warning };

// One problem found in a skill: where (file, 1-based line or 0 when unknown), which field
// (dotted path such as "toolbox.lint.command"; empty for the file as a whole) and what was
// expected.
struct Diagnostic {
  Severity severity = Severity::Error;
  std::filesystem::path file;
  int line = 0;
  std::string field;
  std::string message;

  // "<file>:<line>: <field>: <message>" (line and field left out when unknown).
  std::string describe() const;
};

struct Skill {
  std::string name;
  std::string description;
  std::string instructions;    // the Markdown body after the frontmatter
  std::filesystem::path path;  // the skill folder
  std::filesystem::path file;  // its SKILL.md
  SourceFormat format = SourceFormat::Yaml;

  // kernex fields
  std::vector<std::string> triggers;      // keywords; `trigger = "a|b"` split on '|'
  std::vector<std::string> requirements;  // programs that must be on PATH (`requires`)
  std::vector<Toolbox> toolboxes;         // sorted by name
  std::vector<McpServer> mcp_servers;     // sorted by name
  Permissions permissions;
  std::optional<std::string> model;
  std::optional<std::string> version;
  std::optional<std::string> homepage;
  bool lazy = false;
  bool available = true;  // every requirement was found on PATH at load

  // Agent Skills fields
  std::optional<std::string> license;
  std::optional<std::string> compatibility;
  Json metadata;                           // null when absent
  std::vector<std::string> allowed_tools;  // `allowed-tools`, space-separated or a list

  std::vector<Diagnostic> warnings;  // non-fatal findings (e.g. unknown fields)
  // Toolboxes and MCP servers the load-time permission checks refused, with the reason (field
  // "toolbox.<name>.<what>" / "mcp.<name>.<what>"). They are not in `toolboxes`/`mcp_servers`
  // and never run; the rest of the skill loads (kernex's per-entry rule).
  std::vector<Diagnostic> refused;
  // Whether it had to be trusted to load (it lies in a writable location) and was.
  TrustState trust = TrustState::NotRequired;
};

// A folder that did not load, with every error found in it (the first is the main one).
struct SkillFailure {
  std::filesystem::path path;
  std::vector<Diagnostic> problems;
  // Set when it was refused for trust: Untrusted or Changed.
  std::optional<TrustState> trust = {};

  std::string describe() const;  // all problems, one per line
  Error error() const;           // ErrorCode::Skill, message = describe()
};

struct LoadedSkills {
  std::vector<Skill> skills;           // sorted by name, names unique
  std::vector<SkillFailure> failures;  // sorted by path

  const Skill* find(std::string_view name) const;
};

// Why skills (or toolboxes and MCP servers in them) were refused, for an error that would
// otherwise only say a name was not found: "; refused: skill 'grab' (/path/grab): <reason>; ...".
// Empty when nothing was refused.
std::string refusal_reasons(const LoadedSkills& loaded);

// The parsed model as JSON (for `kernex skills show` and `list --json`).
Json to_json(const Skill& skill);
Json to_json(const Diagnostic& diagnostic);
Json to_json(const SkillFailure& failure);

}  // namespace kernex::skills
