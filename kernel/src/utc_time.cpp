#include "kernex/utc_time.hpp"

#include <ctime>

namespace kernex {

std::string utc_time(std::int64_t unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string utc_now() { return utc_time(std::time(nullptr)); }

}  // namespace kernex
