// Deleting what a session left on disk when it is forgotten: its layer directories and the
// contents of its workspace. Both were writable by sandboxed tools, so they are hostile trees:
// no symlink is followed, and directories left without access (mode 000) are opened up first.
#pragma once

#include <filesystem>
#include <string>

#include "kernex/error.hpp"

namespace kernex::workspace {

// Removes every layer directory of `session` under `overlays` (named `session` or
// `session~...`); none is fine.
Result<void> remove_session_layers(const std::filesystem::path& overlays,
                                   const std::string& session);

// Removes everything inside `dir`, keeping `dir` itself (a sandbox policy may hold it); a missing
// `dir` is fine.
Result<void> empty_directory(const std::filesystem::path& dir);

}  // namespace kernex::workspace
