// SandboxedProcess: the child is prepared and started by the same Launch as spawn()'s (launch.hpp);
// the parent keeps the pipes and the pidfd instead of pumping to completion.
#include "kernex/sandbox/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "fd.hpp"
#include "launch.hpp"
#include "kernex/sandbox/line_buffer.hpp"
#include "kernex/suspend.hpp"

namespace kernex::sandbox {
using Clock = SandboxedProcess::Clock;

namespace {

using detail::errno_text;
using detail::Fd;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

}  // namespace

struct SandboxedProcess::Impl {
  Policy policy;
  ProcessOptions options;
  std::string executable;
  Fd in;         // the write end of the child's stdin pipe, non-blocking
  Fd in_reader;  // a read end we never read: keeps the pipe from breaking (no SIGPIPE)
  Fd out;        // stdout pipe, non-blocking
  Fd err;        // stderr pipe, non-blocking
  detail::LaunchedChild child;  // pid, pidfd and the pids cgroup, released after the reap
  LineBuffer out_lines;         // stdout read so far, split into lines
  std::string err_line;
  bool err_line_cut = false;
  bool reaped = false;
  bool in_widened = false;
  Fd stop_fd;  // an eventfd a stop token's callback writes to, made on first use
  ExitStatus status;

  Impl(Policy p, detail::LaunchedChild c) : policy(std::move(p)), child(std::move(c)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    stop_fd.reset();
    if (child.pid > 0 && !reaped) {
      ::kill(-child.pid, SIGKILL);
      reap();
    }
    flush_stderr_line();
  }

  void reap() {
    int st = 0;
    while (::waitpid(child.pid, &st, 0) < 0 && errno == EINTR) {
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
    while (err) {
      ssize_t n = ::read(err.get(), buf, sizeof(buf));
      if (n > 0) {
        emit_stderr(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      flush_stderr_line();
      err.reset();
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
    if (!stop_fd) stop_fd = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_fd) return Wait::Failed;
    Wait got = Wait::Failed;
    {
      // Runs on the canceller's thread: it only wakes this one.
      std::stop_callback wake(stop, [this] {
        const std::uint64_t one = 1;
        (void)!::write(stop_fd.get(), &one, sizeof one);
      });
      got = poll_until(fd, events, deadline, stop_fd.get(), watch_exit);
    }
    if (!stop.stop_requested()) return got;
    std::uint64_t count = 0;
    (void)!::read(stop_fd.get(), &count, sizeof count);  // reset for the next wait
    return Wait::Cancelled;
  }

  Wait poll_until(int fd, short events, Clock::time_point deadline, int wake_fd, bool watch_exit) {
    for (;;) {
      pollfd fds[4];
      nfds_t n = 0;
      fds[n++] = {fd, events, 0};
      const nfds_t err_at = err ? n++ : 0;
      if (err_at != 0) fds[err_at] = {err.get(), POLLIN, 0};
      const nfds_t exit_at = watch_exit ? n++ : 0;
      if (exit_at != 0) fds[exit_at] = {child.pidfd.get(), POLLIN, 0};
      const nfds_t wake_at = wake_fd >= 0 ? n++ : 0;
      if (wake_at != 0) fds[wake_at] = {wake_fd, POLLIN, 0};
      const int timeout = remaining_ms(deadline);
      int rc = 0;
      {
        // The child's output or exit, for as long as it takes: a pool may lend another thread.
        std::optional<BlockingScope> waiting;
        if (timeout != 0) waiting.emplace();
        rc = ::poll(fds, n, timeout);
      }
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

int SandboxedProcess::pid() const { return impl_->child.pid; }
const std::string& SandboxedProcess::executable() const { return impl_->executable; }

Result<SandboxedProcess> SandboxedProcess::start(const Policy& policy, const Command& command,
                                                 ProcessOptions options) {
  KERNEX_ASSIGN_OR_RETURN(auto launch, detail::Launch::prepare(policy, command, "start"));

  // stdin is a pipe (a pipe round trip costs half a unix socket's). The kernel keeps a read end of
  // its own (in_reader) so the pipe always has a reader: a write after the child exited can't raise
  // SIGPIPE in the kernel, which a library can't ignore on its host's behalf. The child's exit is
  // seen through the pidfd instead. The child's ends are closed by start, right after clone.
  auto in = detail::make_pipe();
  if (!in) return std::unexpected(in.error());
  Fd in_reader(::fcntl(in->read.get(), F_DUPFD_CLOEXEC, 3));
  if (!in_reader)
    return fail(ErrorCode::Sandbox, "cannot set up the child's stdin: " + errno_text(errno));
  auto out = detail::make_pipe();
  if (!out) return std::unexpected(out.error());
  auto err = detail::make_pipe();
  if (!err) return std::unexpected(err.error());
  for (const Fd* fd : {&in->write, &out->read, &err->read}) detail::set_nonblocking(*fd);

  KERNEX_ASSIGN_OR_RETURN(auto child, launch.start({std::move(in->read), std::move(out->write),
                                                    std::move(err->write)}));
  auto impl = std::make_unique<Impl>(policy, std::move(child));
  impl->options = std::move(options);
  impl->executable = launch.executable();
  impl->in = std::move(in->write);
  impl->in_reader = std::move(in_reader);
  impl->out = std::move(out->read);
  impl->err = std::move(err->read);
  return SandboxedProcess(std::move(impl));
}

Result<void> SandboxedProcess::write(std::string_view data, Clock::time_point deadline,
                                     std::stop_token stop) {
  Impl& p = *impl_;
  // A write of megabytes (a whole tool result or load_context's text for a REPL worker) through
  // the default 64 KiB pipe costs a wake-up of the child every 64 KiB; the first large write grows
  // this pipe to 1 MiB (the unprivileged limit), for the process's life. Refused: the default.
  constexpr int kWide = 1 << 20;
  if (!p.in_widened && p.in && data.size() > (std::size_t{1} << 16)) {
    p.in_widened = true;
    (void)::fcntl(p.in.get(), F_SETPIPE_SZ, kWide);
  }
  std::size_t written = 0;
  while (written < data.size()) {
    if (!p.in) return fail(ErrorCode::Io, "the process's stdin is closed");
    ssize_t w = ::write(p.in.get(), data.data() + written, data.size() - written);
    if (w > 0) {
      written += static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      // The pipe is full: the child reads slowly, has stopped reading, or has exited.
      switch (p.wait_for(p.in.get(), POLLOUT, deadline, stop, /*watch_exit=*/true)) {
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
    p.in.reset();
    return fail(ErrorCode::Io, "cannot write to the process's stdin: " + errno_text(e));
  }
  return {};
}

Result<std::string> SandboxedProcess::read_line(Clock::time_point deadline, std::size_t max_line,
                                                std::stop_token stop) {
  Impl& p = *impl_;
  bool readable = false;
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto line, p.out_lines.next_line(max_line));
    if (line) return std::move(*line);
    if (!p.out) return fail(ErrorCode::Io, "the process closed its stdout");
    // Wait first: callers read right after writing a request, when the answer is rarely there yet,
    // so a read up front would mostly be an EAGAIN.
    if (!readable) {
      switch (p.wait_for(p.out.get(), POLLIN, deadline, stop)) {
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
    ssize_t n = ::read(p.out.get(), buf, sizeof(buf));
    if (n > 0) {
      p.out_lines.append(std::string_view(buf, static_cast<std::size_t>(n)));
      readable = static_cast<std::size_t>(n) == sizeof(buf);  // a full read: more may be waiting
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      readable = errno == EINTR;  // interrupted: read again; nothing there: wait
      continue;
    }
    p.drain_stderr();
    p.out.reset();
  }
}

void SandboxedProcess::close_stdin() { impl_->in.reset(); }

bool SandboxedProcess::running() {
  Impl& p = *impl_;
  if (p.reaped) return false;
  pollfd fd{p.child.pidfd.get(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 0;
}

void SandboxedProcess::kill() {
  if (!impl_->reaped) ::kill(-impl_->child.pid, SIGKILL);
}

ExitStatus SandboxedProcess::wait(Clock::time_point deadline) {
  Impl& p = *impl_;
  if (!p.reaped) {
    p.wait_for(p.child.pidfd.get(), POLLIN, deadline, {});
    // The leader is a zombie (or still running) until reaped, so the group id can't be reused yet.
    ::kill(-p.child.pid, SIGKILL);
    p.reap();
  }
  p.drain_stderr();
  p.flush_stderr_line();
  return p.status;
}

}  // namespace kernex::sandbox
