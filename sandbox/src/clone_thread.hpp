// Where spawn() clones its children: long-lived threads whose capability bounding set was emptied
// once, so a child inherits an empty set instead of dropping ~40 capabilities itself (each drop is
// a credential copy and commit, ~1.5 µs), and that carry a policy's seccomp filter for its children
// to inherit (see clone_thread.cpp).
#pragma once

#include <sys/types.h>

#include "child.hpp"

namespace kernex::sandbox::detail {

struct CloneOutcome {
  pid_t pid = -1;
  int pidfd = -1;
  int error = 0;  // errno of a failed clone, or of starting the clone thread
};

// A vfork-style clone (CLONE_VM|CLONE_PIDFD) of child_main(spec) on a clone thread, with every
// signal blocked there; returns once the child has exec'd or failed (spec->failed_stage). Calls
// from several threads take turns. The child's parent is the clone thread, which never exits, so
// PR_SET_PDEATHSIG fires only when the whole process goes.
CloneOutcome clone_child(ChildSpec& spec);

// Whether this process may clone a child into a new PID namespace (CAP_SYS_ADMIN in its user
// namespace, and pidfd_open, which the child's PDEATHSIG check needs); probed once.
bool pid_namespaces_available();

// Wakes the thread that will clone `spec` now (only its sandboxed, mntns_fd and seccomp are read),
// so that its wake-up overlaps the caller's remaining preparation; a no-op with a single CPU.
void warm_clone_thread(const ChildSpec& spec);

}  // namespace kernex::sandbox::detail
