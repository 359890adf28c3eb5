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
#include <memory>
#include <mutex>
#include <cstdlib>

#include "owner_tag.hpp"

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
        std::string enabled((std::istreambuf_iterator<char>(control)),
                            std::istreambuf_iterator<char>());
        if (has_word(enabled, "pids")) return base;
      }
    }
  }
  return std::nullopt;
}

struct SpawnCgroup::Slot {
  fs::path base;
  fs::path dir;
  int procs_fd = -1;
  int current_fd = -1;  // pids.current, read on release
  std::uint64_t max = 0;
};

namespace {

constexpr std::string_view kPrefix = "kernex-sandbox-";

int above_stdio(int fd) {
  if (fd < 0 || fd >= 3) return fd;  // keep clear of the child's stdio slots
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return high;
}

bool write_max(const fs::path& dir, std::uint64_t max) {
  const int fd = ::open((dir / "pids.max").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string text = std::to_string(max);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

void destroy(SpawnCgroup::Slot* slot) {
  if (slot->procs_fd >= 0) ::close(slot->procs_fd);
  if (slot->current_fd >= 0) ::close(slot->current_fd);
  ::rmdir(slot->dir.c_str());
  delete slot;
}

// Free cgroups, all empty. Never destroyed (a SandboxedProcess may outlive static destructors); the
// ones still here at a normal exit are removed by an atexit handler.
struct Pool {
  std::mutex mutex;
  pid_t owner = 0;
  std::vector<SpawnCgroup::Slot*> free;
  std::vector<fs::path> swept;  // bases already cleared of dead kernels' cgroups
};

Pool& pool() {
  static Pool* p = [] {
    auto* made = new Pool;
    std::atexit([] {
      Pool& q = pool();
      std::lock_guard lock(q.mutex);
      if (q.owner != ::getpid()) return;
      for (auto* slot : q.free) destroy(slot);
      q.free.clear();
    });
    return made;
  }();
  return *p;
}

// Once per base: the cgroups of kernels that died without cleaning up. Their members died with them
// (their PID namespace died with the kernel), so they are empty and rmdir removes them.
void sweep_dead_owners(Pool& p, const fs::path& base) {
  if (std::find(p.swept.begin(), p.swept.end(), base) != p.swept.end()) return;
  p.swept.push_back(base);
  detail::for_each_stale(base, kPrefix, [](const fs::path& dir) { ::rmdir(dir.c_str()); });
}

Result<SpawnCgroup::Slot*> make_slot(const fs::path& base, std::uint64_t max) {
  static std::atomic<unsigned long> sequence{0};
  auto slot = std::make_unique<SpawnCgroup::Slot>();
  slot->base = base;
  slot->dir =
      base / (std::string(kPrefix) + detail::owner_tag() + "-" + std::to_string(++sequence));
  if (::mkdir(slot->dir.c_str(), 0700) != 0) {
    return fail(ErrorCode::Sandbox, "cannot create the pids cgroup '" + slot->dir.string() +
                                        "': " + std::strerror(errno));
  }
  slot->procs_fd = above_stdio(::open((slot->dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  slot->current_fd =
      above_stdio(::open((slot->dir / "pids.current").c_str(), O_RDONLY | O_CLOEXEC));
  if (slot->procs_fd < 0 || slot->current_fd < 0 || !write_max(slot->dir, max)) {
    const int err = errno;
    destroy(slot.release());
    return fail(ErrorCode::Sandbox, "cannot set up the pids cgroup under '" + base.string() +
                                        "': " + std::strerror(err));
  }
  slot->max = max;
  return slot.release();
}

bool is_empty(const SpawnCgroup::Slot& slot) {
  char buf[32];
  const ssize_t n = ::pread(slot.current_fd, buf, sizeof(buf), 0);
  return n >= 1 && buf[0] == '0' && (n == 1 || buf[1] == '\n');
}

}  // namespace

Result<SpawnCgroup> SpawnCgroup::create(const fs::path& base, std::uint64_t max_processes) {
  Pool& p = pool();
  {
    std::lock_guard lock(p.mutex);
    if (p.owner != ::getpid()) {  // a forked copy: those cgroups belong to the parent
      p.owner = ::getpid();
      p.free.clear();
      p.swept.clear();
    }
    sweep_dead_owners(p, base);
    for (auto it = p.free.begin(); it != p.free.end(); ++it) {
      Slot* slot = *it;
      if (slot->base != base) continue;
      p.free.erase(it);
      if (slot->max != max_processes) {
        if (!write_max(slot->dir, max_processes)) {
          destroy(slot);
          break;
        }
        slot->max = max_processes;
      }
      return SpawnCgroup(slot);
    }
  }
  KERNEX_ASSIGN_OR_RETURN(auto made, make_slot(base, max_processes));
  return SpawnCgroup(made);
}

int SpawnCgroup::procs_fd() const { return slot_ != nullptr ? slot_->procs_fd : -1; }

SpawnCgroup::~SpawnCgroup() {
  if (slot_ == nullptr) return;
  if (is_empty(*slot_)) {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    if (p.owner == ::getpid()) {
      p.free.push_back(slot_);
      return;
    }
  }
  // Members were sent SIGKILL; removal fails (EBUSY) until they have exited.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!is_empty(*slot_) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  destroy(slot_);
}

}  // namespace kernex::sandbox
