// The Responses API's request body, field by field (README's endpoint table lists them). A null
// field is an is_absent one, as the official clients send them.
#include "responses_request.hpp"

#include <set>

namespace kernex::server {
namespace {

bool is_absent(const Json& b, const char* key) { return !b.contains(key) || b[key].is_null(); }

std::expected<void, ApiError> only_keys(const Json& m, const std::set<std::string>& allowed,
                                        const std::string& where) {
  return only_known_keys(m, allowed, where, "not supported in this item");
}

std::expected<std::string, ApiError> string_field(const Json& m, const char* key,
                                                  const std::string& where) {
  if (!m.contains(key) || !m[key].is_string() || m[key].get<std::string>().empty())
    return std::unexpected(field_error(where + "." + key, "expected a non-empty string"));
  return m[key].get<std::string>();
}

// {type: message, role, content}: a message (also without `type`, as EasyInputMessage).
std::expected<void, ApiError> parse_message_item(const Json& m, const std::string& where,
                                                 OpenAiRequest& out) {
  KERNEX_RETURN_IF_ERROR(only_keys(m, {"type", "role", "content", "id", "status"}, where));
  if (!m.contains("role") || !m["role"].is_string())
    return std::unexpected(field_error(where + ".role", "expected a string"));
  const std::string role = m["role"].get<std::string>();
  auto text = content_text(m.value("content", Json()), where + ".content");
  if (!text) return std::unexpected(text.error());
  if (role == "user") {
    out.messages.push_back(ContextEntry::user(std::move(*text)));
  } else if (role == "assistant") {
    out.messages.push_back(ContextEntry::assistant(std::move(*text)));
  } else if (role == "system" || role == "developer") {
    out.system += (out.system.empty() ? "" : "\n\n") + *text;
  } else {
    return std::unexpected(field_error(
        where + ".role", "expected user, assistant, system or developer (not '" + role + "')"));
  }
  return {};
}

// {type: function_call, call_id, name, arguments}: a call the model made, as the client keeps
// it; calls in a row belong to one assistant turn.
std::expected<void, ApiError> parse_function_call(const Json& m, const std::string& where,
                                                  OpenAiRequest& out) {
  KERNEX_RETURN_IF_ERROR(
      only_keys(m, {"type", "id", "call_id", "name", "arguments", "status"}, where));
  auto id = string_field(m, "call_id", where);
  if (!id) return std::unexpected(id.error());
  auto name = string_field(m, "name", where);
  if (!name) return std::unexpected(name.error());
  ToolCall call{*id, *name, Json::object()};
  if (!is_absent(m, "arguments")) {
    if (!m["arguments"].is_string())
      return std::unexpected(field_error(where + ".arguments", "expected a JSON string"));
    Json parsed = parse_untrusted(m["arguments"].get<std::string>());
    call.arguments = parsed.is_discarded() ? m["arguments"] : parsed;
  }
  const bool joins =
      !out.messages.empty() && out.messages.back().role == "assistant" &&
      (out.messages.back().content.empty() || !out.messages.back().tool_calls.empty());
  if (!joins) out.messages.push_back(ContextEntry::assistant(""));
  out.messages.back().tool_calls.push_back(std::move(call));
  return {};
}

// {type: function_call_output, call_id, output}: the client's result for a call, named after it.
std::expected<void, ApiError> parse_call_output(const Json& m, const std::string& where,
                                                OpenAiRequest& out) {
  KERNEX_RETURN_IF_ERROR(only_keys(m, {"type", "id", "call_id", "output", "status"}, where));
  auto id = string_field(m, "call_id", where);
  if (!id) return std::unexpected(id.error());
  auto text = content_text(m.value("output", Json()), where + ".output");
  if (!text) return std::unexpected(text.error());
  ToolResult result{*id, "", std::move(*text), false};
  for (auto it = out.messages.rbegin(); it != out.messages.rend() && result.name.empty(); ++it) {
    for (const auto& call : it->tool_calls)
      if (call.id == result.call_id) result.name = call.name;
  }
  if (result.name.empty())
    return std::unexpected(field_error(
        where + ".call_id",
        "answers no function_call of the input or of the previous response ('" + *id + "')"));
  out.messages.push_back(ContextEntry::tool(std::move(result)));
  return {};
}

std::expected<void, ApiError> parse_input(const Json& input, OpenAiRequest& out) {
  if (input.is_string()) {
    out.messages.push_back(ContextEntry::user(input.get<std::string>()));
    return {};
  }
  if (!input.is_array() || input.empty())
    return std::unexpected(field_error("input", "expected a string or a non-empty list of items"));
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::string where = "input[" + std::to_string(i) + "]";
    const Json& item = input[i];
    if (!item.is_object()) return std::unexpected(field_error(where, "expected an object"));
    if (item.contains("type") && !item["type"].is_string())
      return std::unexpected(field_error(where + ".type", "expected a string"));
    const std::string type = item.value("type", "message");
    if (type == "message") {
      KERNEX_RETURN_IF_ERROR(parse_message_item(item, where, out));
    } else if (type == "function_call") {
      KERNEX_RETURN_IF_ERROR(parse_function_call(item, where, out));
    } else if (type == "function_call_output") {
      KERNEX_RETURN_IF_ERROR(parse_call_output(item, where, out));
    } else {
      return std::unexpected(unsupported_field(
          where + ".type", "'" + type +
                               "' items are not supported (message, function_call, "
                               "function_call_output)"));
    }
  }
  return {};
}

// text: {format: {type: text | json_object | json_schema, name, schema, strict}}.
std::expected<void, ApiError> parse_text(const Json& v, OpenAiRequest& out) {
  if (!v.is_object()) return std::unexpected(field_error("text", "expected an object"));
  for (const auto& [key, value] : v.items()) {
    if (value.is_null() || key == "format") continue;
    return std::unexpected(unsupported_field("text." + key, "not supported by this server"));
  }
  if (is_absent(v, "format")) return {};
  const Json& f = v["format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    return std::unexpected(
        field_error("text.format.type", "expected text, json_object or json_schema"));
  const std::string type = f["type"].get<std::string>();
  if (type == "json_schema") {
    auto format = parse_json_schema(f, "text.format");
    if (!format) return std::unexpected(format.error());
    out.generation.response_format = std::move(*format);
    return {};
  }
  Json chat_style{{"type", type}};
  auto format = parse_response_format(chat_style, "text.format");
  if (!format) return std::unexpected(format.error());
  out.generation.response_format = *format;
  return only_keys(f, {"type"}, "text.format");
}

std::expected<void, ApiError> parse_reasoning(const Json& v, OpenAiRequest& out) {
  if (!v.is_object()) return std::unexpected(field_error("reasoning", "expected an object"));
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    if (key != "effort")
      return std::unexpected(unsupported_field("reasoning." + key, "not supported by this server"));
    auto set = parse_sampling_field("reasoning_effort", value, out.generation);
    if (!set) return std::unexpected(field_error("reasoning.effort", set.error().message));
  }
  return {};
}

// Documented fields this server does not implement: refused by name unless they ask for what it
// does anyway (truncation: disabled, background: false, include: [] ...), which clients send.
std::expected<void, ApiError> check_default_only(const std::string& key, const Json& v) {
  const auto refuse = [&](const std::string& why) -> std::expected<void, ApiError> {
    return std::unexpected(unsupported_field(key, why));
  };
  if (key == "truncation")
    return v == "disabled" ? std::expected<void, ApiError>() : refuse("only disabled");
  if (key == "background")
    return v == false ? std::expected<void, ApiError>()
                      : refuse("background responses are not supported");
  if (key == "include")
    return v.is_array() && v.empty() ? std::expected<void, ApiError>()
                                     : refuse("no extra output data is available");
  if (key == "service_tier")
    return v == "auto" || v == "default" ? std::expected<void, ApiError>()
                                         : refuse("only auto or default");
  if (key == "top_logprobs")
    return v == 0 ? std::expected<void, ApiError>() : refuse("log probabilities are not supported");
  if (key == "prompt_cache_key")  // a routing hint for OpenAI's cache; no cache to route here
    return v.is_string() ? std::expected<void, ApiError>()
                         : std::expected<void, ApiError>(
                               std::unexpected(field_error(key, "expected a string")));
  static const std::set<std::string> refused{"conversation", "prompt", "max_tool_calls",
                                             "context_management"};
  if (refused.contains(key)) return refuse("not supported by this server");
  return refuse("unknown field");
}

std::expected<void, ApiError> parse_field(const std::string& key, const Json& v,
                                          ResponsesRequest& r) {
  OpenAiRequest& out = r.request;
  if (key == "model" || key == "input" || key == "previous_response_id" || key == "metadata" ||
      key == "user" || key == "safety_identifier" || key == "tool_choice")
    return {};  // parsed on their own
  if (key == "temperature" || key == "top_p") {
    auto set = parse_sampling_field(key, v, out.generation);
    if (!set) return std::unexpected(set.error());
    r.echo[key] = v;
  } else if (key == "instructions") {
    if (!v.is_string()) return std::unexpected(field_error(key, "expected a string"));
    r.instructions = v.get<std::string>();
  } else if (key == "store" || key == "stream" || key == "parallel_tool_calls") {
    if (!v.is_boolean()) return std::unexpected(field_error(key, "expected true or false"));
    if (key == "store") r.store = v.get<bool>();
    if (key == "stream") out.stream = v.get<bool>();
    if (key == "parallel_tool_calls") out.generation.parallel_tool_calls = v.get<bool>();
  } else if (key == "stream_options") {
    if (!v.is_object()) return std::unexpected(field_error(key, "expected an object"));
    KERNEX_RETURN_IF_ERROR(only_keys(v, {"include_obfuscation"}, key));
  } else if (key == "max_output_tokens") {
    auto max = parse_max_tokens(v, key);
    if (!max) return std::unexpected(max.error());
    out.generation.max_tokens = *max;
    r.echo[key] = v;
  } else if (key == "tools") {
    KERNEX_RETURN_IF_ERROR(parse_function_tools(v, out, false));
    r.echo[key] = v;
  } else if (key == "text") {
    KERNEX_RETURN_IF_ERROR(parse_text(v, out));
    r.echo[key] = v;
  } else if (key == "reasoning") {
    KERNEX_RETURN_IF_ERROR(parse_reasoning(v, out));
  } else {
    KERNEX_RETURN_IF_ERROR(check_default_only(key, v));
  }
  return {};
}

}  // namespace

std::expected<std::string, ApiError> previous_response_id(const Json& body) {
  if (is_absent(body, "previous_response_id")) return std::string();
  const Json& v = body["previous_response_id"];
  if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 256)
    return std::unexpected(field_error("previous_response_id", "expected a response id"));
  return v.get<std::string>();
}

std::expected<ResponsesRequest, ApiError> parse_responses_request(
    const HttpRequest& req, const Json& b, std::vector<ContextEntry> earlier) {
  ResponsesRequest r;
  OpenAiRequest& out = r.request;
  if (!b.contains("model") || !b["model"].is_string())
    return std::unexpected(field_error("model", "expected a string"));
  out.model = b["model"].get<std::string>();
  auto previous = previous_response_id(b);
  if (!previous) return std::unexpected(previous.error());
  r.previous_response_id = *previous;
  KERNEX_RETURN_IF_ERROR(parse_identity(req, b, out));
  for (const auto& [key, value] : b.items()) {
    if (value.is_null()) continue;
    KERNEX_RETURN_IF_ERROR(parse_field(key, value, r));
  }
  r.earlier = earlier.size();
  out.messages = std::move(earlier);
  if (is_absent(b, "input"))
    return std::unexpected(field_error("input", "expected a string or a list of items"));
  KERNEX_RETURN_IF_ERROR(parse_input(b["input"], out));
  if (!r.instructions.empty())
    out.system = r.instructions + (out.system.empty() ? "" : "\n\n" + out.system);
  const bool ends_with_user = !out.messages.empty() && out.messages.back().role == "user";
  if (!ends_with_user && !out.continues_tool_calls())
    return std::unexpected(
        field_error("input",
                    "the last item must be a user message, or function_call_output items for the "
                    "last function calls"));
  KERNEX_RETURN_IF_ERROR(parse_request_tool_choice(b, out));
  if (!is_absent(b, "tool_choice")) r.echo["tool_choice"] = b["tool_choice"];
  return r;
}

}  // namespace kernex::server
