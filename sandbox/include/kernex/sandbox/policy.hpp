// An enforceable sandbox policy: the Landlock ruleset fd and seccomp BPF are built once here, in
// the parent, so each spawn only has to apply them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/sandbox/profile.hpp"

namespace kernex::sandbox {

// The running kernel's Landlock ABI (landlock_create_ruleset(NULL, 0, VERSION)); 0 if unavailable.
int landlock_abi() noexcept;
// The same probe with the reason when there is none (for `kernex doctor`): ENOSYS (no Landlock in
// the running kernel), EOPNOTSUPP (built in but disabled at boot), or the call's error.
Result<int> probe_landlock_abi();

// What a Policy actually enforces on this kernel (for `kernex doctor` and logs).
struct PolicyStatus {
  bool enforced = false;  // false only with enforce: false
  int landlock_abi = 0;
  bool filesystem = false;           // Landlock FS rules
  bool tcp = false;                  // Landlock TCP bind/connect rules (ABI >= 4)
  bool signal_scope = false;         // Landlock signal scoping (ABI >= 6)
  bool abstract_unix_scope = false;  // Landlock abstract unix socket scoping (ABI >= 6)
  bool seccomp = false;
  // With seccomp always: SysV IPC and POSIX message queues refused, TCP fast open refused
  // (MSG_FASTOPEN, TCP_FASTOPEN[_CONNECT]), memfd_create only with MFD_NOEXEC_SEAL, memfd_secret
  // refused. What depends on the profile or this kernel:
  bool listen_allowed = false;        // network.listen opted in: listen() works (else EPERM)
  bool file_watches_allowed = false;  // watch_files opted in: inotify works (else EPERM)
  // memfd_create works for sandboxed programs (sealed non-executable, kernel >= 6.3); false with
  // seccomp on: this kernel lacks MFD_NOEXEC_SEAL, so memfd_create always fails (fail-closed).
  bool memfd_sealed = false;
  // Kept read-only or masked inside grants (.git, shell rc files, kernel files, keep_read_only)
  // through the policy's private mount namespace, where writable grants are also noexec.
  std::vector<std::filesystem::path> read_only_in_writable;
  // Every mount of the policy's namespace is read-only but the writable grants (workspace,
  // read_write, private TMPDIR), so chmod, chown and utimensat (which Landlock doesn't mediate) of
  // any file outside them fail with EROFS. Needs mount_setattr (Linux 5.12); false (with a warning)
  // without it.
  bool read_only_root = false;
  // Every spawn (and SandboxedProcess) lives in a PID namespace whose init dies with the kernel, so
  // nothing a command starts outlives the kernel, even one killed by SIGKILL. Needs CAP_SYS_ADMIN.
  bool pid_namespace = false;
  // How limits.processes is enforced: "pids cgroup <dir>" (counts the sandbox's processes and
  // threads), "RLIMIT_NPROC" (counts every process of the kernel's uid), or empty when there is no
  // limit.
  std::string process_limit;
  std::vector<std::string> warnings;  // protections this kernel could not provide
};

class Policy {
 public:
  struct State;  // implementation detail, defined in the library

  const SandboxProfile& profile() const;
  const PolicyStatus& status() const;
  // The private TMPDIR of this policy (removed when the last copy of the Policy goes away), or
  // empty.
  const std::filesystem::path& private_tmp() const;
  // The allow-list resolved to canonical absolute paths (empty when every command is allowed).
  const std::vector<std::filesystem::path>& allowed_executables() const;

  const State& state() const { return *state_; }
  explicit Policy(std::shared_ptr<const State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<const State> state_;
};

// sandbox2-style builder: collect grants, then one Build() validates everything and prepares the
// kernel objects. Errors name the offending path, variable or command.
class PolicyBuilder {
 public:
  PolicyBuilder() = default;
  explicit PolicyBuilder(SandboxProfile profile) : profile_(std::move(profile)) {}

  PolicyBuilder& workspace(std::filesystem::path dir);
  // The workspace through overlayfs: writes land in `layers.upper`, never in the real directory.
  PolicyBuilder& workspace_overlay(WorkspaceOverlay layers);
  PolicyBuilder& read_only(std::filesystem::path path);
  PolicyBuilder& read_write(std::filesystem::path path);
  PolicyBuilder& executable(std::filesystem::path path);
  PolicyBuilder& protect(std::filesystem::path path);
  PolicyBuilder& allow_tcp_connect(std::uint16_t port);
  PolicyBuilder& allow_unix_sockets();
  PolicyBuilder& allow_listen();        // network.listen: the command may serve (listen())
  PolicyBuilder& allow_file_watches();  // watch_files: the command may use inotify
  PolicyBuilder& passthrough_env(std::string name);
  PolicyBuilder& set_env(std::string name, std::string value);
  PolicyBuilder& allow_command(std::string command);
  PolicyBuilder& limits(ResourceLimits limits);
  PolicyBuilder& timeout(std::chrono::milliseconds timeout);
  PolicyBuilder& output_caps(std::size_t stdout_cap, std::size_t stderr_cap);
  PolicyBuilder& working_dir(std::filesystem::path dir);
  PolicyBuilder& enforce(bool on);

  const SandboxProfile& profile() const { return profile_; }
  Result<Policy> Build() const;

 private:
  SandboxProfile profile_;
};

}  // namespace kernex::sandbox
