// spawn(): the child is prepared and cloned by Launch (launch.hpp), then stdin/stdout/stderr are
// pumped with poll() under one deadline. The command leads its own process
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

#include "fd.hpp"
#include "launch.hpp"
#include "policy_state.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string truncation_marker(std::size_t dropped_bytes) {
  return "\n[kernex: output truncated, " + std::to_string(dropped_bytes) + " more bytes dropped]\n";
}

namespace {

using detail::errno_text;
using detail::Fd;

// stdin is a socket pair so the parent can write with MSG_NOSIGNAL: a child that exits without
// reading must not raise SIGPIPE in the kernel process. `read` is the child's end.
Result<detail::Pipe> make_stdin() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return fail(ErrorCode::Sandbox, "socketpair failed: " + errno_text(errno));
  }
  auto parent = detail::above_stdio(fds[0]);
  auto child = detail::above_stdio(fds[1]);
  if (!parent || !child) return fail(ErrorCode::Sandbox, "cannot set up the stdin socket");
  detail::set_nonblocking(*parent);
  ::shutdown(child->get(), SHUT_WR);
  return detail::Pipe{std::move(*child), std::move(*parent)};
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

// A pipe holds 64 KiB: an output of megabytes (a whole file read for code) would cost a context
// switch between the child and this pump every 64 KiB, which on a loaded or single CPU is most of
// the read's time. A command that may return more than the default cap (1 MiB; code's calls ask
// for up to repl.tool_result_max_bytes) gets a 1 MiB pipe, the unprivileged limit
// (/proc/sys/fs/pipe-max-size). Only those: the pages count against the user's pipe quota. If the
// kernel refuses, the default stays and all still works.
void widen_for(const Fd& write_end, std::size_t cap) {
  constexpr int kWide = 1 << 20;
  if (cap > static_cast<std::size_t>(kWide)) (void)::fcntl(write_end.get(), F_SETPIPE_SZ, kWide);
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

// The child's descriptors while it runs; a member is reset once it is done with.
struct Pipes {
  const Fd& stop;  // the run's cancellation, when it can be cancelled
  Fd& in;
  Fd& out;
  Fd& err;
  const Fd& pidfd;
};

struct PumpEnd {
  bool exited = false;
  bool timed_out = false;
  bool cancelled = false;
};

// Feeds stdin, drains stdout and stderr and watches for the exit until the child exited with
// both pipes closed, the deadline passed or the run was cancelled.
PumpEnd pump(Pipes p, pid_t pid, std::string_view stdin_data, Capture& out_cap, Capture& err_cap,
             Clock::time_point deadline) {
  PumpEnd end;
  std::size_t stdin_written = 0;
  while (p.out || p.err || !end.exited) {
    const auto now = Clock::now();
    if (now >= deadline) {
      end.timed_out = !end.exited;
      break;
    }
    pollfd fds[5];
    nfds_t n = 0;
    auto watch = [&](const Fd& fd, short events) {
      if (!fd) return -1;
      fds[n] = {fd.get(), events, 0};
      return static_cast<int>(n++);
    };
    auto fired = [&](int i) { return i >= 0 && fds[i].revents != 0; };
    const int stop_i = watch(p.stop, POLLIN);
    const int out_i = watch(p.out, POLLIN);
    const int err_i = watch(p.err, POLLIN);
    const int in_i = watch(p.in, POLLOUT);
    const int pid_i = end.exited ? -1 : watch(p.pidfd, POLLIN);
    auto remaining = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    int rc = ::poll(fds, n, static_cast<int>(std::min<long long>(remaining, 60'000)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fired(stop_i)) {
      end.cancelled = !end.exited;
      break;
    }
    if (fired(out_i) && !drain(p.out.get(), out_cap)) p.out.reset();
    if (fired(err_i) && !drain(p.err.get(), err_cap)) p.err.reset();
    if (fired(in_i)) {
      ssize_t w = ::send(p.in.get(), stdin_data.data() + stdin_written,
                         stdin_data.size() - stdin_written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) stdin_written += static_cast<std::size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || stdin_written == stdin_data.size())
        p.in.reset();
    }
    if (fired(pid_i)) {
      end.exited = true;
      // The leader is a zombie until reaped, so its group id can't be reused yet.
      ::kill(-pid, SIGKILL);
      p.in.reset();
    }
  }
  return end;
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
  const auto& profile = policy.state().profile;
  if (!command.argv.empty() && command.stop.stop_requested()) {
    return fail(ErrorCode::Cancelled,
                "'" + command.argv.front() + "' not started: the run was cancelled");
  }
  KERNEX_ASSIGN_OR_RETURN(auto launch, detail::Launch::prepare(policy, command, "spawn"));

  KERNEX_ASSIGN_OR_RETURN(auto in, make_stdin());
  KERNEX_ASSIGN_OR_RETURN(auto out, detail::make_pipe());
  KERNEX_ASSIGN_OR_RETURN(auto err, detail::make_pipe());
  detail::set_nonblocking(out.read);
  detail::set_nonblocking(err.read);
  widen_for(out.write, command.stdout_cap.value_or(profile.stdout_cap));
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

  const auto start = Clock::now();
  const auto deadline = start + command.timeout.value_or(profile.timeout);
  KERNEX_ASSIGN_OR_RETURN(
      auto child, launch.start({std::move(in.read), std::move(out.write), std::move(err.write)}));
  // Read once execve has folded our peak into the child (start returns after it): anything that
  // grew before it, such as the clone thread started by the first spawn, is in both figures.
  const long kernel_rss_kb = peak_resident_kb();
  const pid_t pid = child.pid;
  const Fd& pidfd = child.pidfd;
  Fd& in_w = in.write;
  Fd& out_r = out.read;
  Fd& err_r = err.read;

  Capture out_cap{{}, command.stdout_cap.value_or(profile.stdout_cap), 0};
  Capture err_cap{{}, profile.stderr_cap, 0};
  if (command.stdin_data.empty()) in_w.reset();
  if (stop_fd) on_stop.emplace(command.stop, wake);
  const PumpEnd pumped = pump({stop_fd, in_w, out_r, err_r, pidfd}, pid, command.stdin_data,
                              out_cap, err_cap, deadline);

  on_stop.reset();
  ::kill(-pid, SIGKILL);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  const auto end = Clock::now();
  if (out_r) drain(out_r.get(), out_cap);
  if (err_r) drain(err_r.get(), err_cap);

  SpawnResult result;
  result.executable = launch.executable();
  result.pid = pid;
  result.sandboxed = launch.sandboxed();
  result.timed_out = pumped.timed_out;
  result.cancelled = pumped.cancelled;
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
