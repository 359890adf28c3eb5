#include "kernex/number.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

namespace kernex {

namespace {

// Shortest round-trip text ("86400", "0.5", "1e+300", "nan", "inf").
std::string show(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

// A value as a message shows it: numbers as numbers (NaN too, which Json::dump prints as null),
// anything else as short JSON.
std::string show(const Json& v) {
  if (v.is_number_float()) return show(v.get<double>());
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr std::size_t kShown = 60;
  if (text.size() > kShown) text = text.substr(0, kShown) + "...";
  return text;
}

std::string int_range(std::uint64_t min, std::uint64_t max) {
  return "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

// Appended into one reserved string: g++ 12 at -O2 and above reports a false -Wrestrict overlap
// for `"literal" + std::string(...)` (GCC bug 105329), which the insert-at-front path triggers.
std::string named(std::string_view name, const std::string& problem) {
  std::string out;
  out.reserve(name.size() + problem.size() + 4);
  out.append("`").append(name).append("`: ").append(problem);
  return out;
}

}  // namespace

std::string number_range(double min, double max) {
  return "a number in [" + show(min) + ", " + show(max) + "]";
}

std::optional<std::string> number_problem(double value, double min, double max) {
  if (std::isfinite(value) && value >= min && value <= max) return std::nullopt;
  return "expected " + number_range(min, max) + ", got " + show(value);
}

std::optional<std::string> number_problem(const Json& value, double min, double max) {
  if (!value.is_number()) return "expected " + number_range(min, max) + ", got " + show(value);
  return number_problem(value.get<double>(), min, max);
}

std::optional<std::string> uint_problem(const Json& value, std::uint64_t min, std::uint64_t max) {
  if (auto n = json_uint(value); n && *n >= min && *n <= max) return std::nullopt;
  return int_range(min, max) + ", got " + show(value);
}

Result<double> checked_number(const Json& value, std::string_view name, double min, double max,
                              ErrorCode code) {
  if (auto problem = number_problem(value, min, max)) return fail(code, named(name, *problem));
  return value.get<double>();
}

Result<std::uint64_t> checked_uint(const Json& value, std::string_view name, std::uint64_t min,
                                   std::uint64_t max, ErrorCode code) {
  if (auto problem = uint_problem(value, min, max)) return fail(code, named(name, *problem));
  return value.get<std::uint64_t>();
}

Result<double> parse_number(std::string_view text, std::string_view name, double min, double max,
                            ErrorCode code) {
  double v = 0;
  // from_chars takes no sign prefix '+', no spaces, no hex without asking: the strict decimal form.
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return fail(code, named(name, "expected " + number_range(min, max) + ", got " +
                                      show(Json(std::string(text)))));
  }
  if (auto problem = number_problem(v, min, max)) return fail(code, named(name, *problem));
  return v;
}

Result<std::uint64_t> parse_uint(std::string_view text, std::string_view name, std::uint64_t min,
                                 std::uint64_t max, ErrorCode code) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    return fail(code, named(name, int_range(min, max) + ", got " + show(Json(std::string(text)))));
  }
  return v;
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  const double max_ms = static_cast<double>(kMaxOptionDuration.count());
  const double ms = seconds * 1000.0;
  if (!(ms > 0)) return std::chrono::milliseconds(0);  // NaN and negatives too
  if (ms >= max_ms) return kMaxOptionDuration;
  return std::chrono::milliseconds(std::llround(ms));
}

std::chrono::milliseconds saturate(std::chrono::milliseconds d) {
  return std::clamp(d, std::chrono::milliseconds(0), kMaxOptionDuration);
}

}  // namespace kernex
