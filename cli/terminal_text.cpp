#include "terminal_text.hpp"

#include <cstdio>

namespace kernex::cli {
namespace {

void append_escape(std::string& out, const char* format, unsigned code) {
  char buf[8];
  std::snprintf(buf, sizeof buf, format, code);
  out += buf;
}

}  // namespace

std::string for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0u;
    if ((c < 0x20 && c != '\n' && c != '\t')) {
      append_escape(out, "\\x%02x", c);
    } else if (c == 0x7f) {
      append_escape(out, "\\u%04x", c);
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // U+0080..U+009F
      append_escape(out, "\\u%04x", next);
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace kernex::cli
