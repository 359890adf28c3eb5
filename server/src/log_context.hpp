// A per-thread prefix for log lines ("req=r1a run=run-…"), so every line a request or a run
// causes, the kernel's included, names it.
#pragma once

#include <string>

namespace kernex::server {

const std::string& log_context();
// Sets this thread's context and returns the one it replaces (a fiber carries its own between
// threads: run_fiber.cpp).
std::string exchange_log_context(std::string context);

class LogContext {
 public:
  explicit LogContext(std::string context);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;

 private:
  std::string previous_;
};

}  // namespace kernex::server
