// Finds personal data and secrets in text: e-mail addresses, phone numbers, payment card numbers
// (Luhn-checked) and key-shaped secrets (provider API keys, cloud access keys, tokens, private
// key blocks). Hand-written scanners, linear in the input: tool output is untrusted and may be
// large, so no backtracking regular expressions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kernex::pii {

enum class Kind { Email, Phone, Card, Secret };

const char* kind_name(Kind kind);                   // "EMAIL", "PHONE", "CARD", "SECRET"
bool parse_kind(std::string_view name, Kind& out);  // "email", "phone", "card", "secret"

struct Match {
  std::size_t begin = 0;
  std::size_t end = 0;  // one past the last byte
  Kind kind = Kind::Email;
};

// Non-overlapping matches in text order for the enabled kinds. Where two overlap, the longer
// wins (a card number inside a phone-like run is a card).
std::vector<Match> scan(std::string_view text, const std::vector<Kind>& kinds);

bool luhn_valid(std::string_view digits);

}  // namespace kernex::pii
