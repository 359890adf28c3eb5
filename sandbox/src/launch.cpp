#include "launch.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "clone_thread.hpp"
#include "kernex/log.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox::detail {
namespace fs = std::filesystem;

namespace {

Result<Policy::State::Env> merged_env(const Policy::State& st, const Command& cmd) {
  auto env = st.env;
  for (const auto& [name, value] : cmd.env) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
      return fail(ErrorCode::Sandbox, "invalid environment variable '" + name + "'");
    }
    if (is_hijacking_env_name(name)) {
      return fail(ErrorCode::Sandbox, "refusing to set '" + name +
                                          "': it can change what the sandboxed command executes");
    }
    set_env(env, name, value);
  }
  return env;
}

Result<fs::path> working_dir(const Policy::State& st, const Command& command,
                             std::string_view who) {
  if (!command.cwd) return st.working_dir;
  std::error_code ec;
  fs::path cwd =
      fs::canonical(command.cwd->is_absolute() ? *command.cwd : st.working_dir / *command.cwd, ec);
  if (ec || !fs::is_directory(cwd)) {
    return fail(ErrorCode::Sandbox, std::string(who) + ": working directory '" +
                                        command.cwd->string() + "' is not a directory");
  }
  return cwd;
}

// The NULL-terminated pointer array execve reads, into `store`'s strings.
std::vector<char*> pointers(std::vector<std::string>& store) {
  std::vector<char*> out;
  out.reserve(store.size() + 1);
  for (auto& s : store) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

Result<Launch> Launch::prepare(const Policy& policy, const Command& command, std::string_view who) {
  const auto& st = policy.state();
  const std::string prefix(who);
  if (command.argv.empty()) return fail(ErrorCode::Sandbox, prefix + ": empty argv");
  for (const auto& arg : command.argv) {
    if (arg.find('\0') != std::string::npos)
      return fail(ErrorCode::Sandbox, prefix + ": an argument contains a NUL byte");
  }
  Launch launch(policy);
  launch.sandboxed_ = st.status.enforced;
  if (!launch.sandboxed_) {
    kernex::log(LogLevel::Warn, std::string("sandbox: enforce is off; ") +
                                    (who == "spawn" ? "running '" : "starting '") +
                                    command.argv.front() + "' UNSANDBOXED");
  }
  launch.seccomp_ = {static_cast<unsigned short>(st.seccomp_bpf.size()),
                     const_cast<sock_filter*>(st.seccomp_bpf.data())};
  warm_clone_thread(launch.sandbox_spec());

  KERNEX_ASSIGN_OR_RETURN(auto cwd, working_dir(st, command, who));
  KERNEX_ASSIGN_OR_RETURN(auto exe, resolve_command(policy, command.argv.front(), cwd));
  KERNEX_ASSIGN_OR_RETURN(auto env, merged_env(st, command));

  launch.executable_ = exe.string();
  launch.cwd_ = cwd.string();
  launch.argv_ = command.argv;
  launch.envp_.reserve(env.size());
  for (const auto& [k, v] : env) launch.envp_.push_back(k + "=" + v);
  return launch;
}

// What the clone thread is picked by (warm_clone_thread reads only this half).
ChildSpec Launch::sandbox_spec() const {
  const auto& st = policy_->state();
  ChildSpec spec;
  spec.sandboxed = sandboxed_;
  spec.landlock_fd = st.landlock_fd;
  spec.mntns_fd = sandboxed_ ? st.mntns_fd : -1;
  spec.userns_fd = sandboxed_ ? st.userns_fd : -1;
  spec.new_pid_ns = st.status.pid_namespace;
  spec.seccomp = &seccomp_;
  return spec;
}

// The spawn's pids cgroup, when the policy has one, and the rlimits the child sets.
Result<std::optional<SpawnCgroup>> Launch::limit(ChildSpec& spec) const {
  const auto& st = policy_->state();
  const auto& lim = st.profile.limits;
  std::optional<SpawnCgroup> cgroup;
  if (st.pids_cgroup && lim.processes) {
    KERNEX_ASSIGN_OR_RETURN(auto made, SpawnCgroup::create(*st.pids_cgroup, *lim.processes));
    cgroup.emplace(std::move(made));
    spec.cgroup_fd = cgroup->procs_fd();
  }
  for (auto [resource, value] : {std::pair{RLIMIT_CPU, lim.cpu_seconds},
                                 {RLIMIT_AS, lim.address_space_bytes},
                                 {RLIMIT_NPROC, lim.processes},
                                 {RLIMIT_FSIZE, lim.file_size_bytes},
                                 {RLIMIT_NOFILE, lim.open_files}}) {
    if (!value) continue;
    if (resource == RLIMIT_NPROC && cgroup)
      continue;  // the cgroup counts the sandbox's processes only
    rlimit current{};
    ::getrlimit(resource, &current);
    std::uint64_t v = *value;
    // Never above the current hard limit: raising it would fail without CAP_SYS_RESOURCE.
    if (current.rlim_max != RLIM_INFINITY && v > current.rlim_max) v = current.rlim_max;
    spec.limits[spec.limit_count++] = {static_cast<int>(resource), v};
  }
  return cgroup;
}

Error Launch::failure(const ChildSpec& spec) const {
  const auto stage = static_cast<ChildStage>(spec.failed_stage);
  const int child_errno = spec.failed_errno;
  if (stage == ChildStage::Exec)
    return Error(ErrorCode::Sandbox,
                 "cannot execute '" + executable_ + "': " + errno_text(child_errno));
  return Error(ErrorCode::Sandbox, std::string("sandbox setup failed while ") + to_string(stage) +
                                       ": " + errno_text(child_errno) + "; refusing to run '" +
                                       executable_ + "'");
}

Result<LaunchedChild> Launch::start(std::array<Fd, 3> stdio) {
  // Everything the child reads is built here, before clone, and lives until clone returns.
  std::vector<char*> argv = pointers(argv_);
  std::vector<char*> envp = pointers(envp_);
  ChildSpec spec = sandbox_spec();
  spec.path = executable_.c_str();
  spec.argv = argv.data();
  spec.envp = envp.data();
  spec.cwd = cwd_.c_str();
  for (int i = 0; i < 3; ++i) spec.stdio[i] = stdio[i].get();
  spec.is_root = ::getuid() == 0 || ::geteuid() == 0;
  spec.parent = ::getpid();
  KERNEX_ASSIGN_OR_RETURN(auto cgroup, limit(spec));

  // Cloned from a clone thread: the child's PDEATHSIG follows the thread that cloned it, and those
  // threads live as long as the process, whichever thread starts the child here.
  const auto cloned = clone_child(spec);
  for (auto& fd : stdio) fd.reset();
  if (cloned.pid < 0) return fail(ErrorCode::Sandbox, "clone failed: " + errno_text(cloned.error));
  LaunchedChild child{cloned.pid, Fd(cloned.pidfd), std::move(cgroup)};
  if (spec.failed_stage != 0) {
    int status = 0;
    while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    return std::unexpected(failure(spec));
  }
  return child;
}

}  // namespace kernex::sandbox::detail
