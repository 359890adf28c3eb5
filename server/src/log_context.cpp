#include "log_context.hpp"

namespace kernex::server {
namespace {
thread_local std::string current;
}

const std::string& log_context() { return current; }

LogContext::LogContext(std::string context) : previous_(std::move(current)) {
  current = std::move(context);
}

LogContext::~LogContext() { current = std::move(previous_); }

}  // namespace kernex::server
