// Text from a run made safe for the HTML page of `kernex logs view` and the inline SVG inside it:
// everything a model, a tool or code produced is untrusted and may hold markup, quotes, control
// characters or megabytes.
#pragma once

#include <string>
#include <string_view>

namespace kernex::html {

// Escapes the characters that are markup in text or in a quoted attribute value. C0 control
// characters other than tab, newline and carriage return, and DEL, become U+FFFD: they are parse
// errors in HTML and forbidden in XML, so a saved SVG would not open.
std::string escape(std::string_view text);

// The first line of `text`, cut to at most `max_bytes` bytes on a UTF-8 character boundary; "…"
// marks that something was left off.
std::string cap_label(std::string_view text, std::size_t max_bytes);

// `value` with `digits` decimals ("%.*f").
std::string fixed(double value, int digits);

}  // namespace kernex::html
