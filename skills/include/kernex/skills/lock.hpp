// Integrity of skill folders: `kernex skills lock` records the SHA-256 of every file of a
// skill in a lock file inside the folder; while that file exists, a skill whose files differ
// from it (changed, missing or extra) is refused at load.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::skills {

// The lock file's name inside a skill folder. It is not itself locked.
inline constexpr std::string_view kLockFileName = "kernex.lock";

struct SkillLock {
  // Relative path (generic form, '/' separated) -> lowercase hex SHA-256 of the content. A
  // symbolic link is recorded by its target ("symlink:" + SHA-256 of the target path), so
  // re-pointing it is a change.
  std::map<std::string, std::string> files;
};

// Every file under `folder` (recursively, symlinks not followed), the lock file excepted.
Result<SkillLock> compute_lock(const std::filesystem::path& folder);
// Writes <folder>/kernex.lock (JSON: {"version": 1, "algorithm": "sha256", "files": {...}}).
Result<SkillLock> write_lock(const std::filesystem::path& folder);
// nullopt when the folder has no lock file; an error when it exists but is unreadable or
// malformed (naming the file and what was expected).
Result<std::optional<SkillLock>> read_lock(const std::filesystem::path& folder);

struct LockCheck {
  std::vector<std::string> changed;  // relative paths, sorted
  std::vector<std::string> missing;  // locked but gone
  std::vector<std::string> extra;    // present but not locked
  bool ok() const { return changed.empty() && missing.empty() && extra.empty(); }
  // "changed: a, b; missing: c; extra: d" ("" when ok).
  std::string describe() const;
};

LockCheck compare(const SkillLock& locked, const SkillLock& actual);
// Compares the folder with its lock file; nullopt when there is none.
Result<std::optional<LockCheck>> verify_lock(const std::filesystem::path& folder);

// Lowercase hex SHA-256 (OpenSSL libcrypto).
std::string sha256_hex(std::string_view data);

Json to_json(const LockCheck& check);

}  // namespace kernex::skills
