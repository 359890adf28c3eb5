// Read-only binds from the real tree under a workspace overlay (ChildMount kind 3, see
// MountKind::LowerBind): a kernel file, trusted skill folder, .git or rc file inside an overlaid
// workspace is bound from the lower layer, never through the overlay, so nothing an earlier run
// left in the upper layer over it (a rewritten file, a rename into it, a whiteout, an opaque or
// redirected directory) is what a sandboxed process sees or runs. The kernel reads and trusts the
// real tree; the sandbox now shows exactly those bytes.
//
// Runs in the mount template child (raw syscalls only, no allocation): clone_lowers() takes a
// detached clone of every kind-3 path while the real tree is visible (before the overlay is
// mounted, or with the overlay of a copied base namespace lifted off and put back), attach_lower()
// mounts one onto the overlay's path, refusing a path the overlay has as a symlink or as another
// type.
#pragma once

#include "child.hpp"

namespace kernex::sandbox::detail {

// Fills spec->lower_fds[i] for every kind-3 mount i. `overlay_mounted`: the overlay (kind 2) is
// already on its path (a copy of the overlay's base namespace) and is lifted off meanwhile.
bool clone_lowers(MountTemplateSpec* spec, bool overlay_mounted);

// Mounts the clone of mount `i` onto its path as the overlay shows it (no symlink followed); on
// failure errno says why (ENOTDIR/EISDIR: the overlay has another type there).
bool attach_lower(MountTemplateSpec* spec, int i);

}  // namespace kernex::sandbox::detail
