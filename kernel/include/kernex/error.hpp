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

// Propagation of a failed Result to the caller, in sandbox2's and Abseil's style: the name says
// the macro returns, so control flow stays visible where it happens. Each replaces the pair
//   auto x = f();  if (!x) return std::unexpected(x.error());
// The expression may hold commas (it is the variadic tail).
//
//   KERNEX_RETURN_IF_ERROR(expr);               // expr is any Result; its value is dropped
//   KERNEX_ASSIGN_OR_RETURN(auto x, expr);      // x is expr's value, moved out of the Result
#define KERNEX_RETURN_IF_ERROR(...)                              \
  do {                                                           \
    if (auto kernex_result_ = (__VA_ARGS__); !kernex_result_)    \
      return std::unexpected(std::move(kernex_result_).error()); \
  } while (false)

#define KERNEX_ASSIGN_OR_RETURN(lhs, ...) \
  KERNEX_ASSIGN_OR_RETURN_IMPL_(KERNEX_CONCAT_(kernex_result_, __LINE__), lhs, __VA_ARGS__)

#define KERNEX_CONCAT_INNER_(a, b) a##b
#define KERNEX_CONCAT_(a, b) KERNEX_CONCAT_INNER_(a, b)
#define KERNEX_ASSIGN_OR_RETURN_IMPL_(result, lhs, ...)           \
  auto result = (__VA_ARGS__);                                    \
  if (!result) return std::unexpected(std::move(result).error()); \
  lhs = std::move(*result)
