#include "frontmatter.hpp"

#include <cctype>
#include <vector>

#include "text.hpp"

namespace kernex::skills::detail {
namespace {

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// `key = ...` with a bare or quoted key (dotted keys included), or a `[table]` header.
bool looks_like_toml(std::string_view block) {
  std::size_t pos = 0;
  while (pos < block.size()) {
    std::size_t end = block.find('\n', pos);
    if (end == std::string_view::npos) end = block.size();
    std::string_view line = trim(block.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') return true;
    std::size_t i = 0;
    while (i < line.size()) {
      char c = line[i];
      if (c == '"' || c == '\'') {
        std::size_t close = line.find(c, i + 1);
        if (close == std::string_view::npos) return false;
        i = close + 1;
      } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
                 c == ' ' || c == '\t') {
        ++i;
      } else {
        break;
      }
    }
    return i > 0 && i < line.size() && line[i] == '=';
  }
  return false;
}

}  // namespace

std::expected<Frontmatter, SplitFailure> split_frontmatter(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0; pos <= text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(pos));
      break;
    }
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  std::size_t open = 0;
  while (open < lines.size() && trim(lines[open]).empty()) ++open;
  if (open == lines.size()) {
    return std::unexpected(
        SplitFailure{1, "the file is empty; expected frontmatter between '---' lines"});
  }
  std::string_view fence = rtrim(lines[open]);
  if (fence != "---" && fence != "+++") {
    return std::unexpected(SplitFailure{static_cast<int>(open + 1),
                                        "expected the file to start with a '---' line opening the "
                                        "frontmatter (YAML, or TOML in kernex style)"});
  }
  std::size_t close = open + 1;
  while (close < lines.size() && rtrim(lines[close]) != fence) ++close;
  if (close >= lines.size()) {
    return std::unexpected(SplitFailure{static_cast<int>(open + 1),
                                        "the frontmatter opened with '" + std::string(fence) +
                                            "' is never closed; expected a closing '" +
                                            std::string(fence) + "' line"});
  }
  Frontmatter fm;
  fm.first_line = static_cast<int>(open + 2);
  for (std::size_t i = open + 1; i < close; ++i) {
    fm.block += lines[i];
    fm.block += '\n';
  }
  fm.format = fence == "+++" || looks_like_toml(fm.block) ? SourceFormat::Toml : SourceFormat::Yaml;
  std::string body;
  for (std::size_t i = close + 1; i < lines.size(); ++i) {
    body += lines[i];
    if (i + 1 < lines.size()) body += '\n';
  }
  std::size_t start = 0;
  while (start < body.size() &&
         (body[start] == '\n' || body[start] == ' ' || body[start] == '\t')) {
    // Keep indentation of the first non-blank line: only whole blank lines are dropped.
    std::size_t nl = body.find('\n', start);
    if (nl == std::string::npos || !trim(std::string_view(body).substr(start, nl - start)).empty())
      break;
    start = nl + 1;
  }
  std::string_view rest = std::string_view(body).substr(start);
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back())))
    rest.remove_suffix(1);
  fm.body = std::string(rest);
  return fm;
}

}  // namespace kernex::skills::detail
