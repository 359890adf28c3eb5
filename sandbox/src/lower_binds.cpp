#include "lower_binds.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "mount_syscalls.hpp"

namespace kernex::sandbox::detail {
namespace {

// linux/mount.h, spelled out (it clashes with sys/mount.h on older glibc).
constexpr unsigned kAtRecursive = 0x8000;
constexpr unsigned kMoveToEmpty = 0x40;  // MOVE_MOUNT_T_EMPTY_PATH
constexpr std::uint64_t kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4, kAttrNoexec = 0x8;

struct Attr {
  std::uint64_t attr_set, attr_clr, propagation, userns_fd;
};

__attribute__((no_sanitize("address", "undefined"))) const ChildMount* overlay_of(
    const MountTemplateSpec* spec) {
  for (int i = 0; i < spec->mount_count; ++i)
    if (spec->mounts[i].kind == 2) return &spec->mounts[i];
  return nullptr;
}

// The mount flags a ProtectedMount's remount asks for, as mount_setattr attributes (read-only
// always: a lower bind is never writable).
__attribute__((no_sanitize("address", "undefined"))) std::uint64_t attrs_of(const ChildMount& m) {
  std::uint64_t set = kAttrRdonly | kAttrNosuid | kAttrNodev;
  if ((m.remount_flags & MS_NOEXEC) != 0) set |= kAttrNoexec;
  return set;
}

__attribute__((no_sanitize("address", "undefined"))) bool clone_all(MountTemplateSpec* spec) {
  for (int i = 0; i < spec->mount_count; ++i) {
    const ChildMount& m = spec->mounts[i];
    if (m.kind != 3) continue;
    spec->failed_mount = i;
    long fd = syscall(SYS_open_tree, AT_FDCWD, m.path,
                      kOpenTreeClone | O_CLOEXEC | kAtRecursive | AT_SYMLINK_NOFOLLOW);
    if (fd < 0) return false;
    spec->lower_fds[i] = static_cast<int>(fd);
    Attr attr{attrs_of(m), 0, 0, 0};
    if (syscall(SYS_mount_setattr, static_cast<int>(fd), "", AT_EMPTY_PATH | kAtRecursive, &attr,
                sizeof(attr)) != 0)
      return false;
  }
  spec->failed_mount = -1;
  return true;
}

}  // namespace

__attribute__((no_sanitize("address", "undefined"))) bool clone_lowers(MountTemplateSpec* spec,
                                                                       bool overlay_mounted) {
  bool any = false;
  for (int i = 0; i < spec->mount_count; ++i) any = any || spec->mounts[i].kind == 3;
  if (!any) return true;
  const ChildMount* overlay = overlay_of(spec);
  if (overlay == nullptr || spec->lower_fds == nullptr) {
    errno = EINVAL;
    return false;
  }
  if (!overlay_mounted) return clone_all(spec);
  // This namespace is a private copy of the overlay's base: the overlay is lifted off here only,
  // the real tree cloned, and a clone of the same overlay (one superblock, shared with every
  // policy over these layers) put back.
  long ov = syscall(SYS_open_tree, AT_FDCWD, overlay->path, kOpenTreeClone | O_CLOEXEC);
  if (ov < 0) return false;
  bool ok = syscall(SYS_umount2, overlay->path, MNT_DETACH) == 0 && clone_all(spec);
  const int saved = errno;
  const bool back = syscall(SYS_move_mount, static_cast<int>(ov), "", AT_FDCWD, overlay->path,
                            kMoveMountFEmptyPath) == 0;
  syscall(SYS_close, static_cast<int>(ov));
  if (ok && !back) return false;
  errno = saved;
  return ok && back;
}

__attribute__((no_sanitize("address", "undefined"))) bool attach_lower(MountTemplateSpec* spec,
                                                                       int i) {
  spec->failed_mount = i;
  const int tree = spec->lower_fds[i];
  // Named through the overlay without following a symlink: one an earlier run left where a
  // directory of the real path is would carry the bind elsewhere.
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long target = syscall(SYS_openat2, AT_FDCWD, spec->mounts[i].path, &how, sizeof(how));
  if (target < 0) return false;
  struct stat real {};
  struct stat shown {};
  bool ok = syscall(SYS_newfstatat, tree, "", &real, AT_EMPTY_PATH) == 0 &&
            syscall(SYS_newfstatat, static_cast<int>(target), "", &shown, AT_EMPTY_PATH) == 0;
  if (ok && (real.st_mode & S_IFMT) != (shown.st_mode & S_IFMT)) {
    errno = S_ISDIR(real.st_mode) ? ENOTDIR : EISDIR;
    ok = false;
  }
  ok = ok && syscall(SYS_move_mount, tree, "", static_cast<int>(target), "",
                     kMoveMountFEmptyPath | kMoveToEmpty) == 0;
  const int saved = errno;
  syscall(SYS_close, static_cast<int>(target));
  errno = saved;
  if (ok) spec->failed_mount = -1;
  return ok;
}

}  // namespace kernex::sandbox::detail
