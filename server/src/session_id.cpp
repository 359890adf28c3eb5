#include "session_id.hpp"

#include <openssl/evp.h>

#include <array>

namespace kernex::server {
namespace {

// Length of the UTF-8 sequence starting at s[i] (0: invalid), overlongs and surrogates refused.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

bool plain_name(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return id[0] != '_' && id[0] != '-';
}

std::string digest_hex(std::string_view text, std::size_t hex_digits) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), md.data(), &n, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n && out.size() < hex_digits; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0xF];
  }
  return out;
}

}  // namespace

bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxSessionIdBytes) return false;
  for (std::size_t i = 0; i < id.size();) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c == 0x7F) return false;
    const std::size_t n = utf8_length(id, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string session_dir_name(std::string_view id) {
  if (plain_name(id)) return std::string(id);
  std::string prefix;
  for (const char c : id) {
    if (prefix.size() >= 32) break;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      prefix += c;
    } else if (c >= 'A' && c <= 'Z') {
      prefix += static_cast<char>(c - 'A' + 'a');
    } else if (!prefix.empty() && prefix.back() != '_') {
      prefix += '_';  // one '_' for a run of anything else (punctuation, non-ASCII)
    }
  }
  if (prefix.empty()) prefix = "s";
  return prefix + "." + digest_hex(id, 24);
}

}  // namespace kernex::server
