// Turning loaded skills into Context content. Two ways are supported:
//  * kernex triggers: keywords matched against the user message (substring, ASCII
//    case-insensitive, no word boundaries — kernex's semantics);
//  * Agent Skills progressive disclosure: only names and descriptions go into the system
//    prompt; a skill's instructions, toolboxes and MCP servers join the Context once it is
//    activated (by trigger, by name, or by the model calling the `activate_skill` tool).
// Activated skills are always applied sorted by name, so the prompt prefix stays identical
// across turns and prompt caches stay warm.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/skills/skill.hpp"
#include "kernex/tool.hpp"

namespace kernex::skills {

// --- kernex trigger matching -------------------------------------------------------------

// True when any trimmed, non-empty trigger keyword, lower-cased, occurs in the lower-cased
// message.
bool trigger_matches(const Skill& skill, std::string_view message);
// Names of the available skills whose triggers match, sorted by name.
std::vector<std::string> triggered_skills(const std::vector<Skill>& skills,
                                          std::string_view message);
// kernex `match_skill_triggers`: MCP servers of available, triggered skills (lazy ones
// included), in skill order, de-duplicated by server name (first wins).
std::vector<McpServer> match_skill_triggers(const std::vector<Skill>& skills,
                                            std::string_view message);
// kernex `match_skill_toolboxes`: as above for toolboxes, lazy skills skipped.
std::vector<Toolbox> match_skill_toolboxes(const std::vector<Skill>& skills,
                                           std::string_view message);
// The named skill's toolboxes, or none.
std::vector<Toolbox> toolboxes_for_skill(const std::vector<Skill>& skills, std::string_view name);
// "" when no available lazy skill, else the deferred-skill listing that points at skill_search.
std::string lazy_skill_directory(const std::vector<Skill>& skills);
// kernex's `skill_search` toolbox definition.
Toolbox skill_search_toolbox();

// --- Agent Skills activation ---------------------------------------------------------------

inline constexpr std::string_view kActivateSkillTool = "activate_skill";

// The system-prompt section listing every skill (name, description, SKILL.md location) sorted
// by name, as <available_skills> XML; "" when there are no skills.
std::string skill_catalogue(const std::vector<Skill>& skills);
// Schema of the built-in tool the model calls to activate a skill: {"name": <skill name>}.
ToolSpec activate_skill_tool(const std::vector<Skill>& skills);

// What one activated skill adds to a Context.
struct Activation {
  std::string name;
  std::string description;
  std::string instructions;
  std::filesystem::path path;
  std::vector<Toolbox> toolboxes;
  std::vector<McpServer> mcp_servers;
  std::optional<std::string> model;
};

Activation activate(const Skill& skill);
// The text the model receives for an activated skill (system prompt block and tool result).
std::string activation_text(const Activation& activation);

// The set of activated skills of one run.
class SkillActivator {
 public:
  explicit SkillActivator(std::vector<Skill> skills);

  const std::vector<Skill>& skills() const { return skills_; }
  // Activates by name. true when newly activated, false when it already was; an unknown name
  // is an ErrorCode::Skill error listing the available names.
  Result<bool> activate(std::string_view name);
  // Activates every available skill whose triggers match; returns the newly activated names.
  std::vector<std::string> activate_triggered(std::string_view message);
  const std::map<std::string, Activation, std::less<>>& active() const { return active_; }

  // Handles a call of the `activate_skill` tool: the result carries the skill's instructions
  // (is_error with the reason for a bad or unknown name).
  ToolResult handle_tool_call(const ToolCall& call);

  // Enriches `context`: the catalogue and then every active skill's instructions (by name) are
  // appended to the system prompt; their toolboxes and MCP servers are appended unless one of
  // the same name is already there; the model is set from the first active skill that has
  // one when the context has none.
  void apply(Context& context) const;

 private:
  std::vector<Skill> skills_;
  std::map<std::string, Activation, std::less<>> active_;
};

}  // namespace kernex::skills
