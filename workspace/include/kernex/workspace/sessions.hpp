// Where sessions' overlay layers live under a data dir, and finding one by session: the CLI's
// `kernex workspace` and serve's workspace routes take a session id, or none for the most recent.
//
// A session's layer directory is named `<session>` (made by hand or by an older kernex) or
// `<session>~<generation>`: a host never mounts a second overlay at a path it used before, since
// the sandbox keeps one overlay mount per layer path for as long as a policy over it lives (a
// layer dropped and made again at the same path would stay bound to the dropped one). The meta
// file's `session` tells which session a directory belongs to.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/workspace/overlay.hpp"

namespace kernex::workspace {

// <data_dir>/overlays: one layer directory per session, named by the session id.
std::filesystem::path overlays_dir(const std::filesystem::path& data_dir);

// The layer directory of `session` under `data_dir` (it must exist), or with an empty `session`
// the one whose overlay was created last. A session id must be one plain path component.
Result<std::filesystem::path> find_layer_dir(const std::filesystem::path& data_dir,
                                             const std::string& session);
// The same under an overlays directory of the host's choosing (serve: one per tenant).
Result<std::filesystem::path> find_layer_in(const std::filesystem::path& overlays,
                                            const std::string& session);

// The overlay a run of `session` over the real tree `lower` works in: the session's newest layer
// under `overlays` if it has one (later runs see earlier writes), else a new one at a path never
// used before. A session whose layer lies over another tree is a Usage error (accept or reject
// it first).
Result<Overlay> session_overlay(const std::filesystem::path& overlays, const std::string& session,
                                const std::filesystem::path& lower);

// Accept, then drop the layer if nothing is left in it, so the session's next run starts a fresh
// layer (at a new path) over the tree as it now is. `dropped` says whether it was.
struct AcceptOutcome {
  AcceptResult result;
  bool dropped = false;
};
Result<AcceptOutcome> accept_and_retire(Overlay& overlay, const std::vector<std::string>& paths,
                                        bool force, const KernelGuard& guard = {});

}  // namespace kernex::workspace
