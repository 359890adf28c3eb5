// The prepared kernel objects behind a Policy.
#pragma once

#include <linux/filter.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernex/sandbox/policy.hpp"

namespace kernex::sandbox {

// One mount made in the child's private mount namespace, applied shallowest first so an inner mount
// is never covered by an outer one:
// - Bind: the path bound onto itself, then remounted with `remount_flags` when nonzero. Writable
//   grants get MS_NOEXEC|MS_NOSUID|MS_NODEV (nothing written there can be executed or mapped
//   executable); kept-read-only files add MS_RDONLY; a bind without remount only pins a directory
//   (a mount point can't be renamed or removed, so a protected path below it can't be swapped).
// - MaskDir: an empty read-only tmpfs of mode 0 over a directory (neither readable nor writable).
// - MaskFile: /dev/null bound over a file and remounted read-only and nodev, so opening it fails.
//   A MaskDir may keep directories below it (`keep`, grants in a tool area of a hidden kernel dir):
//   each is cloned before the tmpfs covers it and moved back onto a path of traverse-only (0111)
//   directories made in the tmpfs, so nothing else of the masked tree is there to stat, watch or
//   connect to (Landlock mediates none of these).
// - LowerBind: a read-only bind inside an overlaid workspace, taken from the real tree (the
//   overlay's lower layer) rather than through the overlay, and mounted onto the path as the
//   overlay shows it (lower_binds.hpp). Every read-only bind MountPlan makes inside the overlay
//   is one: what the kernel reads and trusts (the real tree) is what sandboxed processes see.
enum class MountKind { Bind, MaskDir, MaskFile, Overlay, LowerBind };
struct ProtectedMount {
  std::string path;
  MountKind kind = MountKind::Bind;
  unsigned long remount_flags =
      0;  // MS_BIND|MS_REMOUNT|... plus the flags the mount already has; 0: none
  std::vector<std::string> keep =
      {};  // MaskDir only: directories below `path` kept visible (none nested)
  // Overlay only: the mount options (lowerdir is `path` itself), and the same for a mount made in
  // a user namespace (overlayfs then keeps its whiteouts and opaque marks in user.* xattrs).
  std::string data = {};
  std::string data_userns = {};
};
inline constexpr std::size_t kMaxKeptInMask = 16;

// The namespace holding only a workspace overlay: every policy over the same layers copies it
// while one of them lives, so all share one overlay superblock. Two overlay mounts of one upper
// layer would each keep stale lookups of the other's writes (a file the other made missing, one it
// deleted still there) and fail to copy up what the other already did.
struct OverlayBase {
  int mntns_fd = -1;
  int userns_fd = -1;  // when an unprivileged kernel needed one
  OverlayBase() = default;
  OverlayBase(const OverlayBase&) = delete;
  OverlayBase& operator=(const OverlayBase&) = delete;
  ~OverlayBase();
};
// The live base for `overlay` (a MountKind::Overlay mount), made when none is.
Result<std::shared_ptr<const OverlayBase>> overlay_base(const ProtectedMount& overlay);

struct Policy::State {
  SandboxProfile profile;  // paths made absolute and canonical
  PolicyStatus status;
  std::filesystem::path private_tmp;
  std::filesystem::path working_dir;
  std::vector<std::filesystem::path> allowed_executables;
  using Env = std::vector<std::pair<std::string, std::string>>;
  Env env;                                           // the child's environment before Command::env
  std::optional<std::filesystem::path> pids_cgroup;  // where per-spawn pids cgroups are made
  std::vector<ProtectedMount> protected_mounts;
  int mntns_fd = -1;   // the mount namespace holding protected_mounts (see mount_template_main)
  int userns_fd = -1;  // its user namespace, when an unprivileged kernel needed one
  std::shared_ptr<const OverlayBase> overlay_base;  // what mntns_fd copied, with an overlay
  int landlock_fd = -1;                             // -1 when not enforced
  std::vector<sock_filter> seccomp_bpf;             // empty when not enforced

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State();
};

// Sets `name` in `env`, in place when it is there already (an environment holds a name once).
inline void set_env(Policy::State::Env& env, const std::string& name, const std::string& value) {
  for (auto& [have, old] : env) {
    if (have == name) {
      old = value;
      return;
    }
  }
  env.emplace_back(name, value);
}

// Built pieces, one file each.
struct LandlockGrant {
  std::filesystem::path path;
  std::uint64_t rights;  // landlock.hpp kRead / kExec / kReadWrite / kDevice
  // >= 0: `path` opened (O_PATH) inside the policy's mount namespace, where an overlay covers the
  // workspace: a rule on the real directory's inode would not apply to the overlay's.
  int fd = -1;
};
// Creates the ruleset fd for the grants on this ABI, or an error naming the path or step that
// failed.
Result<int> build_landlock_ruleset(int abi, const std::vector<LandlockGrant>& grants,
                                   const NetworkPolicy& net);
// The seccomp program for `profile` (its network policy and opt-ins); fills the seccomp fields of
// `status` (listen_allowed, file_watches_allowed, memfd_sealed).
Result<std::vector<sock_filter>> build_seccomp_filter(const SandboxProfile& profile,
                                                      PolicyStatus& status);
// Creates state.mntns_fd/userns_fd with state.protected_mounts applied.
// `open_inside`: paths opened O_PATH inside the namespace once it is built; their fds (caller
// closes) come back in the same order.
Result<void> build_mount_namespace(Policy::State& state,
                                   const std::vector<std::filesystem::path>& open_inside = {},
                                   std::vector<int>* opened = nullptr);

}  // namespace kernex::sandbox
