// Sessions' workspaces must be reachable before a node takes runs: in cluster mode a session's
// runs land on any node, so `serve.workspaces` (and each tenant's own workspace) names shared
// storage every node mounts. A node that cannot make, write and remove a file there refuses to
// start, instead of running a session's next message without its files.
#pragma once

#include "kernex/error.hpp"
#include "kernex/server/serve_config.hpp"

namespace kernex::server {

// Makes the workspace roots if missing and write-probes each (a fresh file: created exclusively,
// written, synced, removed). `cluster`: also warns when the root is this node's own data dir.
Result<void> probe_workspaces(const ServeConfig& config, const std::filesystem::path& data_dir,
                              bool cluster);

}  // namespace kernex::server
