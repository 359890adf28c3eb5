// Untrusted JSON (HTTP bodies, MCP and REPL messages, tool output) and the conversions of what
// parses into the kernel's Request, Usage, ToolCall and ToolSpec.
#include "fuzz.hpp"
#include "kernex/json.hpp"
#include "kernex/message.hpp"
#include "kernex/tool.hpp"

namespace {

template <typename T>
void convert(const kernex::Json& json) {
  try {
    T value = json.get<T>();
    kernex::Json back = value;  // what was read must write back without failing
    (void)back.dump();
  } catch (const kernex::Json::exception&) {
    // a typed error naming the field is the expected answer to a bad document
  }
}

}  // namespace

KERNEX_FUZZ_TARGET(json_untrusted) {
  const kernex::Json json = kernex::parse_untrusted(kernex::fuzz::text(data, size));
  if (json.is_discarded()) return 0;
  (void)json.dump();
  convert<kernex::Request>(json);
  convert<kernex::ToolCall>(json);
  convert<kernex::ToolSpec>(json);
  convert<kernex::Usage>(json);
  return 0;
}
