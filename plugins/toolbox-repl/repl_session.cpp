#include "repl_session.hpp"

#include <signal.h>
#include <string.h>
#include <sys/uio.h>

#include <cerrno>

namespace kernex::repl {

extern const char* const kWorkerSource;

namespace {

using Clock = std::chrono::steady_clock;
// A reply carries at most two capped streams (JSON-escaped, up to 6 bytes per byte) and a
// traceback; anything longer is a broken worker.
constexpr std::size_t kMaxLine = 64u << 20;
constexpr std::size_t kStderrLines = 20;
// Raw bytes up to this follow their answer line in one write (see request).
constexpr std::size_t kJoinedRaw = 64 * 1024;
// Raw bytes from this size on go into the worker's buffer when it named one (write_direct).
constexpr std::size_t kDirectRaw = 256 * 1024;

}  // namespace

Result<std::unique_ptr<ReplSession>> ReplSession::start(const sandbox::Policy& policy,
                                                        const std::string& python,
                                                        std::chrono::milliseconds startup_timeout,
                                                        std::stop_token stop) {
  auto tail = std::make_shared<StderrTail>();
  sandbox::ProcessOptions options;
  options.on_stderr_line = [tail](std::string_view line) {
    std::lock_guard lock(tail->mutex);
    tail->lines.emplace_back(line);
    if (tail->lines.size() > kStderrLines) tail->lines.pop_front();
  };
  sandbox::Command command;
  // -I: no user site, no PYTHON* variables, no script directory on sys.path.
  command.argv = {python, "-I", "-c", kWorkerSource};
  auto process = sandbox::SandboxedProcess::start(policy, command, std::move(options));
  if (!process)
    return fail(ErrorCode::Sandbox, "toolbox-repl: cannot start the Python worker",
                process.error());
  std::unique_ptr<ReplSession> session(new ReplSession(std::move(*process), std::move(tail)));
  auto ready = session->process_.read_line(Clock::now() + startup_timeout, kMaxLine, stop);
  if (!ready) {
    session->process_.kill();
    return fail(ErrorCode::Sandbox,
                "toolbox-repl: the Python worker did not start" +
                    (session->stderr_tail().empty() ? "" : ": " + session->stderr_tail()),
                ready.error());
  }
  Json hello = parse_untrusted(*ready);
  if (!hello.is_object() || (!hello.contains("ready") || hello["ready"] != true)) {
    session->process_.kill();
    return fail(ErrorCode::Sandbox, "toolbox-repl: the Python worker sent no ready line, got: " +
                                        ready->substr(0, 200));
  }
  return session;
}

std::string ReplSession::stderr_tail() const {
  std::lock_guard lock(tail_->mutex);
  std::string out;
  for (const auto& line : tail_->lines) out += (out.empty() ? "" : "\n") + line;
  return out;
}

Error ReplSession::died(const std::string& during) {
  broken_ = true;
  const auto status = process_.wait(Clock::now() + std::chrono::milliseconds(200));
  std::string how;
  if (status.term_signal == SIGKILL) {
    how = "was killed (SIGKILL: out of memory, or its CPU or process limit)";
  } else if (status.term_signal == SIGXCPU) {
    how = "used up its CPU time (SIGXCPU)";
  } else if (status.term_signal != 0) {
    how = std::string("died of signal ") + std::to_string(status.term_signal) + " (" +
          ::strsignal(status.term_signal) + ")";
  } else {
    how = "exited with status " + std::to_string(status.exit_code);
  }
  const std::string tail = stderr_tail();
  return Error{ErrorCode::Io, "the REPL worker " + how + " during " + during +
                                  (tail.empty() ? "" : "; its stderr: " + tail)};
}

Result<std::string> ReplSession::request(std::string_view op_name, std::string line,
                                         std::string_view raw, std::chrono::milliseconds timeout,
                                         const CallbackHandler& on_call, std::stop_token stop) {
  if (broken_) return fail(ErrorCode::Io, "the REPL worker is gone");
  const std::string op(op_name);
  // A stop mid-request leaves the protocol out of step: the worker's whole group is killed.
  auto cancelled = [&] {
    broken_ = true;
    process_.kill();
    return fail(ErrorCode::Cancelled, op + " was cancelled");
  };
  auto deadline = Clock::now() + timeout;
  if (!raw.empty()) line.append(raw);
  if (auto w = process_.write(line, deadline, stop); !w) {
    if (w.error().code == ErrorCode::Cancelled) return cancelled();
    if (w.error().code == ErrorCode::Limit) {
      broken_ = true;
      process_.kill();
      return fail(ErrorCode::Limit, op + " timed out while sending its input");
    }
    return std::unexpected(died(op));
  }
  for (;;) {
    auto got = process_.read_line(deadline, kMaxLine, stop);
    if (!got) {
      if (got.error().code == ErrorCode::Cancelled) return cancelled();
      if (got.error().code == ErrorCode::Limit && Clock::now() >= deadline) {
        broken_ = true;
        process_.kill();
        return fail(ErrorCode::Limit, op + " timed out");
      }
      if (got.error().code == ErrorCode::Limit) {
        broken_ = true;
        process_.kill();
        return fail(ErrorCode::Io, "the REPL worker sent a line longer than " +
                                       std::to_string(kMaxLine) + " bytes");
      }
      return std::unexpected(died(op));
    }
    // An answer starts with "ok" (the caller checks it); anything else is read here, as a callback
    // if it is one.
    if (got->starts_with(R"({"ok":)")) return std::move(*got);
    auto call = parse(*got);
    if (!call) return std::unexpected(call.error());
    if (!call->contains("call")) return std::move(*got);
    note_direct_buffer(*call);
    // A sub-query from running code: the kernel's time answering it is not the code's time.
    const auto paused = Clock::now();
    CallAnswer answer = on_call(*call);
    deadline += Clock::now() - paused;
    const bool direct = answer.raw.size() >= kDirectRaw && write_direct(answer.raw);
    if (direct) answer.raw.clear();
    // A short raw text goes in the same write as its line: a second write would wake the worker
    // for the line alone, which then sleeps again until the text follows (two more switches per
    // call on a shared CPU). A long one is written from where it lies, not copied.
    const bool apart = answer.raw.size() > kJoinedRaw;
    std::string out;
    if (answer.text.empty()) {
      if (direct) answer.line["direct"] = true;
      out = answer.line.dump(-1, ' ', false, Json::error_handler_t::replace);
    } else {
      out = std::move(answer.text);
      if (direct) out.insert(1, R"("direct":true,)");
    }
    out.reserve(out.size() + 1 + (apart ? 0 : answer.raw.size()));
    out += '\n';
    if (!apart) out += answer.raw;
    auto w = process_.write(out, deadline, stop);
    if (w && apart) w = process_.write(answer.raw, deadline, stop);
    if (!w) {
      if (w.error().code == ErrorCode::Cancelled) return cancelled();
      if (w.error().code == ErrorCode::Limit) {
        broken_ = true;
        process_.kill();
        return fail(ErrorCode::Limit, op + " timed out");
      }
      return std::unexpected(died(op));
    }
  }
}

// A callback may name the worker's buffer for large results: {"direct": [address, size]}, in the
// worker's own memory. Without it the worker has none (any earlier one is forgotten).
void ReplSession::note_direct_buffer(const Json& call) {
  direct_at_ = 0;
  direct_size_ = 0;
  const auto it = call.find("direct");
  if (it == call.end() || !it->is_array() || it->size() != 2) return;
  const Json& at = (*it)[0];
  const Json& size = (*it)[1];
  if (!at.is_number_unsigned() || !size.is_number_unsigned()) return;
  direct_at_ = static_cast<std::uintptr_t>(at.get<std::uint64_t>());
  direct_size_ = static_cast<std::size_t>(size.get<std::uint64_t>());
}

// A large result written by the kernel straight into the worker's buffer (process_vm_writev): one
// copy, where the pipe costs two (into the pipe and out of it) and a wake-up of the worker per
// pipe-full. The worker named the place, in its own memory: a wrong address can only spoil the
// worker itself, and the write fails (then the text goes through the pipe as before). The kernel
// reads nothing of the worker's memory. Where it is not allowed (no ptrace access to the worker
// here), it is not tried again for this worker. The worker waits for the answer line meanwhile, and
// can't make the write wait on it: userfaultfd is refused by its seccomp filter.
bool ReplSession::write_direct(std::string_view raw) {
  if (direct_refused_ || direct_at_ == 0 || direct_size_ < raw.size()) return false;
  iovec local{const_cast<char*>(raw.data()), raw.size()};
  iovec remote{reinterpret_cast<void*>(direct_at_), raw.size()};
  const ssize_t n = ::process_vm_writev(process_.pid(), &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(raw.size())) return true;
  if (n < 0 && (errno == EPERM || errno == ENOSYS || errno == ESRCH)) direct_refused_ = true;
  return false;
}

Result<Json> ReplSession::parse(const std::string& answer) {
  Json reply = parse_untrusted(answer);
  if (reply.is_object()) return reply;
  broken_ = true;
  process_.kill();
  return fail(ErrorCode::Io, "the REPL worker broke the protocol: " + answer.substr(0, 200));
}

}  // namespace kernex::repl
