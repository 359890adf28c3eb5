// An error as the HTTP API answers it: status, a stable code, a message naming what was
// expected, and for 429 how long to wait.
#pragma once

#include <optional>
#include <string>

namespace kernex::server {

struct ApiError {
  int status = 500;
  std::string code;  // "session_busy", "not_found", "invalid_request", ...
  std::string message;
  std::optional<unsigned> retry_after_s;
  // The request field at fault (OpenAI's error.param), when one is; the initializer keeps
  // api_error's aggregate initialisation free of -Wmissing-field-initializers.
  std::string param = {};
};

inline ApiError api_error(int status, std::string code, std::string message) {
  return ApiError{status, std::move(code), std::move(message), std::nullopt};
}

}  // namespace kernex::server
