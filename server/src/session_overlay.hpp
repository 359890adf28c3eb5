// Overlay mode in kernex serve (`workspace: {mode: overlay}`): each session's runs work over its
// workspace through an overlay layer under <data_dir>/overlays/tenants/<tenant>, so tenants never
// share a layer and one tenant's session id cannot name another's; the `workspace_changed` event
// after each tool call that wrote into the layer; and the workspace routes.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "http_types.hpp"
#include "kernex/kernel.hpp"
#include "run_state.hpp"

namespace kernex::server {

class Runs;

// Where a tenant's sessions keep their layers.
std::filesystem::path tenant_overlays(const Config& config, const std::string& tenant);

// Removes every layer of the session (DELETE /v1/sessions/{s}); none is fine.
Result<void> forget_session_overlays(const Config& config, const std::string& tenant,
                                     const std::string& session);

// In overlay mode (and for a run of a session): the session's layer over `workspace` (made when
// missing) set as options.workspace and workspace_layers, and the sink wrapped to append
// `workspace_changed` {run_id, paths} after each tool result that changed the upper layer.
Result<void> use_session_overlay(const Config& config, RunState& run, const std::string& session,
                                 const std::filesystem::path& workspace, RunOptions& options);

// GET/POST /v1/sessions/{session}/workspace[/diff|/accept|/reject] for `tenant`; `rest` is what
// follows "workspace" in the path.
HttpReply workspace_route(const HttpRequest& req, Runs& runs, const std::string& tenant,
                          const std::string& session, const std::vector<std::string>& rest);

}  // namespace kernex::server
