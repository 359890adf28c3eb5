#include "serve_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench_util.hpp"

extern char** environ;

namespace kernex::bench {

namespace fs = std::filesystem;

namespace {

long status_field_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return 0;
}

// Reads stdout until the listening line; returns the port, 0 on EOF or timeout.
unsigned short read_port(int fd, std::chrono::seconds timeout) {
  const std::string marker = "listening on http://127.0.0.1:";
  std::string seen;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return 0;
    seen.append(buf, static_cast<std::size_t>(n));
    if (auto at = seen.find(marker);
        at != std::string::npos && seen.find('\n', at) != std::string::npos) {
      return static_cast<unsigned short>(std::atoi(seen.c_str() + at + marker.size()));
    }
  }
  return 0;
}

}  // namespace

std::string tail_of(const fs::path& file, std::size_t bytes) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

ServeProcess::ServeProcess(const fs::path& binary, const fs::path& config, const fs::path& log,
                           const std::vector<std::string>& extra, std::chrono::seconds timeout)
    : log_(log) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) die("serve", "pipe failed");
  const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (err < 0) die("serve", "cannot create " + log.string());
  std::vector<std::string> args = {binary.string(), "serve",    "--config",
                                   config.string(), "--listen", "127.0.0.1:0"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err, 2);
  const int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err);
  if (rc != 0) die("serve", "cannot start " + binary.string() + ": " + std::strerror(rc));
  port_ = read_port(out[0], timeout);
  ::close(out[0]);  // later stdout writes get EPIPE; the contract prints one line only
  if (port_ == 0) {
    stop(std::chrono::seconds(2));
    die("serve", "kernex serve printed no listening line; its log ends:\n" + tail_of(log_));
  }
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0) stop();
}

long ServeProcess::rss_kib() const { return status_field_kib(pid_, "VmRSS"); }
long ServeProcess::peak_rss_kib() const { return status_field_kib(pid_, "VmHWM"); }

int ServeProcess::stop(std::chrono::seconds grace) {
  if (pid_ <= 0) return 0;
  ::kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = Clock::now() + grace;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(5));  // polling a child's exit, no event to wait on
  }
  pid_ = -1;
  return status;
}

std::vector<pid_t> processes_with_argv(const std::vector<std::string>& argv) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int fd = ::open((entry.path() / "cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[513];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';  // a truncated command line still ends in a terminator
    std::vector<std::string> args;
    for (ssize_t at = 0; at < n;) {
      args.emplace_back(buf + at);
      at += static_cast<ssize_t>(args.back().size()) + 1;
    }
    // argv[0] by its base name: the sandbox may exec the resolved path.
    if (args.size() != argv.size() || args.empty() ||
        fs::path(args[0]).filename() != fs::path(argv[0]).filename()) {
      continue;
    }
    if (std::equal(args.begin() + 1, args.end(), argv.begin() + 1))
      found.push_back(std::atoi(name.c_str()));
  }
  return found;
}

}  // namespace kernex::bench
