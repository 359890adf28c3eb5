// What code in the REPL keeps beyond its worker, in the kernel's data dir (which no sandbox can
// read or write): skills saved with save_skill(name, code, description), one folder per skill
// under <data_dir>/repl-skills/<tenant>/<name> (SKILL.md + <name>.py), and checkpoint()'s pickled
// variables under <data_dir>/repl-checkpoints/<tenant>/<session>. Saved skills are untrusted until
// a person runs `kernex skills trust <folder>` (the trust records of skills/trust.hpp); only then
// does a worker get their module, copied into its read-only tree as `skills.<name>`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "kernex/error.hpp"

namespace kernex::repl {

inline constexpr std::size_t kMaxSkillCodeBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxSkillDescriptionChars = 1024;  // the Agent Skills spec's limit

// A saved skill's name is its folder, its module and its skill name at once: 1 to 64 of [a-z0-9],
// starting with a letter, and no Python keyword. Empty when valid, else what is wrong.
std::string skill_name_problem(const std::string& name);

// <data_dir>/repl-skills/<tenant>, made 0700 (each level a real directory, never a symlink).
Result<std::filesystem::path> skills_area(const std::filesystem::path& data_dir,
                                          const std::string& tenant);

// Validates name, code and description, writes the folder beside its place, checks it with the
// Agent Skills validator (lint_spec) and renames it into `area`/<name> (replacing an earlier save
// of that name, which then needs trusting again). Returns the folder.
Result<std::filesystem::path> save_skill(const std::filesystem::path& area, const std::string& name,
                                         const std::string& code, const std::string& description);

// Writes the package `skills` into `tree` (a worker's read-only tree): a module per saved skill of
// `area` that is trusted in `trust_store` with its current hash, and in __init__.py the folders of
// the others (_UNTRUSTED), so that importing one says how to trust it. A missing area (or one that
// is not a real directory) has no skills.
Result<void> write_skills_package(const std::filesystem::path& tree,
                                  const std::filesystem::path& area,
                                  const std::filesystem::path& trust_store);

// What tells whether the tenant's importable skills may have changed (a skill saved or replaced,
// a folder trusted): the area's and the trust store's identity and times, by two stats.
std::uint64_t saved_skills_fingerprint(const std::filesystem::path& area,
                                       const std::filesystem::path& trust_store);

// The file of a session's checkpoint: <data_dir>/repl-checkpoints/<tenant>/<hex of session>.b64
// (its directories made, each a real directory); empty for a session or tenant that can't name
// one (kept in memory only).
Result<std::filesystem::path> checkpoint_file(const std::filesystem::path& data_dir,
                                              const std::string& tenant,
                                              const std::string& session);
// Replaces `file` atomically with `data` (fsynced).
Result<void> write_checkpoint(const std::filesystem::path& file, const std::string& data);
// The checkpoint in `file`, at most `max_bytes`; empty when there is none.
Result<std::string> read_checkpoint(const std::filesystem::path& file, std::size_t max_bytes);

}  // namespace kernex::repl
