#include "message_columns.hpp"

#include <vector>

namespace kernex::sqlite {
namespace {

// A column's JSON, nesting capped like any outside JSON (an imported document may hold anything).
Result<Json> parse_column(const std::optional<std::string>& text, const char* column,
                          std::int64_t seq, std::string_view store) {
  if (!text) return Json();
  Json parsed = parse_untrusted(*text);
  if (parsed.is_discarded())
    return fail(ErrorCode::Parse, std::string(store) + ": message " + std::to_string(seq) +
                                      ": column " + column +
                                      " holds invalid JSON (or JSON nested deeper than " +
                                      std::to_string(kMaxJsonDepth) + ")");
  return parsed;
}

}  // namespace

Result<std::string> dump_checked(const Json& j, const std::string& what) {
  try {
    return j.dump();
  } catch (const Json::exception& e) {
    return fail(ErrorCode::Parse, what + " is not valid UTF-8 (" + e.what() + ")");
  }
}

Result<EncodedColumns> encode_columns(const ContextEntry& e) {
  EncodedColumns out;
  if (!e.tool_calls.empty()) {
    KERNEX_ASSIGN_OR_RETURN(auto d, dump_checked(Json(e.tool_calls), "tool call arguments"));
    out.calls = d;
  }
  if (e.tool_result) {
    KERNEX_ASSIGN_OR_RETURN(auto d, dump_checked(Json(*e.tool_result), "a tool result"));
    out.result = d;
  }
  if (!e.provider_state.is_null()) {
    KERNEX_ASSIGN_OR_RETURN(auto d, dump_checked(e.provider_state, "provider state"));
    out.state = d;
  }
  return out;
}

Result<ContextEntry> decode_columns(StoredColumns c, std::string_view store) {
  ContextEntry e;
  e.role = std::move(c.role);
  e.content = std::move(c.content);
  KERNEX_ASSIGN_OR_RETURN(auto calls, parse_column(c.calls, "tool_calls", c.seq, store));
  KERNEX_ASSIGN_OR_RETURN(auto result, parse_column(c.result, "tool_result", c.seq, store));
  KERNEX_ASSIGN_OR_RETURN(auto state, parse_column(c.state, "provider_state", c.seq, store));
  try {
    if (calls.is_array()) e.tool_calls = calls.get<std::vector<ToolCall>>();
    if (result.is_object()) e.tool_result = result.get<ToolResult>();
  } catch (const Json::exception& ex) {
    return fail(ErrorCode::Parse,
                std::string(store) + ": message " + std::to_string(c.seq) + ": " + ex.what());
  }
  e.provider_state = std::move(state);
  return e;
}

}  // namespace kernex::sqlite
