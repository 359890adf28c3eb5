#include "skill_trust.hpp"

#include <algorithm>

#include "kernex/log.hpp"
#include "kernex/sandbox/profile.hpp"

namespace fs = std::filesystem;

namespace kernex::cli {
namespace {

// What one toolbox plugin's options let its sandboxes write.
void add_plugin_writable(const Json& options, std::vector<fs::path>& out) {
  if (!options.is_object()) return;
  std::error_code ec;
  if (auto it = options.find("workspace");
      it != options.end() && it->is_string() && !it->get<std::string>().empty()) {
    out.push_back(fs::absolute(it->get<std::string>(), ec).lexically_normal());
  }
  if (auto it = options.find("profile"); it != options.end() && it->is_string()) {
    auto profile = sandbox::SandboxProfile::load_yaml_file(it->get<std::string>());
    if (!profile) {
      log(LogLevel::Warn, "skills: cannot read the sandbox profile " + it->get<std::string>() +
                              " to find writable locations: " + profile.error().describe());
      return;
    }
    if (profile->workspace) out.push_back(*profile->workspace);
    out.insert(out.end(), profile->read_write.begin(), profile->read_write.end());
  }
}

// Skills that REPL code saved with save_skill() (toolbox-repl's saved_skills.hpp keeps them in
// <data_dir>/repl-skills/<tenant>, "local" for the CLI) and that a person trusted since: they
// join the run's skills, so the model finds them in its catalog. Sandboxed code chose every byte
// of them, so the area counts as a writable location (only a folder trusted with its current hash
// loads); untrusted ones are left out without a warning on every run (importing one from code
// says how to trust it). Only real directories are looked at, never a symlink.
std::vector<fs::path> trusted_saved_skills(const Config& config, skills::LoadOptions& options) {
  std::vector<fs::path> out;
  if (config.data_dir.empty() || !options.trust) return out;
  const fs::path area = config.data_dir / "repl-skills" / "local";
  std::error_code ec;
  for (const fs::path& p : {area.parent_path(), area}) {
    if (!fs::is_directory(fs::symlink_status(p, ec))) return out;
  }
  options.trust->writable.push_back(area);
  constexpr std::size_t kMaxSavedSkills = 1000;  // a listing the kernel reads, bounded
  for (fs::directory_iterator it(area, ec), end; !ec && it != end && out.size() < kMaxSavedSkills;
       it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    auto trust = skills::check_trust(it->path(), *options.trust);
    if (trust && trust->state == skills::TrustState::Trusted) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<std::shared_ptr<skills::SkillContextSource>> load_run_skills(
    const Config& config, const std::vector<std::string>& activate) {
  skills::LoadOptions options = skill_load_options(config);
  std::vector<fs::path> dirs = config.skill_dirs;
  for (auto& saved : trusted_saved_skills(config, options)) dirs.push_back(std::move(saved));
  if (dirs.empty() && activate.empty()) return nullptr;
  skills::LoadedSkills loaded = skills::load_skills(dirs, options);
  for (const auto& failure : loaded.failures)
    log(LogLevel::Warn, "skill not loaded: " + failure.describe());
  for (const auto& s : loaded.skills) {
    for (const auto& r : s.refused)
      log(LogLevel::Warn, "skill '" + s.name + "': refused: " + r.describe());
  }
  const std::string refused = skills::refusal_reasons(loaded);
  auto source = skills::SkillContextSource::create(std::move(loaded.skills), activate);
  if (!source) return fail(ErrorCode::Skill, source.error().message + refused);
  return *source;
}

fs::path trust_store(const Config& config) { return config.data_dir / skills::kTrustFileName; }

skills::LoadOptions skill_load_options(const Config& config, const std::vector<fs::path>& extra) {
  skills::TrustRule rule;
  rule.store = trust_store(config);
  std::error_code ec;
  if (fs::path cwd = fs::current_path(ec); !ec) rule.writable.push_back(cwd);
  if (config.toolboxes) {
    for (const auto& ref : *config.toolboxes) add_plugin_writable(ref.config, rule.writable);
  }
  rule.writable.insert(rule.writable.end(), extra.begin(), extra.end());
  return skills::LoadOptions{std::move(rule)};
}

}  // namespace kernex::cli
