#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fd.hpp"
#include "landlock_abi.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {
int landlock_abi() noexcept {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

Result<int> probe_landlock_abi() {
  const long abi =
      syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi >= 0) return static_cast<int>(abi);
  const int e = errno;
  if (e == ENOSYS) return fail(ErrorCode::Sandbox, "the running kernel has no Landlock (ENOSYS)");
  if (e == EOPNOTSUPP)
    return fail(ErrorCode::Sandbox,
                "Landlock is built in but disabled at boot (EOPNOTSUPP; add landlock to the lsm= "
                "kernel parameter)");
  return fail(ErrorCode::Sandbox, "landlock_create_ruleset failed: " + detail::errno_text(e));
}

Result<int> build_landlock_ruleset(int abi, const std::vector<LandlockGrant>& grants,
                                   const NetworkPolicy& net) {
  const std::uint64_t handled_fs = landlock::fs_rights_for_abi(abi);
  landlock::RulesetAttr attr;
  attr.handled_access_fs = handled_fs;
  std::size_t attr_size = sizeof(std::uint64_t);
  if (abi >= 4) {
    // Handled with no bind rule at all: bind() to any TCP port is refused. listen() on an unbound
    // socket autobinds without this hook; seccomp refuses listen() unless the profile serves.
    attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
    attr_size = 2 * sizeof(std::uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = LANDLOCK_SCOPE_SIGNAL | LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
    attr_size = sizeof(attr);
  }
  long fd = syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0);
  if (fd < 0)
    return fail(ErrorCode::Sandbox, "landlock_create_ruleset failed: " + detail::errno_text(errno));
  int ruleset = static_cast<int>(fd);
  if (ruleset < 3) {  // keep clear of 0-2, which the spawned child overwrites with its stdio
    int high = ::fcntl(ruleset, F_DUPFD_CLOEXEC, 3);
    ::close(ruleset);
    if (high < 0)
      return fail(ErrorCode::Sandbox,
                  "cannot move the Landlock ruleset fd: " + detail::errno_text(errno));
    ruleset = high;
  }

  for (const auto& grant : grants) {
    // A descriptor opened inside the policy's namespace is the caller's; dup'd so it is closed here
    // like one opened here.
    int path_fd = grant.fd >= 0 ? ::fcntl(grant.fd, F_DUPFD_CLOEXEC, 3)
                                : ::open(grant.path.c_str(), O_PATH | O_CLOEXEC);
    if (path_fd < 0) {
      int err = errno;
      ::close(ruleset);
      return fail(ErrorCode::Sandbox, "cannot open '" + grant.path.string() +
                                          "' for a Landlock rule: " + detail::errno_text(err));
    }
    struct stat st {};
    std::uint64_t rights = grant.rights & handled_fs;
    if (::fstat(path_fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= landlock::kFileRights;
    if (rights == 0) {  // an empty mask is rejected by the kernel; it would grant nothing anyway
      ::close(path_fd);
      continue;
    }
    landlock_path_beneath_attr rule{};
    rule.allowed_access = rights;
    rule.parent_fd = path_fd;
    long rc = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    int err = errno;
    ::close(path_fd);
    if (rc != 0) {
      ::close(ruleset);
      return fail(ErrorCode::Sandbox, "landlock_add_rule for '" + grant.path.string() +
                                          "' failed: " + detail::errno_text(err));
    }
  }

  if (abi >= 4) {
    for (std::uint16_t port : net.tcp_connect_ports) {
      landlock::NetPortAttr rule{LANDLOCK_ACCESS_NET_CONNECT_TCP, port};
      if (syscall(SYS_landlock_add_rule, ruleset, landlock::kRuleNetPort, &rule, 0) != 0) {
        int err = errno;
        ::close(ruleset);
        return fail(ErrorCode::Sandbox, "landlock_add_rule for TCP port " + std::to_string(port) +
                                            " failed: " + detail::errno_text(err));
      }
    }
  }
  return ruleset;
}

}  // namespace kernex::sandbox
