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
// marked run once: overlapping windows make one run, so a whole key or any cut piece of it goes.
std::string redact_grams(std::string text, const std::vector<std::uint64_t>& grams) {
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
    out += kRedacted;
    while (i < text.size() && marked[i]) ++i;
  }
  return out;
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
  std::sort(r.grams.begin(), r.grams.end());
  r.grams.erase(std::unique(r.grams.begin(), r.grams.end()), r.grams.end());
}

std::string redact_secrets(std::string text) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  return redact_grams(std::move(text), r.grams);
}

}  // namespace kernex
