#include "log_context.hpp"

#include <utility>

namespace kernex::server {
namespace {
thread_local std::string current;
}

const std::string& log_context() { return current; }

std::string exchange_log_context(std::string context) {
  return std::exchange(current, std::move(context));
}

LogContext::LogContext(std::string context) : previous_(std::move(current)) {
  current = std::move(context);
}

LogContext::~LogContext() { current = std::move(previous_); }

}  // namespace kernex::server
