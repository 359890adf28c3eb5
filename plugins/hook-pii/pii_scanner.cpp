#include "pii_scanner.hpp"

#include <algorithm>
#include <array>

namespace kernex::pii {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_alnum(char c) { return is_digit(c) || is_alpha(c); }
bool is_upper_or_digit(char c) { return is_digit(c) || (c >= 'A' && c <= 'Z'); }
bool is_local_char(char c) {
  return is_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}
bool is_domain_char(char c) { return is_alnum(c) || c == '.' || c == '-'; }
bool is_token_char(char c) { return is_alnum(c) || c == '_' || c == '-'; }
bool is_base64url(char c) { return is_alnum(c) || c == '_' || c == '-' || c == '='; }

void emails(std::string_view t, std::vector<Match>& out) {
  for (std::size_t at = t.find('@'); at != std::string_view::npos; at = t.find('@', at + 1)) {
    std::size_t b = at;
    while (b > 0 && is_local_char(t[b - 1])) --b;
    while (b < at && (t[b] == '.' || t[b] == '-')) ++b;
    if (b == at) continue;
    std::size_t e = at + 1;
    while (e < t.size() && is_domain_char(t[e])) ++e;
    while (e > at + 1 && (t[e - 1] == '.' || t[e - 1] == '-')) --e;
    const std::string_view domain = t.substr(at + 1, e - at - 1);
    const auto dot = domain.rfind('.');
    if (dot == std::string_view::npos || dot == 0 || domain.size() - dot - 1 < 2) continue;
    if (!std::all_of(domain.begin() + static_cast<std::ptrdiff_t>(dot) + 1, domain.end(), is_alpha))
      continue;
    out.push_back({b, e, Kind::Email});
  }
}

// Runs of digits joined by single spaces or dashes: card numbers (13-19 digits, Luhn-valid).
void cards(std::string_view t, std::vector<Match>& out) {
  std::size_t i = 0;
  while (i < t.size()) {
    if (!is_digit(t[i]) || (i > 0 && is_alnum(t[i - 1]))) {
      ++i;
      continue;
    }
    std::string digits;
    std::size_t j = i, end = i;
    while (j < t.size()) {
      if (is_digit(t[j])) {
        digits += t[j++];
        end = j;
      } else if ((t[j] == ' ' || t[j] == '-') && j + 1 < t.size() && is_digit(t[j + 1])) {
        ++j;
      } else {
        break;
      }
      if (digits.size() > 19) break;
    }
    const bool bounded = end >= t.size() || !is_alnum(t[end]);
    if (bounded && digits.size() >= 13 && digits.size() <= 19 && luhn_valid(digits))
      out.push_back({i, end, Kind::Card});
    i = std::max(end, i + 1);
  }
}

// "+1 415-555-0132", "(415) 555-0132": 7-15 digits after a '+', or 9-15 digits in at least three
// groups, so ids, counts and dates (2026-11-25) are left alone; dots never separate (IPs,
// versions).
void phones(std::string_view t, std::vector<Match>& out) {
  std::size_t i = 0;
  while (i < t.size()) {
    const bool plus = t[i] == '+' && i + 1 < t.size() && is_digit(t[i + 1]);
    const bool paren = t[i] == '(' && i + 1 < t.size() && is_digit(t[i + 1]);
    if (!(plus || paren || is_digit(t[i])) || (i > 0 && (is_alnum(t[i - 1]) || t[i - 1] == '+'))) {
      ++i;
      continue;
    }
    std::size_t j = i + (plus ? 1 : 0), end = j, digits = 0, separators = 0;
    while (j < t.size()) {
      const char c = t[j];
      if (is_digit(c)) {
        ++digits;
        end = ++j;
      } else if ((c == ' ' || c == '-' || c == '(' || c == ')') && j + 1 < t.size() &&
                 (is_digit(t[j + 1]) || t[j + 1] == '(' || (c == ')' && t[j + 1] == ' '))) {
        ++separators;
        ++j;
      } else {
        break;
      }
      if (digits > 15) break;
    }
    if (end < t.size() && t[end] == ')') ++end;
    const bool bounded = end >= t.size() || !is_alnum(t[end]);
    if (bounded && digits <= 15 && (plus ? digits >= 7 : (digits >= 9 && separators >= 2)))
      out.push_back({i, end, Kind::Phone});
    i = std::max(end, i + 1);
  }
}

struct Prefix {
  std::string_view text;
  std::size_t min_body;
  bool upper_digits;  // body is [A-Z0-9] (cloud access key ids)
};

constexpr std::array kPrefixes{
    Prefix{"sk-ant-", 20, false}, Prefix{"sk-proj-", 20, false}, Prefix{"sk-", 20, false},
    Prefix{"ghp_", 20, false},    Prefix{"gho_", 20, false},     Prefix{"ghu_", 20, false},
    Prefix{"ghs_", 20, false},    Prefix{"ghr_", 20, false},     Prefix{"github_pat_", 20, false},
    Prefix{"xoxb-", 10, false},   Prefix{"xoxp-", 10, false},    Prefix{"xoxa-", 10, false},
    Prefix{"AKIA", 16, true},     Prefix{"ASIA", 16, true},      Prefix{"AIza", 30, false},
    Prefix{"glpat-", 20, false},  Prefix{"rk_live_", 16, false}, Prefix{"sk_live_", 16, false},
};

void secrets(std::string_view t, std::vector<Match>& out) {
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (i > 0 && is_token_char(t[i - 1])) continue;
    // PEM private key blocks, whole.
    if (t[i] == '-' && t.substr(i, 11) == "-----BEGIN ") {
      const auto line_end = t.find("-----", i + 11);
      if (line_end != std::string_view::npos &&
          t.substr(i, line_end - i).find("PRIVATE KEY") != std::string_view::npos) {
        const auto close = t.find("-----END ", line_end);
        const auto close_end =
            close == std::string_view::npos ? std::string_view::npos : t.find("-----", close + 9);
        const std::size_t e = close_end == std::string_view::npos ? t.size() : close_end + 5;
        out.push_back({i, e, Kind::Secret});
        i = e - 1;
        continue;
      }
    }
    // JSON Web Tokens: eyJ<header>.<payload>.<signature>
    if (t.substr(i, 3) == "eyJ") {
      std::size_t j = i, dots = 0;
      for (; j < t.size(); ++j) {
        if (t[j] == '.' && dots < 2) {
          ++dots;
        } else if (!is_base64url(t[j])) {
          break;
        }
      }
      if (dots == 2 && j - i >= 30) {
        out.push_back({i, j, Kind::Secret});
        i = j - 1;
        continue;
      }
    }
    for (const auto& p : kPrefixes) {
      if (t.substr(i, p.text.size()) != p.text) continue;
      std::size_t j = i + p.text.size();
      while (j < t.size() && (p.upper_digits ? is_upper_or_digit(t[j]) : is_token_char(t[j]))) ++j;
      if (j - i - p.text.size() >= p.min_body) {
        out.push_back({i, j, Kind::Secret});
        i = j - 1;
      }
      break;
    }
  }
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Email:
      return "EMAIL";
    case Kind::Phone:
      return "PHONE";
    case Kind::Card:
      return "CARD";
    case Kind::Secret:
      return "SECRET";
  }
  return "PII";
}

bool parse_kind(std::string_view name, Kind& out) {
  if (name == "email")
    out = Kind::Email;
  else if (name == "phone")
    out = Kind::Phone;
  else if (name == "card")
    out = Kind::Card;
  else if (name == "secret")
    out = Kind::Secret;
  else
    return false;
  return true;
}

bool luhn_valid(std::string_view digits) {
  int sum = 0;
  bool twice = false;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (!is_digit(*it)) return false;
    int d = *it - '0';
    if (twice && (d *= 2) > 9) d -= 9;
    sum += d;
    twice = !twice;
  }
  return !digits.empty() && sum % 10 == 0;
}

std::vector<Match> scan(std::string_view text, const std::vector<Kind>& kinds) {
  std::vector<Match> found;
  auto on = [&](Kind k) { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); };
  if (on(Kind::Secret)) secrets(text, found);
  if (on(Kind::Email)) emails(text, found);
  if (on(Kind::Card)) cards(text, found);
  if (on(Kind::Phone)) phones(text, found);
  // In text order; of two overlapping matches the longer stays.
  std::sort(found.begin(), found.end(), [](const Match& a, const Match& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<Match> kept;
  for (const auto& m : found) {
    if (!kept.empty() && m.begin < kept.back().end) {
      if (m.end - m.begin > kept.back().end - kept.back().begin) kept.back() = m;
      continue;
    }
    kept.push_back(m);
  }
  return kept;
}

}  // namespace kernex::pii
