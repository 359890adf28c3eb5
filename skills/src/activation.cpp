#include "kernex/skills/activation.hpp"

#include <algorithm>
#include <set>

#include "kernex/markup_escape.hpp"
#include "text.hpp"

namespace kernex::skills {

bool trigger_matches(const Skill& skill, std::string_view message) {
  std::string lower = detail::ascii_lower(message);
  return std::any_of(skill.triggers.begin(), skill.triggers.end(), [&](const std::string& keyword) {
    std::string_view k = detail::trim(keyword);
    return !k.empty() && lower.find(detail::ascii_lower(k)) != std::string::npos;
  });
}

std::vector<std::string> triggered_skills(const std::vector<Skill>& skills,
                                          std::string_view message) {
  std::vector<std::string> out;
  for (const auto& s : skills) {
    if (s.available && trigger_matches(s, message)) out.push_back(s.name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<McpServer> match_skill_triggers(const std::vector<Skill>& skills,
                                            std::string_view message) {
  std::vector<McpServer> out;
  std::set<std::string, std::less<>> names;
  for (const auto& s : skills) {
    if (!s.available || s.mcp_servers.empty() || s.triggers.empty() || !trigger_matches(s, message))
      continue;
    for (const auto& server : s.mcp_servers) {
      if (names.insert(server.name).second) out.push_back(server);
    }
  }
  return out;
}

std::vector<Toolbox> match_skill_toolboxes(const std::vector<Skill>& skills,
                                           std::string_view message) {
  std::vector<Toolbox> out;
  std::set<std::string, std::less<>> names;
  for (const auto& s : skills) {
    if (!s.available || s.lazy || s.toolboxes.empty() || s.triggers.empty() ||
        !trigger_matches(s, message))
      continue;
    for (const auto& t : s.toolboxes) {
      if (names.insert(t.name).second) out.push_back(t);
    }
  }
  return out;
}

std::vector<Toolbox> toolboxes_for_skill(const std::vector<Skill>& skills, std::string_view name) {
  for (const auto& s : skills) {
    if (s.name == name) return s.toolboxes;
  }
  return {};
}

std::string lazy_skill_directory(const std::vector<Skill>& skills) {
  std::string out;
  for (const auto& s : skills) {
    if (!s.available || !s.lazy) continue;
    if (out.empty()) out = "Deferred skills (call skill_search to load their full tool schemas):\n";
    out += "- " + s.name + ": " + s.description + "\n";
  }
  return out;
}

Toolbox skill_search_toolbox() {
  Toolbox t;
  t.name = "skill_search";
  t.description =
      "Look up the full tool schemas for a deferred skill. Returns the toolbox definitions that "
      "were omitted from the "
      "initial context to reduce token usage.";
  t.parameters =
      Json{{"type", "object"},
           {"properties",
            {{"skill_name",
              {{"type", "string"},
               {"description", "The name of the skill to look up (e.g. \"playwright\")."}}}}},
           {"required", {"skill_name"}}};
  t.command = "skill_search";
  t.search_hints = {"tool", "skill", "search"};
  return t;
}

namespace {

std::vector<const Skill*> by_name(const std::vector<Skill>& skills) {
  std::vector<const Skill*> out;
  for (const auto& s : skills) out.push_back(&s);
  std::stable_sort(out.begin(), out.end(),
                   [](const Skill* a, const Skill* b) { return a->name < b->name; });
  return out;
}

}  // namespace

std::string skill_catalogue(const std::vector<Skill>& skills) {
  if (skills.empty()) return "";
  std::string out =
      "You have the following skills available. When a task matches a skill's description, call "
      "the "
      "activate_skill tool with its name to load its full instructions and tools before doing the "
      "task.\n\n"
      "<available_skills>\n";
  for (const Skill* s : by_name(skills)) {
    out += "<skill>\n<name>\n" + escape_markup(s->name) + "\n</name>\n<description>\n" +
           escape_markup(s->description) + "\n</description>\n<location>\n" +
           escape_markup(s->file.string()) + "\n</location>\n";
    if (!s->available) {
      out += "<status>\nrequires programs that are not installed: " +
             escape_markup(detail::join(s->requirements)) + "\n</status>\n";
    }
    out += "</skill>\n";
  }
  out += "</available_skills>";
  return out;
}

ToolSpec activate_skill_tool(const std::vector<Skill>& skills) {
  Json names = Json::array();
  for (const Skill* s : by_name(skills)) names.push_back(s->name);
  Json name_schema = {{"type", "string"}, {"description", "The name of the skill to activate."}};
  if (!names.empty()) name_schema["enum"] = names;
  ToolSpec spec;
  spec.name = std::string(kActivateSkillTool);
  spec.description =
      "Activate one of the available skills: returns its full instructions and makes its tools "
      "available for the "
      "rest of this task (they are offered from your next step on).";
  spec.parameters =
      Json{{"type", "object"}, {"properties", {{"name", name_schema}}}, {"required", {"name"}}};
  spec.search_hints = {"skill", "activate", "instructions"};
  return spec;
}

Activation activate(const Skill& skill) {
  return Activation{skill.name,      skill.description, skill.instructions, skill.path,
                    skill.toolboxes, skill.mcp_servers, skill.model};
}

std::string activation_text(const Activation& a) {
  std::string out = "<skill_content name=\"" + escape_markup(a.name) + "\">\n";
  out += a.instructions;
  if (!a.instructions.empty() && a.instructions.back() != '\n') out += '\n';
  out += "\nSkill directory: " + a.path.string() +
         "\nRelative paths in this skill are relative to that directory.";
  if (!a.toolboxes.empty() || !a.mcp_servers.empty()) {
    std::vector<std::string> tools;
    for (const auto& t : a.toolboxes) tools.push_back(t.name);
    for (const auto& m : a.mcp_servers) tools.push_back("MCP server " + m.name);
    out += "\nTools added by this skill: " + detail::join(tools) + ".";
  }
  out += "\n</skill_content>";
  return out;
}

SkillActivator::SkillActivator(std::vector<Skill> skills) : skills_(std::move(skills)) {}

Result<bool> SkillActivator::activate(std::string_view name) {
  if (active_.contains(name)) return false;
  for (const auto& s : skills_) {
    if (s.name == name) {
      active_.emplace(s.name, skills::activate(s));
      return true;
    }
  }
  std::vector<std::string> names;
  for (const Skill* s : by_name(skills_)) names.push_back(s->name);
  return fail(ErrorCode::Skill,
              "unknown skill '" + std::string(name) + "'; expected one of: " +
                  (names.empty() ? std::string("(no skills loaded)") : detail::join(names)));
}

std::vector<std::string> SkillActivator::activate_triggered(std::string_view message) {
  std::vector<std::string> added;
  for (const auto& name : triggered_skills(skills_, message)) {
    auto r = activate(name);
    if (r && *r) added.push_back(name);
  }
  return added;
}

ToolResult SkillActivator::handle_tool_call(const ToolCall& call) {
  ToolResult result;
  result.call_id = call.id;
  result.name = call.name;
  const Json& args = call.arguments;
  if (!args.is_object() || !args.contains("name") || !args["name"].is_string()) {
    result.content = "Error: activate_skill expects {\"name\": \"<skill name>\"}";
    result.is_error = true;
    return result;
  }
  std::string name = args["name"].get<std::string>();
  auto activated = activate(name);
  if (!activated) {
    result.content = "Error: " + activated.error().message;
    result.is_error = true;
    return result;
  }
  const Activation& a = active_.find(name)->second;
  result.content = activation_text(a);
  if (!*activated) result.content = "Skill '" + name + "' is already active.\n" + result.content;
  return result;
}

void SkillActivator::apply(Context& context) const {
  std::string catalogue = skill_catalogue(skills_);
  auto append = [&](const std::string& part) {
    if (part.empty()) return;
    if (!context.system_prompt.empty()) context.system_prompt += "\n\n";
    context.system_prompt += part;
  };
  append(catalogue);
  for (const auto& [name, a] : active_) {
    append(activation_text(a));
    for (const auto& t : a.toolboxes) {
      bool present = std::any_of(context.toolboxes.begin(), context.toolboxes.end(),
                                 [&](const Toolbox& x) { return x.name == t.name; });
      if (!present) context.toolboxes.push_back(t);
    }
    for (const auto& m : a.mcp_servers) {
      bool present = std::any_of(context.mcp_servers.begin(), context.mcp_servers.end(),
                                 [&](const McpServer& x) { return x.name == m.name; });
      if (!present) context.mcp_servers.push_back(m);
    }
    if (!context.model && a.model) context.model = a.model;
  }
}

}  // namespace kernex::skills
