// spawn(): the child is cloned on a clone thread (clone_thread.cpp) into child_main, then
// stdin/stdout/stderr are pumped with poll() under one deadline. The command leads its own process
// group; when it exits or the deadline passes, the whole group is killed before the command is
// reaped, so no descendant outlives the call (setsid/setpgid are refused by seccomp, so none can
// leave the group). It lives in its clone thread's PID namespace, whose init dies with the kernel,
// taking every process of the namespace with it (clone_thread.cpp).
#include "kernex/sandbox/spawn.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "child.hpp"
#include "clone_thread.hpp"
#include "kernex/log.hpp"
#include "pids_cgroup.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string truncation_marker(std::size_t dropped_bytes) {
  return "\n[kernex: output truncated, " + std::to_string(dropped_bytes) + " more bytes dropped]\n";
}

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Owns an fd; the child's copies are closed by the parent right after clone.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Keeps fds clear of 0-2 so the child's dup3 onto stdio can't clobber another one of them.
Result<Fd> above_stdio(int fd) {
  if (fd >= 3) return Fd(fd);
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int err = errno;
  ::close(fd);
  if (high < 0)
    return fail(ErrorCode::Sandbox, "fcntl(F_DUPFD_CLOEXEC) failed: " + errno_text(err));
  return Fd(high);
}

struct Channel {
  Fd parent;
  Fd child;
};

Result<Channel> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return fail(ErrorCode::Sandbox, "pipe2 failed: " + errno_text(errno));
  auto read_end = above_stdio(fds[0]);
  auto write_end = above_stdio(fds[1]);
  if (!read_end || !write_end) return fail(ErrorCode::Sandbox, "cannot set up the output pipes");
  ::fcntl(read_end->get(), F_SETFL, O_NONBLOCK);
  return Channel{std::move(*read_end), std::move(*write_end)};
}

// stdin is a socket pair so the parent can write with MSG_NOSIGNAL: a child that exits without
// reading must not raise SIGPIPE in the kernel process.
Result<Channel> make_stdin() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return fail(ErrorCode::Sandbox, "socketpair failed: " + errno_text(errno));
  }
  auto parent = above_stdio(fds[0]);
  auto child = above_stdio(fds[1]);
  if (!parent || !child) return fail(ErrorCode::Sandbox, "cannot set up the stdin socket");
  ::fcntl(parent->get(), F_SETFL, O_NONBLOCK);
  ::shutdown(child->get(), SHUT_WR);
  return Channel{std::move(*parent), std::move(*child)};
}

struct Capture {
  std::string data;
  std::size_t cap = 0;
  std::size_t dropped = 0;

  void append(const char* buf, std::size_t n) {
    std::size_t room = cap > data.size() ? cap - data.size() : 0;
    std::size_t take = std::min(room, n);
    data.append(buf, take);
    dropped += n - take;
  }

  // Cut at a UTF-8 character boundary and make the cut visible.
  std::string finish(bool& truncated) {
    truncated = dropped > 0;
    if (!truncated) return std::move(data);
    std::size_t end = data.size();
    std::size_t i = end;
    std::size_t continuation = 0;
    while (i > 0 && continuation < 4 && (static_cast<unsigned char>(data[i - 1]) & 0xC0) == 0x80) {
      --i;
      ++continuation;
    }
    if (i > 0) {
      const unsigned char lead = static_cast<unsigned char>(data[i - 1]);
      const std::size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      if (need > 1 && continuation + 1 < need) end = i - 1;
    }
    dropped += data.size() - end;
    data.resize(end);
    return std::move(data) + truncation_marker(dropped);
  }
};

// Reads what is available; false at EOF or on error.
bool drain(int fd, Capture& capture) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      capture.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;
  }
}

// The kernel's peak resident set. At execve Linux folds the old address space's high-water mark
// into the child's ru_maxrss, and with CLONE_VM that is this process's peak, not its current RSS.
long peak_resident_kb() {
  rusage self{};
  if (::getrusage(RUSAGE_SELF, &self) != 0) return 0;
  return self.ru_maxrss;
}

std::chrono::microseconds to_us(const timeval& tv) {
  return std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec);
}

Result<std::vector<std::pair<std::string, std::string>>> merged_env(const Policy::State& st,
                                                                    const Command& cmd) {
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
    auto it =
        std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
    if (it != env.end())
      it->second = value;
    else
      env.emplace_back(name, value);
  }
  return env;
}

}  // namespace

Result<fs::path> resolve_command(const Policy& policy, const std::string& command,
                                 const fs::path& cwd) {
  const auto& st = policy.state();
  if (command.empty()) return fail(ErrorCode::Sandbox, "empty command");
  if (command.find('\0') != std::string::npos)
    return fail(ErrorCode::Sandbox, "command contains a NUL byte");
  fs::path resolved;
  if (command.find('/') != std::string::npos) {
    resolved = (command.front() == '/' ? fs::path(command) : cwd / command).lexically_normal();
    std::error_code ec;
    if (!fs::is_regular_file(resolved, ec) || ::access(resolved.c_str(), X_OK) != 0) {
      return fail(ErrorCode::Sandbox, "command '" + command + "' (" + resolved.string() +
                                          ") is not an executable file");
    }
  } else {
    // A candidate is taken only once it passed the same check, so it isn't repeated below.
    for (const auto& dir : st.profile.search_path) {
      fs::path candidate = dir / command;
      std::error_code ec;
      if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) {
        resolved = candidate;
        break;
      }
    }
    if (resolved.empty()) {
      return fail(ErrorCode::Sandbox,
                  "command '" + command + "' not found on the sandbox search path");
    }
  }
  // realpath() is an lstat per path component; only the allow-list needs it.
  if (st.allowed_executables.empty()) return resolved;
  // Compared by canonical path: /bin/echo and /usr/bin/echo are one program, a look-alike elsewhere
  // isn't.
  std::error_code ec;
  const fs::path canonical = fs::canonical(resolved, ec);
  if (ec || std::find(st.allowed_executables.begin(), st.allowed_executables.end(), canonical) ==
                st.allowed_executables.end()) {
    return fail(ErrorCode::Sandbox, "command '" + command + "' (resolved to '" + resolved.string() +
                                        "') is not in the sandbox's allowed_commands");
  }
  return resolved;
}

Result<SpawnResult> spawn(const Policy& policy, const Command& command) {
  const auto& st = policy.state();
  const auto& profile = st.profile;
  if (command.argv.empty()) return fail(ErrorCode::Sandbox, "spawn: empty argv");
  if (command.stop.stop_requested()) {
    return fail(ErrorCode::Cancelled,
                "'" + command.argv.front() + "' not started: the run was cancelled");
  }
  for (const auto& arg : command.argv) {
    if (arg.find('\0') != std::string::npos)
      return fail(ErrorCode::Sandbox, "spawn: an argument contains a NUL byte");
  }
  const bool sandboxed = st.status.enforced;
  if (!sandboxed) {
    kernex::log(LogLevel::Warn,
                "sandbox: enforce is off; running '" + command.argv.front() + "' UNSANDBOXED");
  }

  // The sandbox half of the child's spec first, to wake its clone thread while the rest is
  // prepared.
  detail::ChildSpec spec;
  spec.sandboxed = sandboxed;
  spec.landlock_fd = st.landlock_fd;
  spec.mntns_fd = sandboxed ? st.mntns_fd : -1;
  spec.userns_fd = sandboxed ? st.userns_fd : -1;
  spec.new_pid_ns = st.status.pid_namespace;
  sock_fprog prog{static_cast<unsigned short>(st.seccomp_bpf.size()),
                  const_cast<sock_filter*>(st.seccomp_bpf.data())};
  spec.seccomp = &prog;
  detail::warm_clone_thread(spec);

  fs::path cwd = st.working_dir;
  if (command.cwd) {
    std::error_code ec;
    cwd = fs::canonical(command.cwd->is_absolute() ? *command.cwd : st.working_dir / *command.cwd,
                        ec);
    if (ec || !fs::is_directory(cwd)) {
      return fail(ErrorCode::Sandbox,
                  "spawn: working directory '" + command.cwd->string() + "' is not a directory");
    }
  }
  auto exe = resolve_command(policy, command.argv.front(), cwd);
  if (!exe) return std::unexpected(exe.error());
  auto env = merged_env(st, command);
  if (!env) return std::unexpected(env.error());

  // Everything the child reads is built here, before clone.
  std::string exe_str = exe->string();
  std::string cwd_str = cwd.string();
  std::vector<std::string> arg_store = command.argv;
  std::vector<char*> argv;
  for (auto& a : arg_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (const auto& [k, v] : *env) env_store.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  auto in = make_stdin();
  if (!in) return std::unexpected(in.error());
  auto out = make_pipe();
  if (!out) return std::unexpected(out.error());
  auto err = make_pipe();
  if (!err) return std::unexpected(err.error());
  // The stop token's callback runs on the canceller's thread: it only wakes the pump below, which
  // kills the group itself (it alone knows the leader is not reaped yet).
  Fd stop_fd;
  if (command.stop.stop_possible()) {
    stop_fd = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_fd) return fail(ErrorCode::Sandbox, "eventfd failed: " + errno_text(errno));
  }
  auto wake = [fd = stop_fd.get()] {
    const std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  };
  std::optional<std::stop_callback<decltype(wake)>> on_stop;

  spec.path = exe_str.c_str();
  spec.argv = argv.data();
  spec.envp = envp.data();
  spec.cwd = cwd_str.c_str();
  spec.stdio[0] = in->child.get();
  spec.stdio[1] = out->child.get();
  spec.stdio[2] = err->child.get();
  spec.is_root = ::getuid() == 0 || ::geteuid() == 0;
  spec.parent = ::getpid();
  const auto& lim = profile.limits;
  std::optional<SpawnCgroup> cgroup;
  if (st.pids_cgroup && lim.processes) {
    auto made = SpawnCgroup::create(*st.pids_cgroup, *lim.processes);
    if (!made) return std::unexpected(made.error());
    cgroup.emplace(std::move(*made));
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

  const auto start = Clock::now();
  const auto deadline = start + command.timeout.value_or(profile.timeout);
  const auto cloned = detail::clone_child(spec);
  if (cloned.pid < 0) return fail(ErrorCode::Sandbox, "clone failed: " + errno_text(cloned.error));
  // Read once execve has folded our peak into the child (clone returns after it): anything that
  // grew before it, such as the clone thread started by the first spawn, is in both figures.
  const long kernel_rss_kb = peak_resident_kb();
  const pid_t pid = cloned.pid;
  Fd pidfd(cloned.pidfd);
  in->child.reset();
  out->child.reset();
  err->child.reset();

  if (spec.failed_stage != 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    auto stage = static_cast<detail::ChildStage>(spec.failed_stage);
    const int child_errno = spec.failed_errno;
    if (stage == detail::ChildStage::Exec) {
      return fail(ErrorCode::Sandbox,
                  "cannot execute '" + exe_str + "': " + errno_text(child_errno));
    }
    return fail(ErrorCode::Sandbox, std::string("sandbox setup failed while ") +
                                        detail::to_string(stage) + ": " + errno_text(child_errno) +
                                        "; refusing to run '" + exe_str + "'");
  }

  Capture out_cap{{}, profile.stdout_cap, 0};
  Capture err_cap{{}, profile.stderr_cap, 0};
  std::size_t stdin_written = 0;
  if (command.stdin_data.empty()) in->parent.reset();
  bool exited = false;
  bool timed_out = false;
  bool cancelled = false;
  if (stop_fd) on_stop.emplace(command.stop, wake);

  while (out->parent || err->parent || !exited) {
    const auto now = Clock::now();
    if (now >= deadline) {
      timed_out = !exited;
      break;
    }
    pollfd fds[5];
    nfds_t n = 0;
    int out_i = -1, err_i = -1, in_i = -1, pid_i = -1, stop_i = -1;
    if (stop_fd) {
      stop_i = static_cast<int>(n);
      fds[n++] = {stop_fd.get(), POLLIN, 0};
    }
    if (out->parent) {
      out_i = static_cast<int>(n);
      fds[n++] = {out->parent.get(), POLLIN, 0};
    }
    if (err->parent) {
      err_i = static_cast<int>(n);
      fds[n++] = {err->parent.get(), POLLIN, 0};
    }
    if (in->parent) {
      in_i = static_cast<int>(n);
      fds[n++] = {in->parent.get(), POLLOUT, 0};
    }
    if (!exited) {
      pid_i = static_cast<int>(n);
      fds[n++] = {pidfd.get(), POLLIN, 0};
    }
    auto remaining = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    int rc = ::poll(fds, n, static_cast<int>(std::min<long long>(remaining, 60'000)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (stop_i >= 0 && fds[stop_i].revents != 0) {
      cancelled = !exited;
      break;
    }
    if (out_i >= 0 && fds[out_i].revents != 0 && !drain(out->parent.get(), out_cap))
      out->parent.reset();
    if (err_i >= 0 && fds[err_i].revents != 0 && !drain(err->parent.get(), err_cap))
      err->parent.reset();
    if (in_i >= 0 && fds[in_i].revents != 0) {
      ssize_t w = ::send(in->parent.get(), command.stdin_data.data() + stdin_written,
                         command.stdin_data.size() - stdin_written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) stdin_written += static_cast<std::size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) ||
          stdin_written == command.stdin_data.size()) {
        in->parent.reset();
      }
    }
    if (pid_i >= 0 && fds[pid_i].revents != 0) {
      exited = true;
      // The leader is a zombie until reaped, so its group id can't be reused yet.
      ::kill(-pid, SIGKILL);
      in->parent.reset();
    }
  }

  on_stop.reset();
  ::kill(-pid, SIGKILL);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  const auto end = Clock::now();
  if (out->parent) drain(out->parent.get(), out_cap);
  if (err->parent) drain(err->parent.get(), err_cap);

  SpawnResult result;
  result.executable = exe_str;
  result.pid = pid;
  result.sandboxed = sandboxed;
  result.timed_out = timed_out;
  result.cancelled = cancelled;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.stdout_data = out_cap.finish(result.stdout_truncated);
  result.stderr_data = err_cap.finish(result.stderr_truncated);
  result.wall_time = std::chrono::duration_cast<std::chrono::microseconds>(end - start);
  result.cpu_time = to_us(usage.ru_utime) + to_us(usage.ru_stime);
  if (usage.ru_maxrss > kernel_rss_kb) result.peak_rss_kb = usage.ru_maxrss;
  return result;
}

}  // namespace kernex::sandbox
