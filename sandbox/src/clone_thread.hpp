// Where spawn() clones its children: one long-lived thread per process whose capability bounding set
// was emptied once, so a child inherits an empty set instead of dropping ~40 capabilities itself (each
// drop is a credential copy and commit, ~1.5 µs).
#pragma once

#include <sys/types.h>

#include "child.hpp"

namespace kernex::sandbox::detail {

struct CloneOutcome {
  pid_t pid = -1;
  int pidfd = -1;
  int error = 0;  // errno of a failed clone, or of starting the clone thread
};

// clone(CLONE_VM|CLONE_VFORK|CLONE_PIDFD) of child_main(spec) on the clone thread, with every signal
// blocked there; returns once the child has exec'd or failed (spec->failed_stage). Calls from several
// threads take turns. The child's parent is the clone thread, which never exits, so PR_SET_PDEATHSIG
// fires only when the whole process goes.
CloneOutcome clone_child(ChildSpec& spec);

}  // namespace kernex::sandbox::detail
