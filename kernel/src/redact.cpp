#include "kernex/redact.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <vector>

namespace kernex {
namespace {

constexpr std::string_view kRedacted = "[REDACTED]";
static_assert(kSecretPieceMin == sizeof(std::uint64_t), "pieces are compared as one word");

std::uint64_t word_at(std::string_view s, std::size_t at) {
  std::uint64_t w = 0;
  std::memcpy(&w, s.data() + at, sizeof w);
  return w;
}

// Every kSecretPieceMin-byte window of `secret`, as words, appended to `grams`.
void add_grams(std::vector<std::uint64_t>& grams, std::string_view secret) {
  for (std::size_t i = 0; i + kSecretPieceMin <= secret.size(); ++i)
    grams.push_back(word_at(secret, i));
}

// Marks each window of `text` that is a window of a secret (`grams` sorted), then replaces each
// marked run of at least `min_run` bytes once: overlapping windows make one run, so a whole key or
// any cut piece of it goes.
std::string redact_grams(std::string text, const std::vector<std::uint64_t>& grams,
                         std::size_t min_run = kSecretPieceMin) {
  if (grams.empty() || text.size() < kSecretPieceMin) return text;
  std::vector<bool> marked(text.size(), false);
  bool any = false;
  for (std::size_t i = 0; i + kSecretPieceMin <= text.size(); ++i) {
    if (!std::binary_search(grams.begin(), grams.end(), word_at(text, i))) continue;
    any = true;
    std::fill(marked.begin() + static_cast<std::ptrdiff_t>(i),
              marked.begin() + static_cast<std::ptrdiff_t>(i + kSecretPieceMin), true);
  }
  if (!any) return text;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (!marked[i]) {
      out += text[i++];
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && marked[end]) ++end;
    if (end - i >= min_run)
      out += kRedacted;
    else
      out.append(text, i, end - i);
    i = end;
  }
  return out;
}

// The end of the JSON string literal whose opening quote is at `open` (the closing quote's
// index), or npos when it is not closed on its line: no JSON string holds a raw newline, so a
// stray quote (in a metrics HELP text, an SSE comment) never pairs with one on a later line.
std::size_t string_end(std::string_view text, std::size_t open) {
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    if (text[i] == '\\')
      ++i;
    else if (text[i] == '"')
      return i;
    else if (text[i] == '\n')
      return std::string_view::npos;
  }
  return std::string_view::npos;
}

// The ':' after the string literal ending at `close` when it is an object key (on its line), else
// npos.
std::size_t key_colon(std::string_view text, std::size_t close) {
  const auto next = text.find_first_not_of(" \t", close + 1);
  return next != std::string_view::npos && text[next] == ':' ? next : std::string_view::npos;
}

// Fields whose values are protocol, not prose: enumerations a client switches on (an SSE event's
// `type`, an `object`, a `role`) and ids it matches (`id`, `*_id`), like field names themselves.
bool names_protocol(std::string_view key) {
  static constexpr std::string_view kNames[] = {
      "id", "object", "type", "role", "status", "event", "model", "finish_reason", "name"};
  return std::find(std::begin(kNames), std::end(kNames), key) != std::end(kNames) ||
         key.ends_with("_id") || key.ends_with("Id");
}

std::string redact_whole(std::string text, std::string_view secret) {
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at)) {
    text.replace(at, secret.size(), kRedacted);
    at += kRedacted.size();
  }
  return text;
}

struct Registry {
  std::shared_mutex mu;
  std::vector<std::uint64_t> grams;  // sorted, unique
  std::size_t shortest = 0;          // the shortest registered secret's length (0: none)
  std::vector<std::string> whole;    // the secrets themselves, for names and ids
};

// In a field name, an id or an enumeration only a whole secret is a leak: a piece of one there is
// a name that happens to share bytes with a key (a key ending in `approvals`).
std::string redact_whole_secrets(std::string text, const Registry& r) {
  for (const auto& secret : r.whole) text = redact_whole(std::move(text), secret);
  return text;
}

Registry& redaction_registry() {
  static Registry r;
  return r;
}

}  // namespace

std::string redact(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  if (secret.size() < kSecretPieceMin) return redact_whole(std::move(text), secret);
  std::vector<std::uint64_t> grams;
  add_grams(grams, secret);
  std::sort(grams.begin(), grams.end());
  return redact_grams(std::move(text), grams);
}

void register_secret(std::string_view secret) {
  if (secret.size() < kSecretPieceMin) return;
  Registry& r = redaction_registry();
  std::unique_lock lock(r.mu);
  add_grams(r.grams, secret);
  if (std::find(r.whole.begin(), r.whole.end(), secret) == r.whole.end())
    r.whole.emplace_back(secret);
  r.shortest = r.shortest == 0 ? secret.size() : std::min(r.shortest, secret.size());
  std::sort(r.grams.begin(), r.grams.end());
  r.grams.erase(std::unique(r.grams.begin(), r.grams.end()), r.grams.end());
}

std::string redact_secrets(std::string text) {
  Registry& r = redaction_registry();
  std::shared_lock lock(r.mu);
  return redact_grams(std::move(text), r.grams);
}

std::string redact_secrets_in_json(std::string text) {
  return redact_secrets_in_json(std::move(text), kSecretRunMinInValues);
}

std::string redact_secrets_in_json(std::string text, std::size_t min_run) {
  Registry& r = redaction_registry();
  std::shared_lock lock(r.mu);
  if (r.grams.empty()) return text;
  min_run = std::max(kSecretPieceMin, std::min(min_run, r.shortest));
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;
  std::string_view key;  // the last field name, and where its value may start
  std::size_t value_at = std::string::npos;
  for (auto open = text.find('"'); open != std::string::npos; open = text.find('"', open)) {
    const std::size_t close = string_end(text, open);
    if (close == std::string::npos) {
      ++open;  // a stray quote: the rest of its line is outside any string
      continue;
    }
    const std::string_view literal(text.data() + open + 1, close - open - 1);
    const std::size_t colon = key_colon(text, close);
    const bool value_of_key = value_at != std::string::npos && open >= value_at &&
                              text.find_first_not_of(" \t", value_at) == open;
    // A field name, a protocol value, or a metrics label value (`tenant="acme"`): whole secrets.
    const bool name = colon != std::string::npos || (open > 0 && text[open - 1] == '=') ||
                      (value_of_key && names_protocol(key));
    std::string redacted = name ? redact_whole_secrets(std::string(literal), r)
                                : redact_grams(std::string(literal), r.grams, min_run);
    if (redacted != literal) {
      out.append(text, copied, open + 1 - copied);
      out += redacted;
      copied = close;
    }
    if (colon != std::string::npos) {
      key = literal;
      value_at = colon + 1;
    }
    open = close + 1;
  }
  out.append(text, copied);
  return out;
}

}  // namespace kernex
