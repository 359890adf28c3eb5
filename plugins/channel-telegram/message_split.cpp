#include "message_split.hpp"

namespace kernex::telegram {

namespace {

// Bytes and UTF-16 units of the code point starting at text[i].
struct CodePoint {
  std::size_t bytes = 1;
  std::size_t units = 1;
};

CodePoint code_point_at(std::string_view text, std::size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  std::size_t len = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xE  ? 3
                    : (c >> 3) == 0x1E ? 4
                                       : 0;
  if (len == 0 || i + len > text.size()) return {};  // invalid lead byte or truncated: one byte
  for (std::size_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return {};
  return {len, len == 4 ? 2u : 1u};
}

}  // namespace

std::size_t utf16_units(std::string_view text) {
  std::size_t units = 0;
  for (std::size_t i = 0; i < text.size();) {
    const CodePoint cp = code_point_at(text, i);
    units += cp.units;
    i += cp.bytes;
  }
  return units;
}

std::vector<std::string> split_message(std::string_view text, std::size_t max_units) {
  std::vector<std::string> parts;
  if (max_units < 2) max_units = 2;  // a surrogate pair must fit
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = start, units = 0, last_newline = std::string_view::npos;
    while (end < text.size()) {
      const CodePoint cp = code_point_at(text, end);
      if (units + cp.units > max_units) break;
      units += cp.units;
      if (text[end] == '\n') last_newline = end;
      end += cp.bytes;
    }
    if (end < text.size() && last_newline != std::string_view::npos &&
        last_newline + 1 - start >= (end - start) / 2)
      end = last_newline + 1;
    parts.emplace_back(text.substr(start, end - start));
    start = end;
  }
  return parts;
}

}  // namespace kernex::telegram
