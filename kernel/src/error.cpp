#include "kernex/error.hpp"

namespace kernex {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::Usage:
      return "usage";
    case ErrorCode::Config:
      return "config";
    case ErrorCode::Plugin:
      return "plugin";
    case ErrorCode::Provider:
      return "provider";
    case ErrorCode::Memory:
      return "memory";
    case ErrorCode::Tool:
      return "tool";
    case ErrorCode::Sandbox:
      return "sandbox";
    case ErrorCode::Skill:
      return "skill";
    case ErrorCode::Limit:
      return "limit";
    case ErrorCode::Guardrail:
      return "guardrail";
    case ErrorCode::Io:
      return "io";
    case ErrorCode::Parse:
      return "parse";
    case ErrorCode::Unsupported:
      return "unsupported";
    case ErrorCode::Internal:
      return "internal";
    case ErrorCode::Cancelled:
      return "cancelled";
  }
  return "internal";
}

std::string Error::describe() const {
  std::string out = message;
  for (const Error* e = cause.get(); e != nullptr; e = e->cause.get()) {
    out += ": ";
    out += e->message;
  }
  return out;
}

}  // namespace kernex
