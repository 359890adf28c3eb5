#include "html_text.hpp"

#include <cstdio>

#include "kernex/markup_escape.hpp"

namespace kernex::html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (const char* entity = markup_entity(c)) {
      out += entity;
      continue;
    }
    switch (c) {
      case '\'':
        out += "&#39;";
        break;
      case '\t':
      case '\n':
      case '\r':
        out += c;
        break;
      default:
        if (byte < 0x20 || byte == 0x7f)
          out += "\xEF\xBF\xBD";  // U+FFFD
        else
          out += c;
    }
  }
  return out;
}

std::string cap_label(std::string_view text, std::size_t max_bytes) {
  const std::size_t line_end = text.find_first_of("\r\n");
  std::string_view line = text.substr(0, line_end);
  bool cut = line_end != std::string_view::npos &&
             text.find_first_not_of(" \t\r\n", line_end) != std::string_view::npos;
  if (line.size() > max_bytes) {
    std::size_t n = max_bytes;
    // Back off over continuation bytes (10xxxxxx) so no character is split.
    while (n > 0 && (static_cast<unsigned char>(line[n]) & 0xC0) == 0x80) --n;
    line = line.substr(0, n);
    cut = true;
  }
  return cut ? std::string(line) + "…" : std::string(line);
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

}  // namespace kernex::html
