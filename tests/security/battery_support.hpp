// What the escape batteries (tests/security/battery*_test.cpp) share: the throwaway directory their
// $HOME and workspaces live in, policy building and spawning that fail the case rather than the
// process, the check that nothing of a command's process group is left, and a loopback listener for
// the network cases. Each battery keeps its own layout and profiles; only the mechanics are here.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace kernex::battery {

#ifdef KERNEX_ATTACK_DIR
// The multi-call attacker (attacks/attack.cpp): prints OK when an attempt worked, else the errno
// name.
inline const std::string kAttack = KERNEX_ATTACK_DIR "/attack";
#endif

inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh directory `<tmp>/<prefix>-XXXXXX`, canonical (the policies compare real paths) in `root`;
// false when it can't be made.
[[nodiscard]] inline bool make_scratch_root(const std::string& prefix,
                                            std::filesystem::path& root) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return false;
  root = std::filesystem::canonical(tmpl);
  return true;
}

// Points $HOME at the battery's throwaway home for the suite, and back afterwards: the kernel (this
// process) resolves ~/.ssh and ~/.kernex from it.
class HomeOverride {
 public:
  void set(const std::filesystem::path& home) {
    if (const char* h = std::getenv("HOME")) saved_ = h;
    ::setenv("HOME", home.c_str(), 1);
  }
  void restore() const {
    if (!saved_.empty()) ::setenv("HOME", saved_.c_str(), 1);
  }

 private:
  std::string saved_;
};

// The policy `b` builds; a build error fails the case (and throws, as there is nothing to run).
inline sandbox::Policy build_policy(const sandbox::PolicyBuilder& b) {
  auto p = b.Build();
  EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().describe());
  if (!p) throw std::runtime_error("policy build failed");
  return *p;
}

// Runs `argv` under `policy`; a spawn error fails the case and gives an empty result (pid 0).
inline sandbox::SpawnResult spawn_expecting(const sandbox::Policy& policy,
                                            std::vector<std::string> argv,
                                            std::optional<std::chrono::milliseconds> timeout = {}) {
  sandbox::Command cmd;
  cmd.argv = std::move(argv);
  cmd.timeout = timeout;
  auto r = sandbox::spawn(policy, cmd);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
  return r ? *r : sandbox::SpawnResult{};
}

// Everything in the command's process group must be gone: reap what was reparented to us (the
// batteries are subreapers) and wait, bounded, for killed processes to finish exiting.
inline void expect_nothing_left(int pgid) {
  using namespace std::chrono_literals;
  if (pgid <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (::kill(-pgid, 0) == 0) {
    int status = 0;
    if (::waitpid(-1, &status, WNOHANG) <= 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "processes of group " << pgid << " outlived the spawn";
        ::kill(-pgid, SIGKILL);
        return;
      }
      std::this_thread::yield();
    }
  }
}

// spawn_expecting, then expect_nothing_left for the command's group.
inline sandbox::SpawnResult run_leaving_nothing(
    const sandbox::Policy& policy, std::vector<std::string> argv,
    std::optional<std::chrono::milliseconds> timeout = {}) {
  auto r = spawn_expecting(policy, std::move(argv), timeout);
  expect_nothing_left(r.pid);
  return r;
}

// A loopback TCP listener that counts the connections it accepts and answers each with `reply`.
class LoopbackServer {
 public:
  explicit LoopbackServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 8);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LoopbackServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  std::uint16_t port() const { return port_; }
  std::string port_text() const { return std::to_string(port_); }
  int accepted() const { return accepted_; }

 private:
  // Polls in short slices so that the destructor's stop is seen promptly.
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++accepted_;
      char buf[512];
      (void)!::read(c, buf, sizeof(buf));
      (void)!::write(c, reply_.data(), reply_.size());
      ::close(c);
    }
  }
  const std::string reply_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace kernex::battery
