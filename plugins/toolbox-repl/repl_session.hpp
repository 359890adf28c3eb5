// One persistent python3 worker in the sandbox and the JSON Lines protocol with it: the kernel
// sends a request (optionally followed by raw bytes), the worker may call back (llm_query and
// friends) any number of times, then answers {"ok": ...}.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/process.hpp"

namespace kernex::repl {

// The answer to one callback: a JSON line, then `raw` bytes right after it when the line says
// {"raw": <their size>} (a large tool result goes to the worker as it is, not JSON-escaped). A
// large raw text is written straight into a buffer the worker named instead, when it named one
// (the line then says {"direct": true}; see ReplSession::write_direct).
// `text`, when set, is the line already written out (no '\n'), sent instead of `line`: a call's
// usual answer is a few fixed fields, cheaper formatted directly than built as a tree and dumped.
struct CallAnswer {
  Json line;
  std::string raw;
  std::string text;
  CallAnswer(Json j) : line(std::move(j)) {}  // NOLINT: a plain JSON answer converts
  CallAnswer(Json j, std::string bytes) : line(std::move(j)), raw(std::move(bytes)) {}
  static CallAnswer formatted(std::string line_text, std::string bytes = {}) {
    CallAnswer answer{Json(), std::move(bytes)};
    answer.text = std::move(line_text);
    return answer;
  }
};

// Answers one callback from the worker ({"call": "llm_query", ...}) with what to send back. The
// call is the handler's to take from (a tool call's arguments are moved on, not copied).
using CallbackHandler = std::function<CallAnswer(Json& call)>;

class ReplSession {
 public:
  // Starts the worker and waits for its "ready" line (or until `stop` fires: the worker is killed).
  static Result<std::unique_ptr<ReplSession>> start(const sandbox::Policy& policy,
                                                    const std::string& python,
                                                    std::chrono::milliseconds startup_timeout,
                                                    std::stop_token stop = {});

  // Sends `line` (one JSON request ending in '\n', then `raw` right after it) and returns the
  // worker's answer line as it came. Callbacks on the way ({"call": ...} lines) go to `on_call`,
  // and the time spent there does not count against `timeout`. ErrorCode::Limit: the call ran out
  // of time; ErrorCode::Io: the worker died or broke the protocol. Either way the worker is killed
  // and the session is unusable (broken()). `op` names the request in errors. ErrorCode::Cancelled:
  // `stop` fired while the worker ran; it was killed at once (with everything it started).
  Result<std::string> request(std::string_view op, std::string line, std::string_view raw,
                              std::chrono::milliseconds timeout, const CallbackHandler& on_call,
                              std::stop_token stop = {});
  // An answer line as a JSON object; anything else breaks the protocol (the worker is killed).
  Result<Json> parse(const std::string& answer);

  bool broken() const { return broken_; }
  // False once the worker has exited (a poll, no wait), e.g. killed while idle in the pool.
  bool alive() { return !broken_ && process_.running(); }
  int pid() const { return process_.pid(); }
  // The last lines the worker wrote to stderr (outside eval_code's capture), for error messages.
  std::string stderr_tail() const;

 private:
  struct StderrTail {
    std::mutex mutex;
    std::deque<std::string> lines;
  };
  ReplSession(sandbox::SandboxedProcess process, std::shared_ptr<StderrTail> tail)
      : process_(std::move(process)), tail_(std::move(tail)) {}
  Error died(const std::string& during);
  void note_direct_buffer(const Json& call);
  bool write_direct(std::string_view raw);

  sandbox::SandboxedProcess process_;
  std::shared_ptr<StderrTail> tail_;
  bool broken_ = false;
  // The worker's buffer for large results (see write_direct): where it says it is, in its own
  // memory, and its size; 0 when it named none. direct_refused_: writing there was not allowed.
  std::uintptr_t direct_at_ = 0;
  std::size_t direct_size_ = 0;
  bool direct_refused_ = false;
};

}  // namespace kernex::repl
