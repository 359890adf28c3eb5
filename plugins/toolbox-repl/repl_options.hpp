// Configuration of the REPL toolbox and the sandbox profile its workers run under.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/sandbox/profile.hpp"
#include "kernex/sandbox/toolbox.hpp"

namespace kernex::repl {

// Plugin config keys (all optional):
//   workspace, profile, protect   as for toolbox-script (the worker's files and working directory)
//   timeout        seconds one call may run, not counting the sub-queries it waits for (default 60)
//   max_output     bytes kept of stdout and of stderr per eval_code (default 1 MiB), then a marker
//   tool_result_max_bytes  the most a tool called from code (tools.call) returns to it: the
//                  whole result up to this, never the model's cut view; past it the call raises
//                  ToolError (default 64 MiB). What reaches the model stays max_output's.
//   memory_mb      address-space limit of a worker (default 2048)
//   cpu_seconds    CPU seconds one call may use (default: timeout; a call gets between this and
//   twice
//                  this, since the worker re-arms RLIMIT_CPU only when less than this is left)
//   max_sessions   live workers before the least recently used one is stopped (default 8)
//   pool_size      workers kept started and idle per sandbox policy, for the few most recently
//                  used ones, so a new session's first call does not wait for python to start;
//                  each is handed to one session only (default 2, 0 turns the pool off)
//   offer          "when_allowed" (default: only runs whose allowed_tools name a REPL tool, such
//                  as `kernex rlm`) or "always"
//   tools          the REPL tools offered (default all: load_context, list_vars, peek, scan,
//                  eval_code, provide_answers); [eval_code] is "code mode": the model writes code
//                  and finds the run's other tools in servers/, with five tool definitions fewer
//                  in every request
//   python         the interpreter (default "python3", resolved on the sandbox's search path)
//   data_dir       the kernel's data dir (the kernel sets it): saved skills
//                  (<data_dir>/repl-skills/<tenant>/<name>) and checkpoints
//                  (<data_dir>/repl-checkpoints/<tenant>/); unset, both stay in memory or refused
struct ReplOptions {
  sandbox::ToolboxRunOptions run;
  std::chrono::milliseconds timeout{60'000};
  std::size_t max_output = 1 << 20;
  std::size_t tool_result_max_bytes = 64u << 20;
  std::uint64_t memory_mb = 2048;
  std::uint64_t cpu_seconds = 60;
  std::size_t max_sessions = 8;
  std::size_t pool_size = 2;
  bool offer_always = false;
  std::vector<std::string> tools;  // empty: all of them
  std::string python = "python3";
  std::filesystem::path data_dir;

  static Result<ReplOptions> from_json(const Json& config);
  // The worker's profile: workspace read-write, no network, python only, limits, plus `grants`
  // read-only (RunHandles::read_grants). A host workspace in `where` (Context::workspace, and its
  // overlay layers) replaces the configured one as the read-write grant and working directory.
  sandbox::SandboxProfile profile(const std::vector<std::string>& grants,
                                  const sandbox::CallWorkspace& where = {}) const;
};

}  // namespace kernex::repl
