// Runs bin/kernex as a user would, for the CLI suites.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace kernex::testing {

struct CliOutcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// This process's environment without KERNEX_CONFIG, so no config leaks in from the caller's shell.
inline std::map<std::string, std::string> clean_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  env.erase("KERNEX_CONFIG");
  return env;
}

// A program started by start_program, its output going to files in its directory.
struct StartedProgram {
  std::string program;
  pid_t pid = -1;
  std::filesystem::path out, err;
};

// Starts `program` with `args` and exactly `env`. Output goes to files in `dir`, not pipes, so a
// chatty child can never block on a full pipe.
inline StartedProgram start_program(const std::string& program, const std::filesystem::path& dir,
                                    const std::map<std::string, std::string>& env,
                                    const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  StartedProgram started{program, -1, dir / "stdout", dir / "stderr"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, started.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, started.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  const int rc =
      posix_spawn(&started.pid, program.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot spawn " << program;
  if (rc != 0) started.pid = -1;
  return started;
}

// Waits for a started program; with a `limit`, one still running then is killed (SIGKILL) and
// the test fails, so a program that hangs cannot hang the suite.
inline CliOutcome finish_program(const StartedProgram& started,
                                 std::optional<std::chrono::milliseconds> limit = std::nullopt) {
  CliOutcome o;
  if (started.pid < 0) return o;
  if (limit) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, started.pid, 0));
    EXPECT_GE(pidfd, 0) << "pidfd_open failed";
    pollfd exited{pidfd, POLLIN, 0};
    if (pidfd >= 0 && ::poll(&exited, 1, static_cast<int>(limit->count())) == 0) {
      ADD_FAILURE() << started.program << " still ran after " << limit->count()
                    << " ms: killed (a hang?)";
      ::kill(started.pid, SIGKILL);
    }
    if (pidfd >= 0) ::close(pidfd);
  }
  int status = 0;
  EXPECT_EQ(waitpid(started.pid, &status, 0), started.pid);
  EXPECT_TRUE(WIFEXITED(status)) << started.program << " did not exit normally (signal?)";
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(started.out);
  o.err = slurp(started.err);
  return o;
}

// Runs `program` to its end, as start_program and finish_program do.
inline CliOutcome run_program(const std::string& program, const std::filesystem::path& dir,
                              const std::map<std::string, std::string>& env,
                              const std::vector<std::string>& args) {
  return finish_program(start_program(program, dir, env, args));
}

// Runs KERNEX_CLI, as run_program does.
inline CliOutcome run_cli(const std::filesystem::path& dir,
                          const std::map<std::string, std::string>& env,
                          const std::vector<std::string>& args) {
  return run_program(KERNEX_CLI, dir, env, args);
}

}  // namespace kernex::testing
