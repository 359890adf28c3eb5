// Numbers from outside (config, flags, plugin options), range-checked in one place. A value that
// is not finite, not whole where a count is expected, or outside its documented range is an error
// naming the option, the value and the range, never a silent clamp or a wrap: a NaN budget would
// switch its limit off and a huge timeout would overflow std::chrono.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex {

// Longest duration any option may ask for: 30 days. Far below where milliseconds or
// steady_clock time points (nanoseconds) could overflow, so `now() + d` is always safe.
inline constexpr std::chrono::milliseconds kMaxOptionDuration{30LL * 24 * 3600 * 1000};

// "a number in [0, 1e+09]": the words of the messages below, for callers that word their own.
std::string number_range(double min, double max);

// The problem with a value, or nullopt when it is fine: "expected a number in [0, 1000], got nan".
std::optional<std::string> number_problem(double value, double min, double max);
std::optional<std::string> uint_problem(const Json& value, std::uint64_t min, std::uint64_t max);
std::optional<std::string> number_problem(const Json& value, double min, double max);

// A JSON number in [min, max] (finite). Error: "<name>: expected a number in [min, max], got v".
Result<double> checked_number(const Json& value, std::string_view name, double min, double max,
                              ErrorCode code = ErrorCode::Config);
// A whole JSON number in [min, max] (negative, fractional, too big: errors).
Result<std::uint64_t> checked_uint(const Json& value, std::string_view name, std::uint64_t min,
                                   std::uint64_t max, ErrorCode code = ErrorCode::Config);

// The same from text (a flag's value): the whole text must be the number, decimal.
Result<double> parse_number(std::string_view text, std::string_view name, double min, double max,
                            ErrorCode code = ErrorCode::Usage);
Result<std::uint64_t> parse_uint(std::string_view text, std::string_view name, std::uint64_t min,
                                 std::uint64_t max, ErrorCode code = ErrorCode::Usage);

// Seconds (as read by checked_number) to milliseconds, rounded, saturating at 0 and at
// kMaxOptionDuration: never overflows, whatever the double.
std::chrono::milliseconds seconds_to_ms(double seconds);
// `d` capped to [0, kMaxOptionDuration], for durations built by arithmetic (backoff, Retry-After).
std::chrono::milliseconds saturate(std::chrono::milliseconds d);

}  // namespace kernex
