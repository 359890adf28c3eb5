// Where serve runs record their trajectories: one folder per tenant
// (<data_dir>/trajectories/serve/<tenant>), whose day segments (kernex/trajectory_segments.hpp)
// every session of the tenant shares, so a new session costs no folder or file of its own. Each
// run_start names its session, so forgetting a session cuts exactly its runs out of the shared
// segments. Data dirs from before kept a folder per session; forgetting removes that too.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kernex/config.hpp"
#include "kernex/error.hpp"
#include "kernex/trajectory.hpp"

namespace kernex::server {

std::filesystem::path tenant_trajectories(const Config& config, const std::string& tenant);

// A trajectory in the tenant's folder whose run_start carries {"session_id": session} (no field
// for a run without a session).
Result<std::shared_ptr<Trajectory>> open_session_trajectory(const Config& config,
                                                            const std::string& tenant,
                                                            const std::string& session);

// Removes every run of `session` from the tenant's day segments, and the session's folder of an
// older data dir. How many runs of the shared segments that was.
Result<std::size_t> forget_session_trajectories(const Config& config, const std::string& tenant,
                                                const std::string& session);

}  // namespace kernex::server
