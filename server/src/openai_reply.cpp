#include "openai_reply.hpp"

namespace kernex::server {

std::string finish_reason(const Json& result) {
  const std::string outcome = result.value("outcome", "end_turn");
  if (outcome == "end_turn") return "stop";
  if (outcome == "client_tool_calls") return "tool_calls";
  if (outcome == "cancelled") return "cancelled";
  return "length";
}

Json openai_usage(const Json& usage) {
  const auto n = [&](const char* key) { return uint_value(usage, key); };
  const std::uint64_t cached = n("cache_read_tokens");
  const std::uint64_t in = n("input_tokens") + cached + n("cache_write_tokens");
  const std::uint64_t out = n("output_tokens");
  return {{"prompt_tokens", in},
          {"completion_tokens", out},
          {"total_tokens", in + out},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

namespace {
std::string arguments_text(const Json& arguments) {
  if (arguments.is_string()) return arguments.get<std::string>();
  return arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
}
}  // namespace

Json openai_tool_calls(const Json& result) {
  Json calls = Json::array();
  if (!result.contains("client_tool_calls") || !result["client_tool_calls"].is_array())
    return calls;
  for (const auto& c : result["client_tool_calls"]) {
    calls.push_back({{"id", c.value("id", "")},
                     {"type", "function"},
                     {"function",
                      {{"name", c.value("name", "")},
                       {"arguments", arguments_text(c.value("arguments", Json::object()))}}}});
  }
  return calls;
}

Json openai_message(const Json& result) {
  const std::string text = result.value("text", "");
  Json calls = openai_tool_calls(result);
  Json message{{"role", "assistant"},
               {"content", text.empty() && !calls.empty() ? Json(nullptr) : Json(text)},
               {"refusal", nullptr}};
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  return message;
}

Json chunk(const ChunkHead& head, Json delta, const Json& finish_reason) {
  return {{"id", head.id},
          {"object", "chat.completion.chunk"},
          {"created", head.created},
          {"model", head.model},
          {"choices",
           Json::array(
               {{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish_reason}}})}};
}

std::string data_line(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string final_chunks(const ChunkHead& head, const Json& result, bool include_usage) {
  std::string out;
  const Json calls = openai_tool_calls(result);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    Json call = calls[i];
    call["index"] = i;
    out += data_line(chunk(head, {{"tool_calls", Json::array({call})}}, nullptr));
  }
  out += data_line(chunk(head, Json::object(), finish_reason(result)));
  if (include_usage) {
    Json usage_chunk{{"id", head.id},
                     {"object", "chat.completion.chunk"},
                     {"created", head.created},
                     {"model", head.model},
                     {"choices", Json::array()},
                     {"usage", openai_usage(result.value("usage", Json::object()))}};
    out += data_line(usage_chunk);
  }
  return out;
}

}  // namespace kernex::server
