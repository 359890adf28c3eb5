#include "pids_cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace kernex::sandbox {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

bool has_word(const std::string& text, const std::string& word) {
  for (const auto& w : split(text, ' ')) {
    if (w == word || w == word + "\n") return true;
  }
  return false;
}

struct Mount {
  fs::path root;
  fs::path point;
};

// mountinfo: "id parent maj:min root mountpoint opts [optional...] - fstype source superopts"
std::optional<Mount> find_mount(const std::string& fstype, const std::string& super_option) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto left = split(line.substr(0, dash), ' ');
    auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3 || right[0] != fstype) continue;
    if (!super_option.empty()) {
      auto opts = split(right[2], ',');
      if (std::find(opts.begin(), opts.end(), super_option) == opts.end()) continue;
    }
    return Mount{left[3], left[4]};
  }
  return std::nullopt;
}

std::optional<fs::path> under_mount(const Mount& m, const fs::path& cgroup_path) {
  fs::path rel = cgroup_path.lexically_relative(m.root);
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  fs::path base = (m.point / rel).lexically_normal();
  if (::access(base.c_str(), W_OK) != 0) return std::nullopt;
  return base;
}

}  // namespace

std::optional<fs::path> find_pids_cgroup_base() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::optional<fs::path> v2_path;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const fs::path path = line.substr(second + 1);
    if (controllers.empty()) {
      v2_path = path;
      continue;
    }
    auto list = split(controllers, ',');
    if (std::find(list.begin(), list.end(), "pids") == list.end()) continue;
    if (auto m = find_mount("cgroup", "pids")) {
      if (auto base = under_mount(*m, path)) return base;
    }
  }
  if (v2_path) {
    if (auto m = find_mount("cgroup2", "")) {
      if (auto base = under_mount(*m, *v2_path)) {
        std::ifstream control(*base / "cgroup.subtree_control");
        std::string enabled((std::istreambuf_iterator<char>(control)), std::istreambuf_iterator<char>());
        if (has_word(enabled, "pids")) return base;
      }
    }
  }
  return std::nullopt;
}

Result<SpawnCgroup> SpawnCgroup::create(const fs::path& base, std::uint64_t max_processes) {
  static std::atomic<unsigned long> sequence{0};
  fs::path dir = base / ("kernex-sandbox-" + std::to_string(::getpid()) + "-" + std::to_string(++sequence));
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return fail(ErrorCode::Sandbox, "cannot create the pids cgroup '" + dir.string() + "': " + std::strerror(errno));
  }
  {
    std::ofstream max(dir / "pids.max");
    max << max_processes;
    max.flush();
    if (!max) {
      ::rmdir(dir.c_str());
      return fail(ErrorCode::Sandbox, "cannot write '" + (dir / "pids.max").string() + "'");
    }
  }
  int fd = ::open((dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0 && fd < 3) {  // keep clear of the child's stdio slots
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    fd = high;
  }
  if (fd < 0) {
    int err = errno;
    ::rmdir(dir.c_str());
    return fail(ErrorCode::Sandbox, "cannot open '" + (dir / "cgroup.procs").string() + "': " + std::strerror(err));
  }
  return SpawnCgroup(std::move(dir), fd);
}

SpawnCgroup::SpawnCgroup(SpawnCgroup&& other) noexcept
    : dir_(std::move(other.dir_)), procs_fd_(std::exchange(other.procs_fd_, -1)) {
  other.dir_.clear();
}

SpawnCgroup::~SpawnCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (dir_.empty()) return;
  // Members were sent SIGKILL with the process group; removal fails (EBUSY) until they have exited.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::rmdir(dir_.c_str()) != 0 && errno == EBUSY && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace kernex::sandbox
