// Running one command under a Policy: a vfork-style clone, Landlock + seccomp + no caps in the
// child, stdout/stderr/stdin pumped by the parent under one deadline, the whole process group
// killed when the command exits or the deadline passes.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/sandbox/policy.hpp"

namespace kernex::sandbox {

struct Command {
  // argv[0] is resolved to an absolute path (against the policy's search path unless it contains
  // '/'; relative paths with '/' against the working directory) and checked against the allow-list.
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added after the policy's env; hijacking names refused
  std::string stdin_data;                  // written to the child's stdin, then EOF
  std::optional<std::filesystem::path> cwd;          // default: the policy's working dir
  std::optional<std::chrono::milliseconds> timeout;  // default: the profile's
  // Bytes of stdout kept, default: the profile's. A tool called from code raises it to the code's
  // cap on a result, so one policy serves both.
  std::optional<std::size_t> stdout_cap;
  // Fired while the command runs: its whole process group is killed at once and the result says
  // `cancelled` (the output so far is kept). Already fired: nothing is started
  // (ErrorCode::Cancelled).
  std::stop_token stop;
};

struct SpawnResult {
  std::string executable;  // the resolved absolute path that was exec'd
  int pid = 0;             // also the process group id of everything it started
  int exit_code = -1;      // valid when term_signal == 0 and !timed_out
  int term_signal = 0;     // the signal that ended the command, if any (SIGKILL after a timeout)
  bool timed_out = false;
  bool cancelled = false;   // Command::stop fired and the group was killed (term_signal: SIGKILL)
  std::string stdout_data;  // capped; ends with truncation_marker() when truncated
  std::string stderr_data;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::chrono::microseconds wall_time{0};
  std::chrono::microseconds cpu_time{0};  // user + system of the command and its reaped children
  // Peak resident set of the command and its reaped children. Linux folds the spawning process's
  // peak RSS into it at execve (the child starts in the kernel's address space), so it is only
  // reported when it exceeds the kernel's own peak at spawn time; otherwise the true peak is
  // unknown (and smaller).
  std::optional<long> peak_rss_kb;
  bool sandboxed = true;

  bool success() const { return !timed_out && !cancelled && term_signal == 0 && exit_code == 0; }
};

// Text appended to a capped stream: "\n[kernex: output truncated: <n> bytes dropped]\n" style.
std::string truncation_marker(std::size_t dropped_bytes);

// Resolves `command` as spawn() would, without running it: the absolute path, or an error when it
// is not found, not executable or not on the allow-list.
Result<std::filesystem::path> resolve_command(const Policy& policy, const std::string& command,
                                              const std::filesystem::path& cwd);

// Runs `command` to completion. Errors are for refusals and setup failures (not on the allow-list,
// bad env, the sandbox could not be applied) and a stop requested before it started; a command
// that fails, times out or is cancelled while running is a SpawnResult.
Result<SpawnResult> spawn(const Policy& policy, const Command& command);

}  // namespace kernex::sandbox
