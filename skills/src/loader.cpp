#include "kernex/skills/loader.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <system_error>

#include "frontmatter.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/skills/checks.hpp"
#include "kernex/skills/lock.hpp"
#include "manifest.hpp"
#include "node.hpp"
#include "text.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

using detail::Declared;
using detail::Manifest;

struct Parsed {
  Skill skill;
  Manifest manifest;
  std::vector<Diagnostic> diagnostics;
};

void add_error(std::vector<Diagnostic>& d, const fs::path& file, int line, std::string field,
               std::string message) {
  d.push_back({Severity::Error, file, line, std::move(field), std::move(message)});
}

bool has_errors(const std::vector<Diagnostic>& d) {
  return std::any_of(d.begin(), d.end(),
                     [](const Diagnostic& x) { return x.severity == Severity::Error; });
}

std::vector<Problem> problems_of(const Toolbox& t, const Permissions& p) {
  return check_toolbox(t, p);
}
std::vector<Problem> problems_of(const McpServer& s, const Permissions& p) {
  return check_mcp_server(s, p);
}

// The load-time checks refuse one toolbox or MCP server at a time, as kernex does: the entry is
// dropped and recorded with the reason in Skill::refused, and the rest of the skill loads. A
// refused mcp.json/toolbox.json entry therefore leaves a same-named frontmatter entry in place.
template <class T>
void refuse_unsafe(std::vector<Declared<T>>& entries, const Permissions& permissions,
                   std::vector<Diagnostic>& refused) {
  std::erase_if(entries, [&](const Declared<T>& entry) {
    auto problems = problems_of(entry.value, permissions);
    for (const auto& problem : problems) {
      refused.push_back({Severity::Error, entry.file, entry.line, entry.field + "." + problem.field,
                         problem.message});
    }
    return !problems.empty();
  });
}

// Frontmatter and body into `p`; false when nothing usable was found.
bool parse_into(std::string_view raw, const fs::path& file, const fs::path& folder, Parsed& p) {
  p.skill.path = folder;
  p.skill.file = file;
  if (auto bad = detail::invalid_utf8_at(raw)) {
    add_error(p.diagnostics, file, detail::line_of(raw, *bad), "",
              "expected UTF-8 text; invalid byte at offset " + std::to_string(*bad));
    return false;
  }
  std::string text = detail::normalize_newlines(raw, true);
  auto fm = detail::split_frontmatter(text);
  if (!fm) {
    add_error(p.diagnostics, file, fm.error().line, "", fm.error().message);
    return false;
  }
  p.skill.format = fm->format;
  p.skill.instructions = fm->body;
  detail::ParseFailure failure;
  std::optional<detail::Node> root =
      fm->format == SourceFormat::Toml
          ? detail::parse_toml(fm->block, fm->first_line, failure)
          : detail::parse_yaml(fm->block, false, fm->first_line, failure);
  if (!root) {
    int line = failure.line > 0 ? fm->first_line + failure.line - 1 : fm->first_line;
    std::string kind = fm->format == SourceFormat::Toml ? "TOML" : "YAML";
    add_error(p.diagnostics, file, line, "",
              "invalid " + kind + " frontmatter: " + failure.message +
                  (failure.line > 0 ? " (column " + std::to_string(failure.column + 1) + ")" : ""));
    return false;
  }
  p.manifest = detail::read_frontmatter(*root, file, p.skill, p.diagnostics);
  refuse_unsafe(p.manifest.toolboxes, p.skill.permissions, p.skill.refused);
  refuse_unsafe(p.manifest.mcp_servers, p.skill.permissions, p.skill.refused);
  return true;
}

template <class T>
void merge(std::vector<Declared<T>>& into, std::vector<Declared<T>> from) {
  for (auto& entry : from) {
    auto same = std::find_if(into.begin(), into.end(), [&](const Declared<T>& d) {
      return d.value.name == entry.value.name;
    });
    if (same != into.end())
      *same = std::move(entry);
    else
      into.push_back(std::move(entry));
  }
}

// Permission checks, derived fields, ordering; the skill or its failure.
std::expected<Skill, SkillFailure> finish(Parsed p) {
  Skill& skill = p.skill;
  for (const auto& problem : check_permissions(skill.permissions)) {
    add_error(p.diagnostics, skill.file, p.manifest.permissions_line,
              "permissions." + problem.field, problem.message);
  }
  // Entries were checked (and refused ones dropped) before merging; see refuse_unsafe.
  for (auto& entry : p.manifest.toolboxes) {
    apply_permissions(entry.value, skill.permissions);
    entry.value.source_dir = skill.path.string();
    skill.toolboxes.push_back(entry.value);
  }
  for (const auto& entry : p.manifest.mcp_servers) {
    skill.mcp_servers.push_back(entry.value);
    apply_permissions(skill.mcp_servers.back(), skill.permissions);
    skill.mcp_servers.back().source_dir = skill.path.string();
  }
  if (has_errors(p.diagnostics)) {
    SkillFailure failure{skill.path, {}};
    for (auto& d : p.diagnostics) {
      if (d.severity == Severity::Error) failure.problems.push_back(std::move(d));
    }
    return std::unexpected(std::move(failure));
  }
  std::sort(skill.toolboxes.begin(), skill.toolboxes.end(),
            [](const Toolbox& a, const Toolbox& b) { return a.name < b.name; });
  std::sort(skill.mcp_servers.begin(), skill.mcp_servers.end(),
            [](const McpServer& a, const McpServer& b) { return a.name < b.name; });
  skill.available = std::all_of(skill.requirements.begin(), skill.requirements.end(),
                                [](const std::string& r) { return program_on_path(r); });
  skill.warnings = std::move(p.diagnostics);
  return std::move(p.skill);
}

SkillFailure single_failure(const fs::path& folder, const fs::path& file, std::string message) {
  return SkillFailure{folder, {Diagnostic{Severity::Error, file, 0, "", std::move(message)}}};
}

std::optional<fs::path> find_skill_file(const fs::path& folder) {
  for (const char* name : {"SKILL.md", "skill.md"}) {
    std::error_code ec;
    fs::path candidate = folder / name;
    if (fs::exists(candidate, ec)) return candidate;
  }
  return std::nullopt;
}

// mcp.json / toolbox.json: missing is fine, anything else wrong is an error of the skill.
std::optional<detail::Node> read_json_side_file(const fs::path& file,
                                                std::vector<Diagnostic>& diagnostics) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  if (!fs::is_regular_file(file, ec)) {
    add_error(diagnostics, file, 0, "", "expected a regular file");
    return std::nullopt;
  }
  auto content = detail::read_file_capped(file.string(), kMaxSkillFileBytes);
  if (!content.error.empty()) {
    add_error(diagnostics, file, 0, "", "cannot read: " + content.error);
    return std::nullopt;
  }
  if (content.too_large) {
    add_error(diagnostics, file, 0, "",
              "file exceeds the " + std::to_string(kMaxSkillFileBytes / 1024) + " KiB limit");
    return std::nullopt;
  }
  if (json_nests_deeper_than(content.text, kMaxJsonDepth)) {
    add_error(diagnostics, file, 0, "",
              "expected JSON nested at most " + std::to_string(kMaxJsonDepth) + " levels deep");
    return std::nullopt;
  }
  Json json;
  try {
    json = Json::parse(content.text);
  } catch (const Json::parse_error& e) {
    int line = detail::line_of(content.text, e.byte > 0 ? e.byte - 1 : 0);
    add_error(diagnostics, file, line, "", std::string("expected valid JSON: ") + e.what());
    return std::nullopt;
  }
  return detail::from_json(json);
}

// Both the path as given and where it resolves to, so a policy meets it whichever it sees. Only
// what exists: a policy can't keep a missing path read-only (it refuses to run instead), and a
// skill that appears there later is refused at load until trusted (trust.hpp).
void register_read_only(const fs::path& path, const char* why) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) return;
  register_kernel_file(path, KernelFileAccess::ReadOnly, why);
  if (real != fs::absolute(path, ec).lexically_normal())
    register_kernel_file(real, KernelFileAccess::ReadOnly, why);
}

}  // namespace

bool program_on_path(std::string_view program) {
  if (program.empty()) return false;
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string_view dirs = path;
  std::size_t pos = 0;
  while (pos <= dirs.size()) {
    std::size_t colon = dirs.find(':', pos);
    if (colon == std::string_view::npos) colon = dirs.size();
    std::string_view dir = dirs.substr(pos, colon - pos);
    if (!dir.empty()) {
      std::error_code ec;
      if (fs::is_regular_file(fs::path(dir) / program, ec)) return true;
    }
    pos = colon + 1;
  }
  return false;
}

std::expected<Skill, SkillFailure> parse_skill(std::string_view text, const fs::path& file,
                                               const fs::path& folder) {
  Parsed p;
  if (!parse_into(text, file, folder, p))
    return std::unexpected(SkillFailure{folder, std::move(p.diagnostics)});
  return finish(std::move(p));
}

std::expected<Skill, SkillFailure> load_skill(const fs::path& folder, const LoadOptions& options) {
  register_read_only(folder, "skill");
  std::error_code ec;
  if (!fs::exists(folder, ec))
    return std::unexpected(single_failure(folder, folder, "skill folder does not exist"));
  if (!fs::is_directory(folder, ec)) {
    return std::unexpected(single_failure(
        folder, folder, "expected a skill folder containing SKILL.md, found a file"));
  }
  auto file = find_skill_file(folder);
  if (!file)
    return std::unexpected(
        single_failure(folder, folder / "SKILL.md", "missing SKILL.md in the skill folder"));
  if (!fs::is_regular_file(*file, ec)) {
    return std::unexpected(single_failure(folder, *file, "expected SKILL.md to be a regular file"));
  }
  // A locked skill is checked before anything in it is parsed: changed files are not trusted.
  if (auto check = verify_lock(folder); !check) {
    return std::unexpected(single_failure(folder, folder / kLockFileName, check.error().message));
  } else if (*check && !(*check)->ok()) {
    return std::unexpected(
        single_failure(folder, folder / kLockFileName,
                       "the skill's files differ from its lock (" + (*check)->describe() +
                           "); review the changes and run `kernex skills lock` again"));
  }
  // A skill a tool could have written is not read until the person has trusted these very files.
  TrustState trust = TrustState::NotRequired;
  if (options.trust) {
    auto check = check_trust(folder, *options.trust);
    if (!check) return std::unexpected(single_failure(folder, folder, check.error().message));
    if (check->state == TrustState::Untrusted || check->state == TrustState::Changed) {
      SkillFailure failure = single_failure(folder, folder, check->message);
      failure.trust = check->state;
      return std::unexpected(std::move(failure));
    }
    trust = check->state;
  }
  auto content = detail::read_file_capped(file->string(), kMaxSkillFileBytes);
  if (!content.error.empty())
    return std::unexpected(single_failure(folder, *file, "cannot read: " + content.error));
  if (content.too_large) {
    return std::unexpected(single_failure(folder, *file,
                                          "file exceeds the " +
                                              std::to_string(kMaxSkillFileBytes / 1024) +
                                              " KiB limit for SKILL.md"));
  }
  Parsed p;
  if (!parse_into(content.text, *file, folder, p)) {
    return std::unexpected(SkillFailure{folder, std::move(p.diagnostics)});
  }
  if (auto mcp = read_json_side_file(folder / "mcp.json", p.diagnostics)) {
    auto servers = detail::read_mcp_json(*mcp, folder / "mcp.json", p.diagnostics);
    refuse_unsafe(servers, p.skill.permissions, p.skill.refused);
    merge(p.manifest.mcp_servers, std::move(servers));
  }
  if (auto boxes = read_json_side_file(folder / "toolbox.json", p.diagnostics)) {
    auto toolboxes = detail::read_toolbox_json(*boxes, folder / "toolbox.json", p.diagnostics);
    refuse_unsafe(toolboxes, p.skill.permissions, p.skill.refused);
    merge(p.manifest.toolboxes, std::move(toolboxes));
  }
  auto skill = finish(std::move(p));
  if (skill) skill->trust = trust;
  return skill;
}

std::string SkillNameClaims::claim(const std::string& name, const fs::path& folder) {
  auto [it, inserted] = owners_.emplace(name, folder);
  if (inserted) return {};
  return "duplicate skill name '" + name + "': already loaded from " + it->second.string();
}

LoadedSkills load_skills(const std::vector<fs::path>& dirs, const LoadOptions& options) {
  LoadedSkills out;
  SkillNameClaims names;
  auto take = [&](const fs::path& folder) {
    auto loaded = load_skill(folder, options);
    if (!loaded) {
      out.failures.push_back(std::move(loaded.error()));
      return;
    }
    if (std::string taken = names.claim(loaded->name, folder); !taken.empty()) {
      out.failures.push_back(single_failure(folder, loaded->file, std::move(taken)));
      return;
    }
    out.skills.push_back(std::move(*loaded));
  };

  for (const auto& dir : dirs) {
    register_read_only(dir, "skills dir");
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
      out.failures.push_back(single_failure(dir, dir, "skills directory does not exist"));
      continue;
    }
    if (!fs::is_directory(dir, ec)) {
      out.failures.push_back(single_failure(
          dir, dir, "expected a skill folder or a folder of skill folders, found a file"));
      continue;
    }
    if (find_skill_file(dir)) {
      take(dir);
      continue;
    }
    std::vector<fs::path> folders;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code ec2;
      if (it->is_directory(ec2)) folders.push_back(it->path());
    }
    if (ec) {
      out.failures.push_back(single_failure(dir, dir, "cannot list directory: " + ec.message()));
      continue;
    }
    std::sort(folders.begin(), folders.end());
    fs::path base = fs::weakly_canonical(dir, ec);
    for (const auto& folder : folders) {
      if (!find_skill_file(folder)) continue;
      // A symlinked skill folder must stay inside the directory it was found in (kernex).
      std::error_code ec3;
      fs::path real = fs::canonical(folder, ec3);
      if (!ec3 && !base.empty()) {
        auto rel = real.lexically_relative(base);
        if (rel.empty() || *rel.begin() == "..") {
          out.failures.push_back(single_failure(folder, folder,
                                                "skill folder resolves to " + real.string() +
                                                    ", outside " + base.string() +
                                                    " (path traversal blocked)"));
          continue;
        }
      }
      take(folder);
    }
  }
  std::sort(out.skills.begin(), out.skills.end(),
            [](const Skill& a, const Skill& b) { return a.name < b.name; });
  std::stable_sort(out.failures.begin(), out.failures.end(),
                   [](const SkillFailure& a, const SkillFailure& b) { return a.path < b.path; });
  return out;
}

}  // namespace kernex::skills
