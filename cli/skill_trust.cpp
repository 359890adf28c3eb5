#include "skill_trust.hpp"

#include <algorithm>

#include "kernex/log.hpp"
#include "kernex/sandbox/profile.hpp"
#include "kernex/skills/saved_skills.hpp"

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

}  // namespace

std::vector<fs::path> run_skill_dirs(const Config& config, skills::LoadOptions& options) {
  std::vector<fs::path> dirs = config.skill_dirs;
  if (options.trust) {
    for (auto& saved : skills::trusted_saved_skills(
             skills::saved_skills_area(config.data_dir, "local"), *options.trust))
      dirs.push_back(std::move(saved));
  }
  return dirs;
}

Result<std::shared_ptr<skills::SkillContextSource>> load_run_skills(
    const Config& config, const std::vector<std::string>& activate) {
  skills::LoadOptions options = skill_load_options(config);
  std::vector<fs::path> dirs = run_skill_dirs(config, options);
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
