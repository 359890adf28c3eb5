// The REPL worker's reply line: the eval fast path (eval_content, one SAX pass) and, as the
// toolbox does when the fast path declines, the general parse (parse_untrusted). Whatever the
// fast path accepts must be what the general path reads: an {"ok":true,"value":{...}} reply whose
// value, with wall_ms added, is the content the fast path made. A disagreement traps.
#include <string>

#include "eval_reply.hpp"
#include "fuzz.hpp"
#include "kernex/json.hpp"

KERNEX_FUZZ_TARGET(repl_reply) {
  const std::string_view reply = kernex::fuzz::text(data, size);
  const kernex::Json general = kernex::parse_untrusted(reply);
  auto fast = kernex::repl::eval_content(reply, 12.5);
  if (!fast) return 0;
  if (!general.is_object() || general.value("ok", false) != true || !general.contains("value") ||
      !general["value"].is_object())
    __builtin_trap();  // the fast path took a reply the general path reads differently
  const kernex::Json content = kernex::parse_untrusted(fast->content);
  kernex::Json expected = general["value"];
  expected["wall_ms"] = 12.5;
  if (content != expected) __builtin_trap();
  if (fast->is_error != expected.contains("error")) __builtin_trap();
  return 0;
}
