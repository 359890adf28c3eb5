#include "text.hpp"

#include "kernex/files.hpp"

#include <cstring>

namespace kernex::skills::detail {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool iequals_ascii(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ascii_lower(a) == ascii_lower(b);
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0.
std::size_t sequence_length(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t len = 0;
  char32_t min = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    min = 0x80;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    min = 0x800;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    min = 0x10000;
    cp = c & 0x07;
  } else
    return 0;
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  while (auto bad = invalid_utf8_at(s)) {
    out.append(s.substr(0, *bad));
    out += "\xEF\xBF\xBD";
    s.remove_prefix(*bad + 1);
  }
  out.append(s);
  return out;
}

std::optional<std::size_t> invalid_utf8_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = sequence_length(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

int line_of(std::string_view text, std::size_t pos) {
  int line = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
  }
  return line;
}

std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = sequence_length(s, i);
    if (len == 0) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i]);
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string normalize_newlines(std::string_view raw, bool strip_bom) {
  if (strip_bom && raw.substr(0, 3) == "\xEF\xBB\xBF") raw.remove_prefix(3);
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      out.push_back(raw[i]);
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out += separator;
    out += items[i];
  }
  return out;
}

FileText read_file_capped(const std::string& path, std::size_t cap) {
  FileText result;
  auto text = read_regular_file(path, "file", cap);
  if (text) {
    result.text = std::move(*text);
  } else if (text.error().code == ErrorCode::Limit) {
    result.too_large = true;
  } else {
    result.error = text.error().message;
  }
  return result;
}

}  // namespace kernex::skills::detail
