// What `workspace accept` (the CLI's and serve's) must not land from an overlay without a person's
// explicit force: the kernel paths inside the real tree, and the trust to forget once forced.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::skills {

// Relative to `root`, '/'-separated: every registered kernel file (kernex/kernel_files.hpp) at or
// below `root`, every folder `trust_store` vouches for there, and the project files (AGENTS.md,
// ROLE.md) and kernex.yaml at its top, whether they exist or not (one planted there is as much a
// kernel file as one changed).
std::vector<std::string> kernel_paths_in(const std::filesystem::path& root,
                                         const std::filesystem::path& trust_store);

// Registers every folder `trust_store` vouches for at or below `root` (and existing) as a read-only
// kernel file, so an overlay run that loads none of them still can't write over one in its layer:
// inside the overlay it is bound from the real tree.
void protect_trusted_folders_in(const std::filesystem::path& root,
                                const std::filesystem::path& trust_store);

// After a forced accept: forgets the trust of every folder `trust_store` vouches for at, below or
// above one of `landed` (relative to `root`). Returns the folders forgotten.
Result<std::vector<std::string>> untrust_landed(const std::filesystem::path& root,
                                                const std::filesystem::path& trust_store,
                                                const std::vector<std::string>& landed);

}  // namespace kernex::skills
