// A process-wide log sink; the CLI prints to stderr, hosts route it to their own logger.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kernex {

enum class LogLevel { Debug, Info, Warn, Error };

using LogSink = std::function<void(LogLevel, std::string_view message)>;

// Replaces the sink (default: Warn and Error to stderr). Thread-safe.
void set_log_sink(LogSink sink);
void log(LogLevel level, std::string_view message);
std::string_view to_string(LogLevel level) noexcept;

}  // namespace kernex
