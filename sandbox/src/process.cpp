// SandboxedProcess: the child is set up exactly like spawn()'s, cloned by the same clone threads
// (child_main: PID namespace, session, cgroup, PDEATHSIG, stdio, close_range, mount namespace,
// rlimits, no_new_privs, capabilities, Landlock, seccomp, execve); the parent keeps the pipes and
// the pidfd instead of pumping to completion.
#include "kernex/sandbox/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "child.hpp"
#include "clone_thread.hpp"
#include "kernex/log.hpp"
#include "pids_cgroup.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;
using Clock = SandboxedProcess::Clock;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Keeps fds clear of 0-2 so the child's dup3 onto stdio can't clobber another one of them.
int above_stdio(int fd) {
  if (fd < 0 || fd >= 3) return fd;
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return high;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
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

struct SandboxedProcess::Impl {
  Policy policy;
  ProcessOptions options;
  std::string executable;
  pid_t pid = -1;
  int pidfd = -1;
  int in = -1;         // the write end of the child's stdin pipe, non-blocking
  int in_reader = -1;  // a read end we never read: keeps the pipe from breaking (no SIGPIPE)
  int out = -1;        // stdout pipe, non-blocking
  int err = -1;        // stderr pipe, non-blocking
  std::string out_buf;
  std::string err_line;
  bool err_line_cut = false;
  bool reaped = false;
  int stop_fd = -1;  // an eventfd a stop token's callback writes to, made on first use
  ExitStatus status;
  std::optional<SpawnCgroup> cgroup;

  explicit Impl(Policy p) : policy(std::move(p)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    close_fd(stop_fd);
    if (pid > 0 && !reaped) {
      ::kill(-pid, SIGKILL);
      reap();
    }
    flush_stderr_line();
    close_fd(in);
    close_fd(in_reader);
    close_fd(out);
    close_fd(err);
    close_fd(pidfd);
  }

  void reap() {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    reaped = true;
    if (WIFEXITED(st)) status.exit_code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) status.term_signal = WTERMSIG(st);
  }

  void emit_stderr(const char* data, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (data[i] == '\n') {
        flush_stderr_line();
        continue;
      }
      if (err_line.size() < options.stderr_line_cap)
        err_line.push_back(data[i]);
      else
        err_line_cut = true;
    }
  }
  void flush_stderr_line() {
    if (err_line.empty() && !err_line_cut) return;
    if (err_line_cut) err_line += " [line truncated]";
    if (options.on_stderr_line) options.on_stderr_line(err_line);
    err_line.clear();
    err_line_cut = false;
  }

  // Reads whatever stderr holds; closes it at end of file.
  void drain_stderr() {
    char buf[16384];
    while (err >= 0) {
      ssize_t n = ::read(err, buf, sizeof(buf));
      if (n > 0) {
        emit_stderr(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      flush_stderr_line();
      close_fd(err);
    }
  }

  enum class Wait {
    Ready,
    TimedOut,
    Exited,
    Failed,
    Cancelled
  };  // Failed: poll failed (see errno)
  // Waits for `fd` to become ready for `events` (or stderr to have data, which is drained) until
  // the deadline or `stop`. With `watch_exit`, the child's exit ends the wait too (Exited).
  Wait wait_for(int fd, short events, Clock::time_point deadline, const std::stop_token& stop,
                bool watch_exit = false) {
    if (watch_exit && reaped) return Wait::Exited;
    if (!stop.stop_possible()) return poll_until(fd, events, deadline, -1, watch_exit);
    if (stop.stop_requested()) return Wait::Cancelled;
    if (stop_fd < 0) stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd < 0) return Wait::Failed;
    Wait got = Wait::Failed;
    {
      // Runs on the canceller's thread: it only wakes this one.
      std::stop_callback wake(stop, [this] {
        const std::uint64_t one = 1;
        (void)!::write(stop_fd, &one, sizeof one);
      });
      got = poll_until(fd, events, deadline, stop_fd, watch_exit);
    }
    if (!stop.stop_requested()) return got;
    std::uint64_t count = 0;
    (void)!::read(stop_fd, &count, sizeof count);  // reset for the next wait
    return Wait::Cancelled;
  }

  Wait poll_until(int fd, short events, Clock::time_point deadline, int wake_fd, bool watch_exit) {
    for (;;) {
      pollfd fds[4];
      nfds_t n = 0;
      fds[n++] = {fd, events, 0};
      const nfds_t err_at = err >= 0 ? n++ : 0;
      if (err_at != 0) fds[err_at] = {err, POLLIN, 0};
      const nfds_t exit_at = watch_exit ? n++ : 0;
      if (exit_at != 0) fds[exit_at] = {pidfd, POLLIN, 0};
      const nfds_t wake_at = wake_fd >= 0 ? n++ : 0;
      if (wake_at != 0) fds[wake_at] = {wake_fd, POLLIN, 0};
      const int timeout = remaining_ms(deadline);
      int rc = ::poll(fds, n, timeout);
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return Wait::Failed;
      if (wake_at != 0 && fds[wake_at].revents != 0) return Wait::Cancelled;
      if (err_at != 0 && fds[err_at].revents != 0) drain_stderr();
      if (fds[0].revents != 0) return Wait::Ready;
      if (exit_at != 0 && fds[exit_at].revents != 0) return Wait::Exited;
      if (Clock::now() >= deadline) return Wait::TimedOut;
    }
  }
};

SandboxedProcess::SandboxedProcess(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SandboxedProcess::SandboxedProcess(SandboxedProcess&&) noexcept = default;
SandboxedProcess& SandboxedProcess::operator=(SandboxedProcess&&) noexcept = default;
SandboxedProcess::~SandboxedProcess() = default;

int SandboxedProcess::pid() const { return impl_->pid; }
const std::string& SandboxedProcess::executable() const { return impl_->executable; }

Result<SandboxedProcess> SandboxedProcess::start(const Policy& policy, const Command& command,
                                                 ProcessOptions options) {
  const auto& st = policy.state();
  if (command.argv.empty()) return fail(ErrorCode::Sandbox, "start: empty argv");
  for (const auto& arg : command.argv) {
    if (arg.find('\0') != std::string::npos)
      return fail(ErrorCode::Sandbox, "start: an argument contains a NUL byte");
  }
  const bool sandboxed = st.status.enforced;
  if (!sandboxed) {
    kernex::log(LogLevel::Warn,
                "sandbox: enforce is off; starting '" + command.argv.front() + "' UNSANDBOXED");
  }
  fs::path cwd = st.working_dir;
  if (command.cwd) {
    std::error_code ec;
    cwd = fs::canonical(command.cwd->is_absolute() ? *command.cwd : st.working_dir / *command.cwd,
                        ec);
    if (ec || !fs::is_directory(cwd)) {
      return fail(ErrorCode::Sandbox,
                  "start: working directory '" + command.cwd->string() + "' is not a directory");
    }
  }
  auto exe = resolve_command(policy, command.argv.front(), cwd);
  if (!exe) return std::unexpected(exe.error());
  auto env = merged_env(st, command);
  if (!env) return std::unexpected(env.error());

  auto impl = std::make_unique<Impl>(policy);
  impl->options = std::move(options);
  impl->executable = exe->string();

  // Everything the child reads is built here, before clone.
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

  // stdin is a pipe (a pipe round trip costs half a unix socket's). The kernel keeps a read end of
  // its own (in_reader) so the pipe always has a reader: a write after the child exited can't raise
  // SIGPIPE in the kernel, which a library can't ignore on its host's behalf. The child's exit is
  // seen through the pidfd instead. The child ends are closed right after clone.
  int in_pair[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pair, O_CLOEXEC) != 0) {
    return fail(ErrorCode::Sandbox, "pipe2 failed: " + errno_text(errno));
  }
  int child_in = above_stdio(in_pair[0]);
  impl->in = above_stdio(in_pair[1]);
  impl->in_reader = child_in < 0 ? -1 : ::fcntl(child_in, F_DUPFD_CLOEXEC, 3);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    close_fd(child_in);
    return fail(ErrorCode::Sandbox, "pipe2 failed: " + errno_text(errno));
  }
  int child_out = above_stdio(out_pipe[1]);
  impl->out = above_stdio(out_pipe[0]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    close_fd(child_in);
    close_fd(child_out);
    return fail(ErrorCode::Sandbox, "pipe2 failed: " + errno_text(errno));
  }
  int child_err = above_stdio(err_pipe[1]);
  impl->err = above_stdio(err_pipe[0]);
  auto close_child_ends = [&] {
    close_fd(child_in);
    close_fd(child_out);
    close_fd(child_err);
  };
  if (child_in < 0 || child_out < 0 || child_err < 0 || impl->in < 0 || impl->in_reader < 0 ||
      impl->out < 0 || impl->err < 0) {
    close_child_ends();
    return fail(ErrorCode::Sandbox, "cannot set up the child's stdio");
  }
  ::fcntl(impl->in, F_SETFL, O_NONBLOCK);
  ::fcntl(impl->out, F_SETFL, O_NONBLOCK);
  ::fcntl(impl->err, F_SETFL, O_NONBLOCK);

  detail::ChildSpec spec;
  spec.path = impl->executable.c_str();
  spec.argv = argv.data();
  spec.envp = envp.data();
  spec.cwd = cwd_str.c_str();
  spec.stdio[0] = child_in;
  spec.stdio[1] = child_out;
  spec.stdio[2] = child_err;
  spec.sandboxed = sandboxed;
  spec.is_root = ::getuid() == 0 || ::geteuid() == 0;
  spec.landlock_fd = st.landlock_fd;
  spec.mntns_fd = sandboxed ? st.mntns_fd : -1;
  spec.userns_fd = sandboxed ? st.userns_fd : -1;
  spec.new_pid_ns = st.status.pid_namespace;
  sock_fprog prog{static_cast<unsigned short>(st.seccomp_bpf.size()),
                  const_cast<sock_filter*>(st.seccomp_bpf.data())};
  spec.seccomp = &prog;
  spec.parent = ::getpid();
  const auto& lim = st.profile.limits;
  if (st.pids_cgroup && lim.processes) {
    auto made = SpawnCgroup::create(*st.pids_cgroup, *lim.processes);
    if (!made) {
      close_child_ends();
      return std::unexpected(made.error());
    }
    impl->cgroup.emplace(std::move(*made));
    spec.cgroup_fd = impl->cgroup->procs_fd();
  }
  for (auto [resource, value] : {std::pair{RLIMIT_CPU, lim.cpu_seconds},
                                 {RLIMIT_AS, lim.address_space_bytes},
                                 {RLIMIT_NPROC, lim.processes},
                                 {RLIMIT_FSIZE, lim.file_size_bytes},
                                 {RLIMIT_NOFILE, lim.open_files}}) {
    if (!value) continue;
    if (resource == RLIMIT_NPROC && impl->cgroup) continue;
    rlimit current{};
    ::getrlimit(resource, &current);
    std::uint64_t v = *value;
    if (current.rlim_max != RLIM_INFINITY && v > current.rlim_max) v = current.rlim_max;
    spec.limits[spec.limit_count++] = {static_cast<int>(resource), v};
  }

  // Cloned from a clone thread like spawn()'s: the child's PDEATHSIG follows the thread that cloned
  // it, and those threads live as long as the process, whichever thread starts the process here.
  const auto cloned = detail::clone_child(spec);
  close_child_ends();
  if (cloned.pid < 0) return fail(ErrorCode::Sandbox, "clone failed: " + errno_text(cloned.error));
  const pid_t pid = cloned.pid;
  const int pidfd_raw = cloned.pidfd;
  impl->pid = pid;
  impl->pidfd = pidfd_raw;

  if (spec.failed_stage != 0) {
    impl->reap();
    auto stage = static_cast<detail::ChildStage>(spec.failed_stage);
    const int child_errno = spec.failed_errno;
    if (stage == detail::ChildStage::Exec) {
      return fail(ErrorCode::Sandbox,
                  "cannot execute '" + impl->executable + "': " + errno_text(child_errno));
    }
    return fail(ErrorCode::Sandbox, std::string("sandbox setup failed while ") +
                                        detail::to_string(stage) + ": " + errno_text(child_errno) +
                                        "; refusing to run '" + impl->executable + "'");
  }
  return SandboxedProcess(std::move(impl));
}

Result<void> SandboxedProcess::write(std::string_view data, Clock::time_point deadline,
                                     std::stop_token stop) {
  Impl& p = *impl_;
  std::size_t written = 0;
  while (written < data.size()) {
    if (p.in < 0) return fail(ErrorCode::Io, "the process's stdin is closed");
    ssize_t w = ::write(p.in, data.data() + written, data.size() - written);
    if (w > 0) {
      written += static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      // The pipe is full: the child reads slowly, has stopped reading, or has exited.
      switch (p.wait_for(p.in, POLLOUT, deadline, stop, /*watch_exit=*/true)) {
        case Impl::Wait::Ready:
          continue;
        case Impl::Wait::Cancelled:
          return fail(ErrorCode::Cancelled, "cancelled while writing to the process");
        case Impl::Wait::TimedOut:
          return fail(ErrorCode::Limit, "timed out writing to the process");
        case Impl::Wait::Exited:
          return fail(ErrorCode::Io, "the process exited before reading all of its input");
        case Impl::Wait::Failed:
          return fail(ErrorCode::Io, "cannot wait to write to the process: " + errno_text(errno));
      }
    }
    const int e = errno;
    close_fd(p.in);
    return fail(ErrorCode::Io, "cannot write to the process's stdin: " + errno_text(e));
  }
  return {};
}

Result<std::string> SandboxedProcess::read_line(Clock::time_point deadline, std::size_t max_line,
                                                std::stop_token stop) {
  Impl& p = *impl_;
  std::size_t scanned = 0;
  bool readable = false;
  for (;;) {
    const auto nl = p.out_buf.find('\n', scanned);
    if (nl != std::string::npos) {
      if (nl > max_line) {
        return fail(ErrorCode::Limit,
                    "a line of output exceeded " + std::to_string(max_line) + " bytes");
      }
      std::string line = p.out_buf.substr(0, nl);
      p.out_buf.erase(0, nl + 1);
      return line;
    }
    scanned = p.out_buf.size();
    if (scanned > max_line) {
      return fail(ErrorCode::Limit,
                  "a line of output exceeded " + std::to_string(max_line) + " bytes");
    }
    if (p.out < 0) return fail(ErrorCode::Io, "the process closed its stdout");
    // Wait first: callers read right after writing a request, when the answer is rarely there yet,
    // so a read up front would mostly be an EAGAIN.
    if (!readable) {
      switch (p.wait_for(p.out, POLLIN, deadline, stop)) {
        case Impl::Wait::Ready:
          break;
        case Impl::Wait::Cancelled:
          return fail(ErrorCode::Cancelled, "cancelled while waiting for output");
        case Impl::Wait::Failed:
          return fail(ErrorCode::Io, "cannot wait for output: " + errno_text(errno));
        default:
          return fail(ErrorCode::Limit, "timed out waiting for output");
      }
    }
    char buf[65536];
    ssize_t n = ::read(p.out, buf, sizeof(buf));
    if (n > 0) {
      p.out_buf.append(buf, static_cast<std::size_t>(n));
      readable = static_cast<std::size_t>(n) == sizeof(buf);  // a full read: more may be waiting
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      readable = errno == EINTR;  // interrupted: read again; nothing there: wait
      continue;
    }
    p.drain_stderr();
    close_fd(p.out);
  }
}

void SandboxedProcess::close_stdin() { close_fd(impl_->in); }

bool SandboxedProcess::running() {
  Impl& p = *impl_;
  if (p.reaped) return false;
  pollfd fd{p.pidfd, POLLIN, 0};
  return ::poll(&fd, 1, 0) == 0;
}

void SandboxedProcess::kill() {
  if (!impl_->reaped) ::kill(-impl_->pid, SIGKILL);
}

ExitStatus SandboxedProcess::wait(Clock::time_point deadline) {
  Impl& p = *impl_;
  if (!p.reaped) {
    p.wait_for(p.pidfd, POLLIN, deadline, {});
    // The leader is a zombie (or still running) until reaped, so the group id can't be reused yet.
    ::kill(-p.pid, SIGKILL);
    p.reap();
  }
  p.drain_stderr();
  p.flush_stderr_line();
  return p.status;
}

}  // namespace kernex::sandbox
