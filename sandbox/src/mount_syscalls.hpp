// The new mount API's syscall numbers and flags (x86-64 and aarch64 share them), for C libraries
// whose headers predate it: the sandbox calls them through syscall(2).
#pragma once

#include <sys/mount.h>
#include <sys/syscall.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

namespace kernex::sandbox::detail {

// linux/mount.h's flags, spelled out (it clashes with sys/mount.h on older glibc).
inline constexpr unsigned kOpenTreeClone = 1;           // OPEN_TREE_CLONE
inline constexpr unsigned kMoveMountFEmptyPath = 0x04;  // MOVE_MOUNT_F_EMPTY_PATH

}  // namespace kernex::sandbox::detail
