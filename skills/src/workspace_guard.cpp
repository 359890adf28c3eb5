#include "kernex/skills/workspace_guard.hpp"

#include <algorithm>

#include "kernex/kernel_files.hpp"
#include "kernex/sandbox/git_metadata.hpp"
#include "kernex/skills/trust.hpp"

namespace kernex::skills {
namespace fs = std::filesystem;

namespace {

// `path` relative to `root` when at or below it ("" for root itself); nullopt otherwise.
std::optional<std::string> inside(const fs::path& root, const fs::path& path) {
  const fs::path rel = path.lexically_normal().lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  return rel == "." ? std::string() : rel.generic_string();
}

bool related(const std::string& a, const std::string& b) {
  auto below = [](const std::string& p, const std::string& q) {
    return q.empty() || p == q || (p.starts_with(q) && p[q.size()] == '/');
  };
  return below(a, b) || below(b, a);
}

}  // namespace

std::vector<std::string> kernel_paths_in(const fs::path& root, const fs::path& trust_store) {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(root, ec);
  std::vector<std::string> out{"AGENTS.md", "ROLE.md", "kernex.yaml"};
  // What git at the root will trust or run (config, hooks, a submodule's or worktree's gitdir)
  // is a kernel path too: an overlay run with git_writes may leave one in its layer, and the
  // person's next git command would obey it (sandbox/README.md, "What no mount can stop").
  for (const char* name : sandbox::kGitGuardedFiles) out.push_back(std::string(".git/") + name);
  for (const char* name : sandbox::kGitGuardedIfPresent) out.push_back(std::string(".git/") + name);
  for (const char* name : sandbox::kGitGuardedDirs) out.push_back(std::string(".git/") + name);
  auto add = [&](const fs::path& p) {
    for (const fs::path& base : {root.lexically_normal(), real}) {
      if (auto rel = inside(base, p); rel && !rel->empty()) out.push_back(*rel);
    }
  };
  for (const auto& k : kernel_files()) add(k.path);
  if (auto records = read_trust_store(trust_store)) {
    for (const auto& [folder, hash] : *records) add(folder);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void protect_trusted_folders_in(const fs::path& root, const fs::path& trust_store) {
  auto records = read_trust_store(trust_store);
  if (!records) return;  // a malformed store trusts nothing: every skill in it is refused at load
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(root, ec);
  for (const auto& [folder, hash] : *records) {
    const auto rel = inside(real, folder);
    if (!rel || rel->empty() || !fs::is_directory(fs::symlink_status(folder, ec))) continue;
    register_kernel_file(folder, KernelFileAccess::ReadOnly, "trusted skill");
  }
}

Result<std::vector<std::string>> untrust_landed(const fs::path& root, const fs::path& trust_store,
                                                const std::vector<std::string>& landed) {
  std::vector<std::string> forget;
  if (landed.empty()) return forget;
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(root, ec);
  KERNEX_ASSIGN_OR_RETURN(auto records, read_trust_store(trust_store));
  for (const auto& [folder, hash] : records) {
    const auto rel = inside(real, folder);
    if (!rel) continue;
    if (std::any_of(landed.begin(), landed.end(),
                    [&](const std::string& l) { return related(*rel, l); }))
      forget.push_back(folder);
  }
  KERNEX_RETURN_IF_ERROR(untrust_skills(trust_store, forget));
  return forget;
}

}  // namespace kernex::skills
