// Where sessions' overlay layers live under a data dir, and finding one by session: the CLI's
// `kernex workspace` and serve's workspace routes take a session id, or none for the most recent.
#pragma once

#include <filesystem>
#include <string>

#include "kernex/error.hpp"

namespace kernex::workspace {

// <data_dir>/overlays: one layer directory per session, named by the session id.
std::filesystem::path overlays_dir(const std::filesystem::path& data_dir);

// The layer directory of `session` under `data_dir` (it must exist), or with an empty `session`
// the one whose overlay was created last. A session id must be one plain path component.
Result<std::filesystem::path> find_layer_dir(const std::filesystem::path& data_dir,
                                             const std::string& session);

}  // namespace kernex::workspace
