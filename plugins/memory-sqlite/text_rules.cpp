#include "text_rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <random>

namespace kernex::sqlite {

std::optional<std::size_t> invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned char c = byte(i);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else
      return i;
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    static constexpr std::array<std::uint32_t, 5> kMin{0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

std::string fts_query(std::string_view text, std::string_view joiner) {
  static constexpr std::array<std::string_view, 24> kQuestionWords{
      "what", "when", "where", "which", "who",  "whom",   "whose", "why",
      "how",  "you",  "your",  "yours", "tell", "please", "does",  "did",
      "not",  "its",  "our",   "they",  "them", "there",  "their", "just"};
  constexpr std::size_t kMaxWords = 16;
  std::vector<std::string> seen;
  std::string out;
  for (auto& w : significant_words(text)) {
    if (std::find(kQuestionWords.begin(), kQuestionWords.end(), w) != kQuestionWords.end())
      continue;
    if (std::find(seen.begin(), seen.end(), w) != seen.end()) continue;
    if (seen.size() == kMaxWords) break;
    seen.push_back(w);
    if (!out.empty()) out += joiner;
    out += '"';
    for (char c : w) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
  }
  return out;
}

Result<std::string> normalize_time(std::string_view text, std::string_view field) {
  std::string s(text);
  while (!s.empty() && (s.back() == 'Z' || s.back() == 'z')) s.pop_back();
  if (auto t = s.find('T'); t != std::string::npos) s[t] = ' ';
  if (s.size() == 16) s += ":00";
  // Drop fractional seconds: the store keeps second resolution.
  if (s.size() > 19 && s[19] == '.') s.resize(19);
  const auto bad = [&] {
    return fail(ErrorCode::Parse, std::string(field) +
                                      ": expected a UTC time like 2026-12-31 15:00:00 or "
                                      "2026-12-31T15:00:00Z, got '" +
                                      std::string(text) + "'");
  };
  if (s.size() != 19) return bad();
  static constexpr std::string_view kShape = "dddd-dd-dd dd:dd:dd";
  for (std::size_t i = 0; i < kShape.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(s[i])) != 0;
    if (kShape[i] == 'd' ? !digit : s[i] != kShape[i]) return bad();
  }
  const int year = std::stoi(s.substr(0, 4)), month = std::stoi(s.substr(5, 2)),
            day = std::stoi(s.substr(8, 2));
  const int hour = std::stoi(s.substr(11, 2)), minute = std::stoi(s.substr(14, 2)),
            sec = std::stoi(s.substr(17, 2));
  if (month < 1 || month > 12 || hour > 23 || minute > 59 || sec > 59) return bad();
  // A day the month has: 2026-02-30 is no time at all (PostgreSQL refuses to cast it, SQLite's
  // date functions return NULL), so it is refused here for both stores.
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (day < 1 || day > kDays[month - 1] + (month == 2 && leap ? 1 : 0)) return bad();
  return s;
}

std::vector<std::string> significant_words(std::string_view text) {
  static constexpr std::array<std::string_view, 41> kStop{
      "the",      "and",    "for",  "that",  "this",   "with",   "from",    "are",    "was",
      "were",     "been",   "have", "has",   "had",    "will",   "would",   "could",  "should",
      "may",      "might",  "can",  "about", "into",   "over",   "after",   "before", "between",
      "under",    "again",  "then", "once",  "daily",  "weekly", "monthly", "cada",   "diario",
      "escribir", "enviar", "usar", "nunca", "siempre"};
  std::vector<std::string> words;
  std::string word;
  const auto flush = [&] {
    if (word.size() >= 3 && std::find(kStop.begin(), kStop.end(), word) == kStop.end()) {
      words.push_back(word);
    }
    word.clear();
  };
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    // Bytes of multi-byte UTF-8 characters count as letters (accented words stay whole).
    if (c >= 0x80 || std::isalnum(c)) {
      word += static_cast<char>(std::tolower(c));
    } else {
      flush();
    }
  }
  flush();
  return words;
}

bool similar_descriptions(std::string_view a, std::string_view b) {
  auto wa = significant_words(a), wb = significant_words(b);
  if (wa.size() < 3 || wb.size() < 3) return false;
  const auto& small = wa.size() <= wb.size() ? wa : wb;
  const auto& large = wa.size() <= wb.size() ? wb : wa;
  std::size_t overlap = 0;
  for (const auto& w : small)
    overlap += std::find(large.begin(), large.end(), w) != large.end() ? 1 : 0;
  return overlap >= (small.size() + 1) / 2;
}

namespace {

std::array<unsigned char, 16> random_bytes() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::array<unsigned char, 16> b{};
  for (std::size_t i = 0; i < b.size(); i += 8) {
    const std::uint64_t r = rng();
    for (std::size_t k = 0; k < 8; ++k) b[i + k] = static_cast<unsigned char>(r >> (8 * k));
  }
  return b;
}

std::string uuid_text(std::array<unsigned char, 16> b, unsigned version) {
  b[6] = static_cast<unsigned char>((b[6] & 0x0F) | (version << 4));
  b[8] = static_cast<unsigned char>((b[8] & 0x3F) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 0x0F];
  }
  return out;
}

}  // namespace

std::string new_uuid() { return uuid_text(random_bytes(), 4); }

std::string new_time_ordered_uuid() {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  auto b = random_bytes();
  for (std::size_t i = 0; i < 6; ++i)
    b[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(ms) >> (8 * (5 - i)));
  return uuid_text(b, 7);
}

}  // namespace kernex::sqlite
