#include "owner_tag.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

namespace kernex::sandbox::detail {
namespace fs = std::filesystem;

namespace {

// Field 22 of /proc/PID/stat: the start time, in clock ticks after boot. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from its closing ')'.
std::optional<unsigned long long> start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return std::nullopt;
  }
  unsigned long long ticks = 0;
  if (std::from_chars(field.data(), field.data() + field.size(), ticks).ec != std::errc{})
    return std::nullopt;
  return ticks;
}

template <typename T>
std::optional<T> number(std::string_view& text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end == text.data() || end == text.data() + text.size() || *end != '-')
    return std::nullopt;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()) + 1);
  return value;
}

}  // namespace

std::string owner_tag() {
  const pid_t self = ::getpid();
  return std::to_string(self) + "-" + std::to_string(start_time(self).value_or(0));
}

bool owner_is_dead(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  const auto pid = number<pid_t>(name);
  if (!pid || *pid <= 0) return false;
  const auto started = number<unsigned long long>(name);
  if (!started) return false;
  if (::kill(*pid, 0) != 0 && errno == ESRCH) return true;
  const auto now = start_time(*pid);
  return now && *now != *started;  // the pid was reused by a later process
}

void for_each_stale(const fs::path& dir, std::string_view prefix,
                    const std::function<void(const fs::path&)>& reclaim) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (owner_is_dead(name, prefix)) reclaim(it->path());
  }
}

}  // namespace kernex::sandbox::detail
