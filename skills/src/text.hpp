// Text helpers shared by the parsers and linters.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kernex::skills::detail {

std::string_view trim(std::string_view s);
std::string ascii_lower(std::string_view s);
bool iequals_ascii(std::string_view a, std::string_view b);

// Offset of the first byte that is not part of valid UTF-8, or nullopt.
std::optional<std::size_t> invalid_utf8_at(std::string_view s);
// `s` with each byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string valid_utf8(std::string_view s);
// 1-based line number of byte offset `pos`.
int line_of(std::string_view text, std::size_t pos);
// Number of code points (Python's len()) of valid UTF-8.
std::size_t code_points(std::string_view s);
// Decodes valid UTF-8 into code points.
std::u32string decode_utf8(std::string_view s);

// Drops a UTF-8 BOM and turns CRLF and lone CR into LF.
std::string normalize_newlines(std::string_view raw, bool strip_bom);

// "a, b, c".
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

// A regular file of at most `cap` bytes, read through kernex::read_regular_file (a FIFO, device or
// directory is an error, never a hang). Errors are returned as text.
struct FileText {
  std::string text;
  bool too_large = false;
  std::string error;  // non-empty when the file could not be read
};
FileText read_file_capped(const std::string& path, std::size_t cap);

}  // namespace kernex::skills::detail
