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

#include <cerrno>
#include <cstring>

#include "child.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {

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
    const int kind = m.kind == MountKind::Overlay ? 2 : mask_dir ? 1 : 0;
    mounts.push_back({m.path.c_str(), m.kind == MountKind::MaskFile ? "/dev/null" : nullptr, kind,
                      m.remount_flags, keep.data(), static_cast<int>(keep.size()), m.data.c_str(),
                      m.data_userns.c_str()});
  }
  std::vector<const char*> open_paths;
  for (const auto& p : open_inside) open_paths.push_back(p.c_str());
  std::vector<int> fds(open_paths.size(), -1);
  const std::string uid_map =
      std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
  const std::string gid_map =
      std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  detail::MountTemplateSpec spec;
  spec.mounts = mounts.data();
  spec.mount_count = static_cast<int>(mounts.size());
  spec.uid_map = uid_map.c_str();
  spec.gid_map = gid_map.c_str();
  spec.read_only_root = 1;
  spec.open_paths = open_paths.data();
  spec.open_count = static_cast<int>(open_paths.size());
  spec.opened_fds = fds.data();

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
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    return fail(
        ErrorCode::Sandbox,
        std::string(
            "cannot create the mount namespace that keeps every mount but the writable grants "
            "read-only, writable grants noexec and .git, rc files and kernel files read-only or "
            "hidden inside them: ") +
            std::strerror(spec.failed_errno));
  }
  // Keep clear of 0-2, which each spawned child overwrites with its stdio before joining.
  auto high = [](int fd) {
    if (fd < 0 || fd >= 3) return fd;
    int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    return moved;
  };
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
