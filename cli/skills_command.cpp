// `kernex skills list|lint|lock|verify|trust|show`: inspecting skill folders without running
// anything, and trusting those in writable locations.
#include <filesystem>
#include <iostream>
#include <sstream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/config.hpp"
#include "kernex/skills/lint.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/lock.hpp"
#include "kernex/skills/trust.hpp"
#include "skill_trust.hpp"
#include "terminal_text.hpp"

namespace fs = std::filesystem;

namespace kernex::cli {

// `kernex skills ACTION`: list, lint, lock, verify, show.
struct SkillsArgs {
  std::string action;
  std::vector<std::string> dirs;  // DIRs (show: --skills); none: the config's skill_dirs
  std::string name;               // show NAME
  bool json = false;
  bool spec = false;  // lint --spec: the Agent Skills specification only
};
namespace {

void print_json(const Json& j, int indent = 2) {
  std::cout << j.dump(indent, ' ', false, Json::error_handler_t::replace) << '\n';
}

// Human output quotes manifests (names, descriptions, errors): printed with controls made visible.
void print_human(const std::ostringstream& out) { std::cout << for_terminal(out.str()); }

// DIRs from the command line, else the config's skill_dirs.
Result<std::vector<fs::path>> skill_dirs(const Config& config,
                                         const std::vector<std::string>& given,
                                         std::string_view action) {
  std::vector<fs::path> dirs(given.begin(), given.end());
  if (!dirs.empty()) return dirs;
  if (config.skill_dirs.empty()) {
    return fail(ErrorCode::Usage,
                "kernex skills " + std::string(action) +
                    ": no skill directory given; pass DIR (a skill folder or a folder of skill "
                    "folders) or set `skill_dirs:` in kernex.yaml");
  }
  return config.skill_dirs;
}

std::string first_line(std::string_view text, std::size_t max) {
  std::string_view line = text.substr(0, text.find('\n'));
  if (line.size() <= max) return std::string(line);
  return std::string(line.substr(0, max - 3)) + "...";
}

std::string plural(std::size_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

int list(const std::vector<fs::path>& dirs, const skills::LoadOptions& options, bool json) {
  skills::LoadedSkills loaded = skills::load_skills(dirs, options);
  if (json) {
    Json out{{"skills", Json::array()}, {"failures", Json::array()}};
    for (const auto& s : loaded.skills) out["skills"].push_back(skills::to_json(s));
    for (const auto& f : loaded.failures) out["failures"].push_back(skills::to_json(f));
    print_json(out);
    return kExitOk;
  }
  std::ostringstream out;
  for (const auto& s : loaded.skills) {
    out << s.name << " (" << skills::to_string(s.format) << "; "
        << plural(s.toolboxes.size(), "toolbox", "toolboxes") << ", "
        << plural(s.mcp_servers.size(), "MCP server", "MCP servers");
    if (!s.available) out << "; not installed";
    if (s.trust == skills::TrustState::Trusted) out << "; trusted";
    out << "): " << first_line(s.description, 100) << '\n';
    for (const auto& r : s.refused) out << "  refused: " << r.describe() << '\n';
  }
  for (const auto& f : loaded.failures) {
    out << "FAILED " << f.path.string();
    if (f.trust) out << " (" << skills::to_string(*f.trust) << ")";
    out << '\n';
    for (const auto& d : f.problems) out << "  " << d.describe() << '\n';
  }
  if (loaded.skills.empty() && loaded.failures.empty()) out << "no skills found\n";
  print_human(out);
  return kExitOk;
}

int lint(const std::vector<fs::path>& dirs, bool spec, bool json) {
  bool all_valid = true;
  Json out = Json::array();
  std::ostringstream text;
  for (const skills::LintVerdict& v : skills::lint_folders(dirs, spec)) {
    const fs::path& folder = v.path;
    all_valid &= v.valid;
    if (json) {
      out.push_back(skills::to_json(v));
      continue;
    }
    // One verdict line per folder; further errors and warnings are indented under it.
    text << folder.string() << ": " << (v.valid ? "valid" : "invalid: " + v.message) << '\n';
    for (std::size_t i = 1; i < v.errors.size(); ++i) text << "  - " << v.errors[i] << '\n';
    for (const auto& d : v.diagnostics) {
      if (d.severity == skills::Severity::Warning) text << "  " << d.describe() << '\n';
    }
  }
  if (json)
    print_json(out);
  else
    print_human(text);
  return all_valid ? kExitOk : kExitConfig;
}

// Only real skill folders are locked: a stray folder without SKILL.md is an error, not a lock.
bool is_skill_folder(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / "SKILL.md", ec) ||
         fs::is_regular_file(folder / "skill.md", ec);
}

int lock(const std::vector<fs::path>& dirs) {
  int code = kExitOk;
  for (const auto& folder : skills::skill_folders(dirs)) {
    if (!is_skill_folder(folder)) {
      code =
          report(Error(ErrorCode::Skill,
                       folder.string() + ": not locked: expected a skill folder with a SKILL.md"));
      continue;
    }
    auto written = skills::write_lock(folder);
    if (!written) {
      code = report(written.error());
      continue;
    }
    std::cout << for_terminal("locked " + folder.string() + " (" +
                              plural(written->files.size(), "file", "files") + ") in " +
                              (folder / skills::kLockFileName).string())
              << '\n';
  }
  return code;
}

int verify(const std::vector<fs::path>& dirs, bool json) {
  bool all_ok = true;
  Json out = Json::array();
  for (const auto& folder : skills::skill_folders(dirs)) {
    Json entry{{"path", folder.string()}};
    std::string line;
    auto check = skills::verify_lock(folder);
    if (!check) {
      all_ok = false;
      entry["status"] = "error";
      entry["error"] = check.error().describe();
      line = "error: " + check.error().describe();
    } else if (!*check) {
      all_ok = false;
      entry["status"] = "unlocked";
      line = "not locked (no " + std::string(skills::kLockFileName) + "; run `kernex skills lock`)";
    } else {
      const skills::LockCheck& c = **check;
      all_ok &= c.ok();
      entry["status"] = c.ok() ? "ok" : "modified";
      entry.update(skills::to_json(c));
      line = c.ok() ? "ok" : "modified: " + c.describe();
    }
    if (json)
      out.push_back(std::move(entry));
    else
      std::cout << for_terminal(folder.string() + ": " + line) << '\n';
  }
  if (json) print_json(out);
  return all_ok ? kExitOk : kExitConfig;
}

// Records each skill folder's hash in the trust store, so it loads from a writable location. All
// folders go in with one write of the store.
int trust(const std::vector<fs::path>& dirs, const fs::path& store) {
  int code = kExitOk;
  std::vector<fs::path> folders;
  for (const auto& folder : skills::skill_folders(dirs)) {
    if (is_skill_folder(folder)) {
      folders.push_back(folder);
      continue;
    }
    code =
        report(Error(ErrorCode::Skill,
                     folder.string() + ": not trusted: expected a skill folder with a SKILL.md"));
  }
  auto hashes = skills::trust_skills(store, folders);
  for (std::size_t i = 0; i < folders.size(); ++i) {
    const fs::path& folder = folders[i];
    if (!hashes[i]) {
      code = report(Error(ErrorCode::Skill, folder.string() + ": not trusted", hashes[i].error()));
      continue;
    }
    std::cout << for_terminal("trusted " + folder.string() + " (sha256 " +
                              hashes[i]->substr(0, 16) + "...) in " + store.string())
              << '\n';
  }
  return code;
}

int show(const std::vector<fs::path>& dirs, const skills::LoadOptions& options,
         const std::string& name) {
  skills::LoadedSkills loaded = skills::load_skills(dirs, options);
  if (const skills::Skill* s = loaded.find(name)) {
    // JSON for a person: for_terminal's escapes are JSON escapes, so it stays valid JSON.
    std::cout << for_terminal(
                     skills::to_json(*s).dump(2, ' ', false, Json::error_handler_t::replace))
              << '\n';
    return kExitOk;
  }
  for (const auto& f : loaded.failures) {
    if (f.path.filename() == name) {
      return report(Error(ErrorCode::Skill, "skill '" + name + "' did not load:\n" + f.describe()));
    }
  }
  std::string names;
  for (const auto& s : loaded.skills) names += (names.empty() ? "" : ", ") + s.name;
  return report(Error(ErrorCode::Skill, "no skill named '" + name + "'; loaded: " +
                                            (names.empty() ? std::string("(none)") : names)));
}

int skills_command(const ConfigFile& config_file, const SkillsArgs& args) {
  auto config = Config::load(config_file ? std::optional<fs::path>(*config_file) : std::nullopt);
  if (!config) return report(config.error());
  auto dirs = skill_dirs(*config, args.dirs, args.action);
  if (!dirs) return report(dirs.error());
  if (args.action == "list") return list(*dirs, skill_load_options(*config), args.json);
  if (args.action == "trust") return trust(*dirs, trust_store(*config));
  if (args.action == "lint") return lint(*dirs, args.spec, args.json);
  if (args.action == "lock") return lock(*dirs);
  if (args.action == "verify") return verify(*dirs, args.json);
  if (args.action == "show") return show(*dirs, skill_load_options(*config), args.name);
  return report(Error(ErrorCode::Usage, "kernex skills: unknown action '" + args.action + "'"));
}

}  // namespace

CommandRun setup_skills(Command skills, std::string& config) {
  auto args = std::make_shared<SkillsArgs>();
  skills.require_subcommand();
  auto action = [&skills, &config, args](const std::string& name, const std::string& help) {
    Command sub = skills.add_subcommand(name, help);
    sub.footer(kExitCodeHelp);
    add_config_option(sub, config);
    sub.final_callback([args, name] { args->action = name; });
    return sub;
  };
  const std::string dir_help =
      "a skill folder or a folder of skill folders (default: skill_dirs from kernex.yaml)";
  Command list =
      action("list", "Load the skills and list them, with the error of each that failed");
  list.add_flag("--json", args->json, "print {skills, failures} as JSON");
  list.add_option("dir", args->dirs, dir_help).type_name("DIR");
  Command lint =
      action("lint", "Judge skill folders, one verdict per folder; exit 0 only if all are valid");
  lint.add_flag("--spec", args->spec,
                "check exactly the Agent Skills specification (no kernex fields)");
  lint.add_flag("--json", args->json, "print the verdicts as a JSON array");
  lint.add_option("dir", args->dirs, dir_help).type_name("DIR");
  Command lock =
      action("lock", "Record the SHA-256 of every file of each skill in <skill>/kernex.lock");
  lock.add_option("dir", args->dirs, dir_help).type_name("DIR");
  Command verify =
      action("verify", "Compare skills with their lock: changed, missing and extra files");
  verify.add_flag("--json", args->json, "print the results as a JSON array");
  verify.add_option("dir", args->dirs, dir_help).type_name("DIR");
  Command trust = action("trust",
                         "Trust skill folders in a writable location (a workspace) as they are "
                         "now: record their hash");
  trust.add_option("dir", args->dirs, dir_help).type_name("DIR");
  Command show = action("show", "Print one skill's parsed model as JSON");
  show.add_option("name", args->name, "the skill's name").required().type_name("NAME");
  add_repeated(show, "--skills", args->dirs, dir_help + " (repeatable)").type_name("DIR");
  return [args](const ConfigFile& config) { return skills_command(config, *args); };
}

}  // namespace kernex::cli
