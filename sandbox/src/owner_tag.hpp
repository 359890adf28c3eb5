// Names for what a kernel leaves on disk (private TMPDIRs, pids cgroups) that say which process
// made them: "<pid>-<start time>", so a later kernel can tell an owner that died (even by SIGKILL,
// which runs no cleanup) from a live one or from an unrelated process that got the same pid since.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace kernex::sandbox::detail {

// "<pid>-<start time in clock ticks since boot>" of this process.
std::string owner_tag();

// For a name "<prefix><pid>-<start>-<anything>": true when that process is gone (no such pid, or a
// pid with another start time). False for names that don't parse, and for live owners.
bool owner_is_dead(std::string_view name, std::string_view prefix);

// Calls `reclaim` on each entry of `dir` named "<prefix><tag>-..." whose owner is dead. Entries are
// not followed: the caller gets the path and decides (lstat it, check its owner).
void for_each_stale(const std::filesystem::path& dir, std::string_view prefix,
                    const std::function<void(const std::filesystem::path&)>& reclaim);

}  // namespace kernex::sandbox::detail
