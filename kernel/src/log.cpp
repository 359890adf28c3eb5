#include "kernex/log.hpp"

#include "kernex/redact.hpp"

#include <iostream>
#include <mutex>

namespace kernex {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& sink() {
  static LogSink s = [](LogLevel level, std::string_view message) {
    if (level >= LogLevel::Warn)
      std::cerr << "kernex: " << to_string(level) << ": " << message << '\n';
  };
  return s;
}

}  // namespace

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warning";
    case LogLevel::Error:
      return "error";
  }
  return "info";
}

void set_log_sink(LogSink s) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(s);
}

void log(LogLevel level, std::string_view message) {
  // Redacted here, the one way out for every log line, whatever sink a host installed.
  const std::string redacted = redact_secrets(std::string(message));
  std::lock_guard lock(sink_mutex());
  if (sink()) sink()(level, redacted);
}

}  // namespace kernex
