// Permission `Tool(glob)` matching (glob_match, pattern_matches), checked against a reference
// written from the documented semantics (kernex core spec, "glob_match"): whole-string match over
// Unicode scalar values, '*' any sequence including the empty one, every other character literal
// and compared ASCII case-insensitively. Input: `<glob>\n<text>`. A disagreement traps.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz.hpp"
#include "kernex/permissions.hpp"

namespace {

// UTF-8 to scalar values; nullopt on anything that is not valid UTF-8 (the reference is defined
// over characters, production over bytes: they need only agree on text).
std::optional<std::vector<char32_t>> decode(std::string_view s) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return std::nullopt;
    char32_t c = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont >> 6) != 2) return std::nullopt;
      c = (c << 6) | (cont & 0x3F);
    }
    const char32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
    out.push_back(c);
    i += len;
  }
  return out;
}

char32_t fold(char32_t c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

// The textbook table: m[i][j] = glob[0, i) matches text[0, j).
bool reference_glob(const std::vector<char32_t>& g, const std::vector<char32_t>& t) {
  std::vector<std::vector<bool>> m(g.size() + 1, std::vector<bool>(t.size() + 1, false));
  m[0][0] = true;
  for (std::size_t i = 1; i <= g.size(); ++i) {
    for (std::size_t j = 0; j <= t.size(); ++j) {
      if (g[i - 1] == U'*')
        m[i][j] = m[i - 1][j] || (j > 0 && m[i][j - 1]);
      else
        m[i][j] = j > 0 && m[i - 1][j - 1] && fold(g[i - 1]) == fold(t[j - 1]);
    }
  }
  return m[g.size()][t.size()];
}

}  // namespace

KERNEX_FUZZ_TARGET(permission_glob) {
  const std::string_view input = kernex::fuzz::text(data, size);
  const auto split = input.find('\n');
  const std::string_view glob = input.substr(0, split);
  const std::string_view text = split == std::string_view::npos ? "" : input.substr(split + 1);
  const bool matched = kernex::glob_match(glob, text);
  // The rule form: a tool name, then the glob in parentheses, against the same arguments.
  const std::string rule = "Bash(" + std::string(glob) + ")";
  if (kernex::pattern_matches(rule, "bash", text) != matched) __builtin_trap();
  if (kernex::pattern_matches(rule, "bashx", text)) __builtin_trap();
  const auto g = decode(glob);
  const auto t = decode(text);
  if (!g || !t || (g->size() + 1) * (t->size() + 1) > 4'000'000) return 0;
  if (reference_glob(*g, *t) != matched) __builtin_trap();
  return 0;
}
