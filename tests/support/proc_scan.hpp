// Finding a sandboxed tool's processes from outside, for cancel tests: by working directory (each
// test's workspace is unique) and by process group, reading /proc (root may read every cwd link).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace kernex::testing {

struct ProcStat {
  char state = '?';
  pid_t pgrp = 0;
};

// State and process group from /proc/PID/stat; state '?' when the process is gone.
inline ProcStat proc_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(text.substr(close + 1));
  ProcStat st;
  pid_t ppid = 0;
  rest >> st.state >> ppid >> st.pgrp;
  return st;
}

template <class Fn>
void for_each_pid(Fn fn) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    fn(static_cast<pid_t>(std::stoi(name)));
  }
}

// Process groups of the live (not zombie) processes whose working directory is `cwd`.
inline std::set<pid_t> groups_working_in(const std::filesystem::path& cwd) {
  std::set<pid_t> groups;
  const auto want = std::filesystem::weakly_canonical(cwd);
  for_each_pid([&](pid_t pid) {
    std::error_code ec;
    const auto link = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
    if (ec || link != want) return;
    const ProcStat st = proc_stat(pid);
    if (st.state != '?' && st.state != 'Z' && st.state != 'X') groups.insert(st.pgrp);
  });
  return groups;
}

// Live (not zombie) members of process group `pgid`.
inline int live_members(pid_t pgid) {
  int n = 0;
  for_each_pid([&](pid_t pid) {
    const ProcStat st = proc_stat(pid);
    if (st.pgrp == pgid && st.state != '?' && st.state != 'Z' && st.state != 'X') ++n;
  });
  return n;
}

// Waits until no group in `groups` has a live member, at most until `deadline`; true when none has.
inline bool groups_gone_by(const std::set<pid_t>& groups,
                           std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    bool any = false;
    for (pid_t g : groups) any = any || live_members(g) > 0;
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
}

}  // namespace kernex::testing
