// Telegram caps a message at 4096 characters (UTF-16 code units); longer answers go out as
// several messages, cut on UTF-8 boundaries and preferably after a newline.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kernex::telegram {

inline constexpr std::size_t kMaxMessageUnits = 4096;

// UTF-16 code units of `text` (an invalid UTF-8 byte counts as one).
std::size_t utf16_units(std::string_view text);

// `text` cut into pieces of at most `max_units` UTF-16 units each, in order; their concatenation
// is `text`. A piece ends after the last newline of its window when that keeps it at least half
// full. Empty text: no pieces. Once text is longer than a piece, that piece never changes as the
// text grows (streaming relies on it).
std::vector<std::string> split_message(std::string_view text,
                                       std::size_t max_units = kMaxMessageUnits);

}  // namespace kernex::telegram
