#include "kernex/skills/saved_skills.hpp"

#include <algorithm>

#include "kernex/log.hpp"
#include "kernex/skills/loader.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {

fs::path saved_skills_area(const fs::path& data_dir, const std::string& tenant) {
  if (data_dir.empty() || tenant.empty() || tenant.front() == '.' ||
      tenant.find_first_of(std::string("/\0", 2)) != std::string::npos)
    return {};
  return data_dir / "repl-skills" / tenant;
}

std::vector<fs::path> trusted_saved_skills(const fs::path& area, TrustRule& rule) {
  std::vector<fs::path> out;
  if (area.empty()) return out;
  std::error_code ec;
  for (const fs::path& p : {area.parent_path(), area}) {
    if (!fs::is_directory(fs::symlink_status(p, ec))) return out;
  }
  rule.writable.push_back(area);
  constexpr std::size_t kMaxSavedSkills = 1000;  // a listing the kernel reads, bounded
  for (fs::directory_iterator it(area, ec), end; !ec && it != end && out.size() < kMaxSavedSkills;
       it.increment(ec)) {
    if (it->is_symlink(ec) || !it->is_directory(ec)) continue;
    auto trust = check_trust(it->path(), rule);
    if (trust && trust->state == TrustState::Trusted) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Skill> load_trusted_saved_skills(const fs::path& data_dir, const std::string& tenant,
                                             TrustRule rule) {
  const std::vector<fs::path> folders =
      trusted_saved_skills(saved_skills_area(data_dir, tenant), rule);
  if (folders.empty()) return {};
  LoadedSkills loaded = load_skills(folders, LoadOptions{std::move(rule)});
  for (const auto& failure : loaded.failures)
    log(LogLevel::Warn, "saved skill not loaded: " + failure.describe());
  return std::move(loaded.skills);
}

Result<std::shared_ptr<SkillContextSource>> source_with_saved_skills(
    const std::vector<Skill>& loaded, const fs::path& data_dir, const std::string& tenant,
    TrustRule rule, std::vector<std::string> activate) {
  std::vector<Skill> saved = load_trusted_saved_skills(data_dir, tenant, std::move(rule));
  if (saved.empty()) return std::shared_ptr<SkillContextSource>();
  std::vector<Skill> all = loaded;
  for (auto& s : saved) {
    if (std::none_of(all.begin(), all.end(), [&](const Skill& x) { return x.name == s.name; }))
      all.push_back(std::move(s));
  }
  return SkillContextSource::create(std::move(all), std::move(activate));
}

}  // namespace kernex::skills
