// The names of the trajectory layout (kernex/trajectory_segments.hpp): read from disk, so every
// check is strict and never throws.
#include <cctype>
#include <cstdio>

#include "kernex/trajectory_segments.hpp"

namespace kernex {
namespace {

bool digits(std::string_view s) {
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return !s.empty();
}

}  // namespace

std::optional<std::string> trajectory_day(std::string_view run_id) {
  if (run_id.size() < 8 || !digits(run_id.substr(0, 8))) return std::nullopt;
  return std::string(run_id.substr(0, 4)) + "-" + std::string(run_id.substr(4, 2)) + "-" +
         std::string(run_id.substr(6, 2));
}

bool is_trajectory_day_dir(std::string_view name) {
  return name.size() == 10 && digits(name.substr(0, 4)) && name[4] == '-' &&
         digits(name.substr(5, 2)) && name[7] == '-' && digits(name.substr(8, 2));
}

std::optional<std::uint64_t> trajectory_segment_number(std::string_view name) {
  if (!name.starts_with("seg-")) return std::nullopt;
  name.remove_prefix(4);
  std::string_view num;
  if (name.ends_with(".jsonl")) {
    num = name.substr(0, name.size() - 6);
  } else if (name.ends_with(".idx")) {
    num = name.substr(0, name.size() - 4);
  } else {
    return std::nullopt;
  }
  // At most 12 digits before converting: a longer number could overflow.
  if (!digits(num) || num.size() > 12 || (num.size() > 1 && num[0] == '0')) return std::nullopt;
  std::uint64_t n = 0;
  for (char c : num) n = n * 10 + static_cast<std::uint64_t>(c - '0');
  if (n == 0 || n > kMaxTrajectorySegment) return std::nullopt;
  return n;
}

std::string format_run_id(std::time_t when, std::uint32_t random) {
  std::tm tm{};
  gmtime_r(&when, &tm);
  char id[40];
  const std::size_t stamp = std::strftime(id, sizeof id, "%Y%m%dT%H%M%SZ", &tm);
  std::snprintf(id + stamp, sizeof id - stamp, "-%06x", random & 0xffffffu);
  return id;
}

bool is_trajectory_run_id(std::string_view id) {
  if (id.size() != 23 || id[8] != 'T' || id[15] != 'Z' || id[16] != '-') return false;
  if (!digits(id.substr(0, 8)) || !digits(id.substr(9, 6))) return false;
  for (char c : id.substr(17))
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace kernex
