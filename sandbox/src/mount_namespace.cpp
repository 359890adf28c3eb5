// The per-policy mount namespace: every mount read-only but the writable grants (Landlock has no
// right for chmod, chown or utimensat, so only a read-only mount stops them), writable grants
// remounted noexec, .git, rc files and kernel files kept read-only or masked inside them (see
// ProtectedMount). Creating and tearing down a mount namespace costs milliseconds (measured ~3.5 ms
// per spawn here), so it is built once and joined with setns() by each spawn.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "child.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {

namespace {

// Keep clear of 0-2, which each spawned child overwrites with its stdio before joining.
int high(int fd) {
  if (fd < 0 || fd >= 3) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

// Runs mount_template_main on `spec` and waits for it. An error when it failed: nothing it opened
// is left open but the caller's `opened_fds`, which the caller closes.
Result<void> run_template(detail::MountTemplateSpec& spec) {
  const std::string uid_map =
      std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
  const std::string gid_map =
      std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  spec.uid_map = uid_map.c_str();
  spec.gid_map = gid_map.c_str();
  constexpr std::size_t kStack = 64 * 1024;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED)
    return fail(ErrorCode::Sandbox, std::string("mmap failed: ") + std::strerror(errno));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(detail::mount_template_main, static_cast<char*>(stack) + kStack,
                      CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &spec);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  ::munmap(stack, kStack);
  if (pid < 0)
    return fail(ErrorCode::Sandbox, std::string("clone failed: ") + std::strerror(clone_errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || spec.mntns_fd < 0) {
    if (spec.mntns_fd >= 0) ::close(spec.mntns_fd);
    if (spec.userns_fd >= 0) ::close(spec.userns_fd);
    return fail(ErrorCode::Sandbox, std::strerror(spec.failed_errno));
  }
  return {};
}

// Why a mount inside the workspace overlay could not be made: the overlay shows something else
// where the kernel keeps a real file read-only or hidden (an earlier run wrote over it before the
// kernel knew it); nullopt for a mount outside the overlay.
std::optional<std::string> lower_bind_failure(const Policy::State& state, int index) {
  if (index < 0 || static_cast<std::size_t>(index) >= state.protected_mounts.size()) return {};
  const ProtectedMount& m = state.protected_mounts[static_cast<std::size_t>(index)];
  const auto overlay =
      std::find_if(state.protected_mounts.begin(), state.protected_mounts.end(),
                   [](const ProtectedMount& o) { return o.kind == MountKind::Overlay; });
  if (m.kind != MountKind::LowerBind &&
      (overlay == state.protected_mounts.end() || !m.path.starts_with(overlay->path + "/")))
    return {};
  return "the workspace overlay shadows '" + m.path +
         "', which the kernel keeps read-only from the real tree (or hidden): an earlier run "
         "left a whiteout, a symlink or another type over it (or over a directory above it) in "
         "the overlay's upper layer. Review it (`kernex workspace status`) and reject it, or "
         "land it with `kernex workspace accept --force PATH`";
}

}  // namespace

OverlayBase::~OverlayBase() {
  if (mntns_fd >= 0) ::close(mntns_fd);
  if (userns_fd >= 0) ::close(userns_fd);
}

Result<std::shared_ptr<const OverlayBase>> overlay_base(const ProtectedMount& overlay) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const OverlayBase>> bases;
  const std::string key = overlay.path + '\0' + overlay.data;
  std::lock_guard lock(mutex);
  std::erase_if(bases, [](const auto& entry) { return entry.second.expired(); });
  if (auto live = bases[key].lock()) return live;
  const detail::ChildMount mount{
      overlay.path.c_str(),       nullptr, 2, 0, nullptr, 0, overlay.data.c_str(),
      overlay.data_userns.c_str()};
  detail::MountTemplateSpec spec;
  spec.mounts = &mount;
  spec.mount_count = 1;
  if (auto made = run_template(spec); !made) {
    return fail(ErrorCode::Sandbox,
                "cannot mount the workspace overlay over '" + overlay.path + "'", made.error());
  }
  auto base = std::make_shared<OverlayBase>();
  base->mntns_fd = high(spec.mntns_fd);
  base->userns_fd = high(spec.userns_fd);
  if (base->mntns_fd < 0 || (spec.userns_fd >= 0 && base->userns_fd < 0)) {
    return fail(ErrorCode::Sandbox,
                std::string("cannot keep the overlay's namespace fd: ") + std::strerror(errno));
  }
  bases[key] = base;
  return base;
}

Result<void> build_mount_namespace(Policy::State& state,
                                   const std::vector<std::filesystem::path>& open_inside,
                                   std::vector<int>* opened) {
  std::vector<detail::ChildMount> mounts;
  std::vector<std::vector<const char*>> keeps;  // the C strings of each mount's `keep`
  keeps.reserve(state.protected_mounts.size());
  for (const auto& m : state.protected_mounts) {
    const bool mask_dir = m.kind == MountKind::MaskDir;
    auto& keep = keeps.emplace_back();
    for (const auto& k : m.keep) keep.push_back(k.c_str());
    const int kind = m.kind == MountKind::Overlay     ? 2
                     : m.kind == MountKind::LowerBind ? 3
                     : mask_dir                       ? 1
                                                      : 0;
    mounts.push_back({m.path.c_str(), m.kind == MountKind::MaskFile ? "/dev/null" : nullptr, kind,
                      m.remount_flags, keep.data(), static_cast<int>(keep.size()), m.data.c_str(),
                      m.data_userns.c_str()});
    if (kind == 2) {
      KERNEX_ASSIGN_OR_RETURN(state.overlay_base, overlay_base(m));
    }
  }
  std::vector<const char*> open_paths;
  for (const auto& p : open_inside) open_paths.push_back(p.c_str());
  std::vector<int> fds(open_paths.size(), -1);
  std::vector<int> lower_fds(mounts.size(), -1);
  detail::MountTemplateSpec spec;
  spec.lower_fds = lower_fds.data();
  spec.mounts = mounts.data();
  spec.mount_count = static_cast<int>(mounts.size());
  spec.read_only_root = 1;
  spec.open_paths = open_paths.data();
  spec.open_count = static_cast<int>(open_paths.size());
  spec.opened_fds = fds.data();
  if (state.overlay_base) {
    spec.base_mntns = state.overlay_base->mntns_fd;
    spec.base_userns = state.overlay_base->userns_fd;
  }
  auto made = run_template(spec);
  for (int fd : lower_fds) {
    if (fd >= 0) ::close(fd);  // attached (the namespace keeps it) or dropped
  }
  if (!made) {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    if (auto shadowed = lower_bind_failure(state, spec.failed_mount))
      return fail(ErrorCode::Sandbox, *shadowed, made.error());
    return fail(
        ErrorCode::Sandbox,
        "cannot create the mount namespace that keeps every mount but the writable grants "
        "read-only, writable grants noexec and .git, rc files and kernel files read-only or "
        "hidden inside them: " +
            made.error().message);
  }
  state.status.read_only_root = spec.read_only_errno == 0;
  if (!state.status.read_only_root) {
    state.status.warnings.push_back(
        std::string("the mounts outside the writable grants could not be made read-only "
                    "(mount_setattr needs Linux 5.12): a command can chmod, chown and "
                    "touch files it owns outside its grants: ") +
        std::strerror(spec.read_only_errno));
  }
  if (opened != nullptr) {
    *opened = std::move(fds);
  } else {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  state.mntns_fd = high(spec.mntns_fd);
  state.userns_fd = high(spec.userns_fd);
  if (state.mntns_fd < 0 || (spec.userns_fd >= 0 && state.userns_fd < 0)) {
    return fail(ErrorCode::Sandbox,
                std::string("cannot keep the mount namespace fd: ") + std::strerror(errno));
  }
  return {};
}

}  // namespace kernex::sandbox
