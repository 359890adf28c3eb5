// A long-lived sandboxed child with stdin/stdout pipes, for line protocols such as MCP over stdio.
// Same child setup as spawn() (session, Landlock, seccomp, no capabilities, PDEATHSIG), but the
// caller talks to the process for as long as it likes; every read and write takes a deadline, so a
// child that hangs never blocks the caller past it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace kernex::sandbox {

struct ProcessOptions {
  // Called with each line the child writes to stderr (without the newline; long lines are cut at
  // stderr_line_cap). stderr is drained whenever the caller waits on the child (to read or to
  // write), so a chatty child never blocks on a full pipe while the caller waits for stdout.
  // Unset: stderr is discarded.
  std::function<void(std::string_view line)> on_stderr_line;
  std::size_t stderr_line_cap = 4096;
};

struct ExitStatus {
  int exit_code = -1;   // valid when term_signal == 0
  int term_signal = 0;  // e.g. SIGKILL when the process had to be killed
};

class SandboxedProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts `command` (Command::stdin_data and Command::timeout are ignored: the process runs until
  // killed or it exits). The Policy is kept alive with the process (its private TMPDIR too).
  static Result<SandboxedProcess> start(const Policy& policy, const Command& command,
                                        ProcessOptions options = {});

  SandboxedProcess(SandboxedProcess&&) noexcept;
  SandboxedProcess& operator=(SandboxedProcess&&) noexcept;
  // Kills the whole process group and reaps the child.
  ~SandboxedProcess();

  int pid() const;                        // also the process group and session id
  const std::string& executable() const;  // the resolved absolute path that was exec'd

  // Writes all of `data` to the child's stdin before `deadline`. ErrorCode::Limit on timeout
  // (also when a child that is still running stopped reading), ErrorCode::Io when the child
  // exited with input left unwritten. Never raises SIGPIPE.
  // Both calls end at once with ErrorCode::Cancelled when `stop` fires while they wait (the
  // protocol is then out of step: callers kill the process).
  Result<void> write(std::string_view data, Clock::time_point deadline, std::stop_token stop = {});
  // The next '\n'-terminated line from stdout, without the '\n' (a trailing '\r' is kept).
  // ErrorCode::Limit when the deadline passes or the line grows beyond `max_line` bytes (the
  // stream is then out of step; callers should kill the process), ErrorCode::Io at end of output
  // (or when waiting itself fails).
  Result<std::string> read_line(Clock::time_point deadline, std::size_t max_line,
                                std::stop_token stop = {});

  // Signals end of input (closes stdin).
  void close_stdin();
  // True while the child has not been reaped and has not exited.
  bool running();
  // SIGKILL to the whole process group (idempotent).
  void kill();
  // Waits for the child to exit until `deadline`, then kills the group; always reaps.
  ExitStatus wait(Clock::time_point deadline);

 private:
  struct Impl;
  explicit SandboxedProcess(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex::sandbox
