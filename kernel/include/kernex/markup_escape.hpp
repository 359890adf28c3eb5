// Escaping text for XML and HTML, in one place: the skills' XML catalogue and the trajectory
// viewer's HTML both write untrusted text (names, descriptions, tool output) between tags and into
// double-quoted attributes.
#pragma once

#include <string>
#include <string_view>

namespace kernex {

// The entity for & < > and ", the characters that end text or a double-quoted attribute; null for
// any other character.
constexpr const char* markup_entity(char c) {
  switch (c) {
    case '&':
      return "&amp;";
    case '<':
      return "&lt;";
    case '>':
      return "&gt;";
    case '"':
      return "&quot;";
    default:
      return nullptr;
  }
}

// `text` with & < > " replaced by their entities, everything else as it is.
inline std::string escape_markup(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (const char* entity = markup_entity(c))
      out += entity;
    else
      out += c;
  }
  return out;
}

}  // namespace kernex
