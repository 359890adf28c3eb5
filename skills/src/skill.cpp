#include "kernex/skills/skill.hpp"

#include <algorithm>

namespace kernex::skills {

std::string_view to_string(SourceFormat format) noexcept {
  return format == SourceFormat::Toml ? "toml" : "yaml";
}

std::string refusal_reasons(const LoadedSkills& loaded) {
  std::string out;
  for (const auto& f : loaded.failures) {
    out += "; refused: skill '" + f.path.filename().string() + "' (" + f.path.string() +
           "): " + f.describe();
  }
  for (const auto& s : loaded.skills) {
    for (const auto& r : s.refused) out += "; refused in skill '" + s.name + "': " + r.describe();
  }
  return out;
}

namespace {

std::vector<std::string> with_prefix(const std::vector<std::string>& files,
                                     std::string_view prefix) {
  std::vector<std::string> out;
  for (const auto& f : files) {
    if (f.rfind(prefix, 0) == 0) out.push_back(f.substr(prefix.size()));
  }
  return out;
}

}  // namespace

std::vector<std::string> Permissions::read_paths() const { return with_prefix(files, "read:"); }
std::vector<std::string> Permissions::write_paths() const { return with_prefix(files, "write:"); }
std::vector<std::string> Permissions::denied_paths() const { return with_prefix(files, "!"); }

bool Permissions::allows_command(std::string_view command) const {
  if (commands.empty()) return true;
  auto slash = command.rfind('/');
  std::string_view base = slash == std::string_view::npos ? command : command.substr(slash + 1);
  return std::any_of(commands.begin(), commands.end(), [&](const std::string& entry) {
    return entry.find('/') != std::string::npos ? entry == command : entry == base;
  });
}

std::string Diagnostic::describe() const {
  std::string out = file.string();
  if (line > 0) out += ":" + std::to_string(line);
  out += ": ";
  if (severity == Severity::Warning) out += "warning: ";
  if (!field.empty()) out += field + ": ";
  out += message;
  return out;
}

std::string SkillFailure::describe() const {
  std::string out;
  for (const auto& d : problems) {
    if (!out.empty()) out += '\n';
    out += d.describe();
  }
  if (out.empty()) out = path.string() + ": skill failed to load";
  return out;
}

Error SkillFailure::error() const { return Error(ErrorCode::Skill, describe()); }

const Skill* LoadedSkills::find(std::string_view name) const {
  auto it = std::lower_bound(skills.begin(), skills.end(), name,
                             [](const Skill& s, std::string_view n) { return s.name < n; });
  return it != skills.end() && it->name == name ? &*it : nullptr;
}

namespace {

Json toolbox_json(const Toolbox& t) {
  return Json{{"name", t.name},
              {"description", t.description},
              {"parameters", t.parameters},
              {"command", t.command},
              {"args", t.args},
              {"env", t.env},
              {"network", t.network},
              {"env_passthrough", t.env_passthrough},
              {"allowed_commands", t.allowed_commands},
              {"search_hints", t.search_hints}};
}

Json mcp_json(const McpServer& s) {
  return Json{{"name", s.name}, {"command", s.command}, {"args", s.args}, {"env", s.env}};
}

template <class T>
Json optional_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

}  // namespace

Json to_json(const Diagnostic& d) {
  Json j{{"severity", d.severity == Severity::Error ? "error" : "warning"},
         {"file", d.file.string()},
         {"field", d.field},
         {"message", d.message}};
  j["line"] = d.line > 0 ? Json(d.line) : Json(nullptr);
  return j;
}

Json to_json(const SkillFailure& f) {
  Json problems = Json::array();
  for (const auto& d : f.problems) problems.push_back(to_json(d));
  Json j{{"path", f.path.string()}, {"error", f.describe()}, {"problems", problems}};
  if (f.trust) j["trust"] = to_string(*f.trust);
  return j;
}

Json to_json(const Skill& s) {
  Json toolboxes = Json::array();
  for (const auto& t : s.toolboxes) toolboxes.push_back(toolbox_json(t));
  Json servers = Json::array();
  for (const auto& m : s.mcp_servers) servers.push_back(mcp_json(m));
  Json warnings = Json::array();
  for (const auto& w : s.warnings) warnings.push_back(to_json(w));
  Json refused = Json::array();
  for (const auto& r : s.refused) refused.push_back(to_json(r));
  return Json{{"name", s.name},
              {"description", s.description},
              {"path", s.path.string()},
              {"file", s.file.string()},
              {"format", to_string(s.format)},
              {"triggers", s.triggers},
              {"requires", s.requirements},
              {"available", s.available},
              {"trust", to_string(s.trust)},
              {"toolboxes", toolboxes},
              {"mcp_servers", servers},
              {"permissions",
               {{"files", s.permissions.files},
                {"network", s.permissions.network},
                {"env", s.permissions.env},
                {"commands", s.permissions.commands}}},
              {"model", optional_json(s.model)},
              {"version", optional_json(s.version)},
              {"homepage", optional_json(s.homepage)},
              {"lazy", s.lazy},
              {"license", optional_json(s.license)},
              {"compatibility", optional_json(s.compatibility)},
              {"metadata", s.metadata},
              {"allowed_tools", s.allowed_tools},
              {"instructions", s.instructions},
              {"warnings", warnings},
              {"refused", refused}};
}

}  // namespace kernex::skills
