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
// index), or npos when it is not closed.
std::size_t string_end(std::string_view text, std::size_t open) {
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    if (text[i] == '\\')
      ++i;
    else if (text[i] == '"')
      return i;
  }
  return std::string_view::npos;
}

// Whether the string literal ending at `close` is an object key: a ':' follows it.
bool is_key(std::string_view text, std::size_t close) {
  const auto next = text.find_first_not_of(" \t\r\n", close + 1);
  return next != std::string_view::npos && text[next] == ':';
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
};

Registry& registry() {
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
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  add_grams(r.grams, secret);
  r.shortest = r.shortest == 0 ? secret.size() : std::min(r.shortest, secret.size());
  std::sort(r.grams.begin(), r.grams.end());
  r.grams.erase(std::unique(r.grams.begin(), r.grams.end()), r.grams.end());
}

std::string redact_secrets(std::string text) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  return redact_grams(std::move(text), r.grams);
}

std::string redact_secrets_in_json(std::string text) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  if (r.grams.empty()) return text;
  const std::size_t min_run = std::min(kSecretRunMinInValues, r.shortest);
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;
  for (auto open = text.find('"'); open != std::string::npos; open = text.find('"', open)) {
    const std::size_t close = string_end(text, open);
    if (close == std::string::npos) break;
    if (!is_key(text, close)) {
      out.append(text, copied, open + 1 - copied);
      out += redact_grams(text.substr(open + 1, close - open - 1), r.grams, min_run);
      copied = close;
    }
    open = close + 1;
  }
  out.append(text, copied);
  return out;
}

}  // namespace kernex
