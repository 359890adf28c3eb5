#include "kernex/skills/project.hpp"

#include <algorithm>
#include <system_error>

#include "kernex/kernel_files.hpp"
#include "kernex/log.hpp"
#include "node.hpp"
#include "text.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

// Instructions files have no size limit in kernex; this only bounds memory.
constexpr std::size_t kMaxProjectFileBytes = 1024 * 1024;

Error project_error(const fs::path& file, int line, const std::string& message) {
  std::string where = file.string();
  if (line > 0) where += ":" + std::to_string(line);
  return Error(ErrorCode::Skill, where + ": " + message);
}

// `skills` from the parsed frontmatter; an absent key names no skills.
Result<std::vector<std::string>> skills_field(const detail::Node& root, const fs::path& file,
                                              int line) {
  std::vector<std::string> out;
  if (!root.is_map())
    return std::unexpected(project_error(file, line, "expected the frontmatter to be a mapping"));
  const detail::Node* list = root.find("skills");
  if (list == nullptr || list->kind == detail::Node::Kind::Null) return out;
  if (list->kind != detail::Node::Kind::List) {
    return std::unexpected(project_error(file, list->line > 0 ? list->line : line,
                                         "skills: expected a list of skill names, got " +
                                             std::string(detail::describe_kind(*list))));
  }
  for (const auto& item : list->items) {
    if (item.kind != detail::Node::Kind::Scalar) {
      return std::unexpected(project_error(file, item.line > 0 ? item.line : line,
                                           "skills: expected skill names (strings), got " +
                                               std::string(detail::describe_kind(item))));
    }
    std::string name(detail::trim(item.text));
    if (!name.empty()) out.push_back(std::move(name));
  }
  return out;
}

}  // namespace

Result<Project> parse_project(std::string_view raw, const fs::path& file) {
  Project p;
  p.file = file;
  p.path = file.parent_path();
  p.name = p.path.filename().string();
  if (auto bad = detail::invalid_utf8_at(raw)) {
    return std::unexpected(project_error(file, detail::line_of(raw, *bad), "expected UTF-8 text"));
  }
  const std::string text = detail::normalize_newlines(raw, true);
  const std::string_view content = detail::trim(text);
  // kernex: the trimmed content starts with "---" and a later "\n---" closes the frontmatter.
  const std::size_t close =
      content.rfind("---", 0) == 0 ? content.find("\n---", 3) : std::string_view::npos;
  if (close == std::string_view::npos) {
    p.instructions = std::string(content);
    return p;
  }
  // Lines are counted from the file's first line: leading blank lines were trimmed away.
  const int first_line =
      detail::line_of(text, static_cast<std::size_t>(content.data() - text.data())) + 1;
  std::string_view block = content.substr(3, close - 3);
  if (!block.empty() && block.front() == '\n') block.remove_prefix(1);
  std::string_view body = content.substr(close + 4);
  body = body.substr(std::min(body.find('\n'), body.size()));  // the rest of the closing line
  p.instructions = std::string(detail::trim(body));

  detail::ParseFailure toml_failure, yaml_failure;
  std::optional<detail::Node> root = detail::parse_toml(block, first_line, toml_failure);
  if (!root) root = detail::parse_yaml(block, false, first_line, yaml_failure);
  if (!root) {
    const int line = yaml_failure.line > 0 ? first_line + yaml_failure.line - 1 : first_line;
    return std::unexpected(project_error(
        file, line,
        "invalid frontmatter: expected TOML (skills = [\"a\"]) or YAML (skills: [a]); YAML says: " +
            yaml_failure.message));
  }
  if (root->kind == detail::Node::Kind::Null) return p;  // "---\n---": nothing declared
  auto skills = skills_field(*root, file, first_line);
  if (!skills) return std::unexpected(skills.error());
  p.skills = std::move(*skills);
  return p;
}

Result<Project> load_project(const fs::path& folder) {
  // Every project file there is, read or not: a tool that plants AGENTS.md beside a ROLE.md changes
  // the instructions of the next run as surely as one that edits it. (A missing one can't be kept
  // read-only by a mount; see kernel_files.hpp.)
  std::error_code ec;
  for (const char* name : {"AGENTS.md", "ROLE.md"}) {
    if (fs::exists(fs::symlink_status(folder / name, ec))) {
      register_kernel_file(folder / name, KernelFileAccess::ReadOnly, "project file");
    }
  }
  if (!fs::is_directory(folder, ec)) {
    return fail(ErrorCode::Skill,
                folder.string() + ": expected a project folder containing AGENTS.md or ROLE.md");
  }
  fs::path file;
  for (const char* name : {"AGENTS.md", "ROLE.md"}) {
    if (fs::is_regular_file(folder / name, ec)) {
      file = folder / name;
      break;
    }
  }
  if (file.empty())
    return fail(ErrorCode::Skill,
                folder.string() + ": missing AGENTS.md (or ROLE.md) in the project folder");
  auto content = detail::read_file_capped(file.string(), kMaxProjectFileBytes);
  if (!content.error.empty())
    return std::unexpected(project_error(file, 0, "cannot read: " + content.error));
  if (content.too_large) return std::unexpected(project_error(file, 0, "larger than 1 MiB"));
  auto project = parse_project(content.text, file);
  if (!project) return project;
  project->path = folder;
  project->name = folder.filename().string();
  if (project->name.empty()) project->name = folder.parent_path().filename().string();  // "dir/"
  if (project->instructions.empty() && project->skills.empty()) {
    return std::unexpected(
        project_error(file, 0, "expected instructions or a `skills` list; the file is empty"));
  }
  return project;
}

std::vector<Project> load_projects(const fs::path& projects_dir) {
  std::vector<Project> out;
  std::error_code ec;
  if (!fs::is_directory(projects_dir, ec)) return out;
  const fs::path base = fs::weakly_canonical(projects_dir, ec);
  for (fs::directory_iterator it(projects_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (!it->is_directory(ec2)) continue;
    fs::path real = fs::canonical(it->path(), ec2);
    if (!ec2) {
      auto rel = real.lexically_relative(base);
      if (rel.empty() || *rel.begin() == "..") {
        log(LogLevel::Warn, "project " + it->path().string() + " resolves outside " +
                                base.string() + " (path traversal blocked)");
        continue;
      }
    }
    auto project = load_project(it->path());
    if (!project) {
      log(LogLevel::Warn, "project skipped: " + project.error().describe());
      continue;
    }
    out.push_back(std::move(*project));
  }
  std::sort(out.begin(), out.end(),
            [](const Project& a, const Project& b) { return a.name < b.name; });
  return out;
}

const Project* find_project(const std::vector<Project>& projects, std::string_view name) {
  auto it = std::find_if(projects.begin(), projects.end(),
                         [&](const Project& p) { return p.name == name; });
  return it == projects.end() ? nullptr : &*it;
}

Json to_json(const Project& p) {
  return Json{{"name", p.name},
              {"path", p.path.string()},
              {"file", p.file.string()},
              {"skills", p.skills},
              {"instructions", p.instructions}};
}

Result<void> ProjectContextSource::contribute(Context& context, const Request&) {
  if (project_.instructions.empty()) return {};
  if (!context.system_prompt.empty()) context.system_prompt += "\n\n";
  context.system_prompt += project_.instructions;
  return {};
}

}  // namespace kernex::skills
