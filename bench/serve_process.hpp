// `kernex serve` as a child process of a bench: started with a config, its port read from the one
// "listening on" line it prints, its memory read from /proc, stopped with SIGTERM.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kernex::bench {

class ServeProcess {
 public:
  // Starts `binary serve --config CONFIG --listen 127.0.0.1:0 EXTRA...`, stderr to `log`, and waits
  // up to `timeout` for the listening line. Dies (bench::die) with the log's tail on failure.
  ServeProcess(const std::filesystem::path& binary, const std::filesystem::path& config,
               const std::filesystem::path& log, const std::vector<std::string>& extra = {},
               std::chrono::seconds timeout = std::chrono::seconds(30));
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  pid_t pid() const { return pid_; }
  unsigned short port() const { return port_; }
  // /proc/<pid>/status fields, in KiB (0 once the process is gone).
  long rss_kib() const;
  long peak_rss_kib() const;  // VmHWM
  // SIGTERM, then SIGKILL after `grace`; returns the exit status as waitpid gave it.
  int stop(std::chrono::seconds grace = std::chrono::seconds(20));

 private:
  pid_t pid_ = -1;
  unsigned short port_ = 0;
  std::filesystem::path log_;
};

// The last `bytes` of a file (a child's log), for error messages.
std::string tail_of(const std::filesystem::path& file, std::size_t bytes = 2000);

// Pids of live processes whose argv is exactly `argv` (from /proc/<pid>/cmdline).
std::vector<pid_t> processes_with_argv(const std::vector<std::string>& argv);

}  // namespace kernex::bench
