// Errors as values: every fallible kernel or plugin call returns Result<T>.
#pragma once

#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace kernex {

// Stable categories; the CLI maps them to documented exit codes.
enum class ErrorCode {
  Usage,        // bad command line or API misuse
  Config,       // kernex.yaml, plugin configs, rules files
  Plugin,       // loading or creating a plugin
  Provider,     // model backend failures
  Memory,       // store failures
  Tool,         // tool execution failures
  Sandbox,      // sandbox setup or refusal
  Skill,        // skill manifests
  Limit,        // a budget or cap was hit
  Guardrail,    // guardrail blocked input or output
  Io,           // filesystem
  Parse,        // malformed data (JSON, YAML, scripts)
  Unsupported,  // feature not offered by this implementation
  Internal,     // a bug: an impossible state
  Cancelled,    // the host asked the run to stop (Context::stop)
};

std::string_view to_string(ErrorCode code) noexcept;

struct Error {
  ErrorCode code = ErrorCode::Internal;
  std::string message;                 // names the file/field/plugin/request and what was expected
  std::shared_ptr<const Error> cause;  // optional chain, outermost first

  Error() = default;
  Error(ErrorCode c, std::string msg) : code(c), message(std::move(msg)) {}
  Error(ErrorCode c, std::string msg, Error inner)
      : code(c), message(std::move(msg)), cause(std::make_shared<const Error>(std::move(inner))) {}

  // "message: cause: cause..." for logs and CLI output.
  std::string describe() const;
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error(code, std::move(message)));
}
inline std::unexpected<Error> fail(ErrorCode code, std::string message, Error cause) {
  return std::unexpected<Error>(Error(code, std::move(message), std::move(cause)));
}

}  // namespace kernex
