// Trusting skills that tools could have written. A skill folder in a writable location (a workspace
// a sandboxed tool of this kernel can write, or below a world-writable directory such as /tmp) may
// have been planted or changed by a tool in an earlier run, so it loads only once the person has
// trusted it with `kernex skills trust DIR`, which records its hash in a kernel-owned file in the
// data dir; a trusted skill whose files changed since is refused until trusted again.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::skills {

// <data_dir>/trusted-skills.json
inline constexpr std::string_view kTrustFileName = "trusted-skills.json";

struct TrustRule {
  std::filesystem::path store;  // the trust records file
  std::vector<std::filesystem::path>
      writable;  // directories sandboxed tools of this kernel can write
};

// Where `folder` overlaps a writable location: the workspace it lies in (or contains), or the
// world-writable directory above it; nullopt when it is in none.
std::optional<std::filesystem::path> writable_location(
    const std::filesystem::path& folder, const std::vector<std::filesystem::path>& writable);

// The skill's trust hash: SHA-256 over its lock (every file's relative path and SHA-256, symlinks
// by target; see lock.hpp), the lock file included. Refuses what a hash cannot pin down in a
// writable place: a symlink resolving outside the folder, a file with other hard links.
Result<std::string> trust_hash(const std::filesystem::path& folder);

// canonical folder -> trust hash. A missing store is empty; a malformed one is an error.
Result<std::map<std::string, std::string>> read_trust_store(const std::filesystem::path& store);
// Records `folder` (canonical) with its current hash, replacing the file atomically. Returns the
// hash.
Result<std::string> trust_skill(const std::filesystem::path& store,
                                const std::filesystem::path& folder);

// Forgets the records of `folders` (as stored: canonical), replacing the file atomically; a folder
// with no record is ignored. A skill whose files were landed over by force must be trusted again.
Result<void> untrust_skills(const std::filesystem::path& store,
                            const std::vector<std::string>& folders);

enum class TrustState {
  NotRequired,  // not in a writable location
  Trusted,      // recorded with its current hash
  Untrusted,    // never trusted
  Changed,      // trusted, but its files changed since
};
std::string_view to_string(TrustState state) noexcept;

struct TrustCheck {
  TrustState state = TrustState::NotRequired;
  std::optional<std::filesystem::path> location;  // the writable location it lies in
  std::string message;  // for Untrusted/Changed: why it is refused and the command that trusts it
};

// Judges `folder` under `rule`; an error when the store or the folder can't be read.
Result<TrustCheck> check_trust(const std::filesystem::path& folder, const TrustRule& rule);

}  // namespace kernex::skills
