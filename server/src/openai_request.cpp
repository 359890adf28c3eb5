// Parsing an OpenAI-style request: every documented field honoured or refused by name (the
// README's endpoint table lists them), unknown fields refused. A null field is an absent one,
// as the official clients send them.
#include "openai_request.hpp"

#include <cctype>
#include <cmath>
#include <set>

#include "kernex/json_schema.hpp"
#include "session_id.hpp"

namespace kernex::server {
namespace {

bool absent(const Json& b, const char* key) { return !b.contains(key) || b[key].is_null(); }

std::expected<double, ApiError> number_in(const Json& v, const std::string& where, double lo,
                                          double hi) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi) {
    return std::unexpected(
        field_error(where, "expected a number from " + Json(lo).dump() + " to " + Json(hi).dump()));
  }
  return v.get<double>();
}

std::expected<std::vector<std::string>, ApiError> parse_stop(const Json& v) {
  if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
  if (!v.is_array() || v.size() > 4)
    return std::unexpected(field_error("stop", "expected a string or a list of up to 4 strings"));
  std::vector<std::string> out;
  for (const auto& s : v) {
    if (!s.is_string() || s.get<std::string>().empty())
      return std::unexpected(field_error("stop", "expected non-empty strings"));
    out.push_back(s.get<std::string>());
  }
  return out;
}

// A tool call of an assistant message: {id, type: function, function: {name, arguments}}.
std::expected<ToolCall, ApiError> parse_tool_call(const Json& c, const std::string& where) {
  if (!c.is_object() || !c.contains("id") || !c["id"].is_string() ||
      c["id"].get<std::string>().empty())
    return std::unexpected(field_error(where + ".id", "expected a non-empty string"));
  if (c.value("type", "function") != "function")
    return std::unexpected(unsupported_field(where + ".type", "only function tool calls"));
  if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
      !c["function"]["name"].is_string())
    return std::unexpected(field_error(where + ".function.name", "expected a string"));
  ToolCall call;
  call.id = c["id"].get<std::string>();
  call.name = c["function"]["name"].get<std::string>();
  const Json& args = c["function"].value("arguments", Json("{}"));
  if (args.is_string()) {
    // As the model wrote it: JSON when it parses, else kept as the text it was.
    Json parsed = parse_untrusted(args.get<std::string>());
    call.arguments = parsed.is_discarded() ? args : parsed;
  } else if (args.is_object()) {
    call.arguments = args;
  } else {
    return std::unexpected(field_error(where + ".function.arguments", "expected a JSON string"));
  }
  return call;
}

std::expected<void, ApiError> check_keys(const Json& m, const std::set<std::string>& allowed,
                                         const std::string& where) {
  return only_known_keys(m, allowed, where, "not supported for this role");
}

// One message into `out`; tool results are named after the call they answer.
std::expected<void, ApiError> parse_message(const Json& m, std::size_t i, OpenAiRequest& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    return std::unexpected(field_error(where + ".role", "expected a string"));
  const std::string role = m["role"].get<std::string>();
  auto text = content_text(m.value("content", Json()), where + ".content");
  if (!text) return std::unexpected(text.error());
  if (role == "system" || role == "developer" || role == "user") {
    KERNEX_RETURN_IF_ERROR(check_keys(m, {"role", "content", "name"}, where));
    if (role == "user") {
      out.messages.push_back(ContextEntry::user(*text));
    } else {
      out.system += (out.system.empty() ? "" : "\n\n") + *text;
    }
    return {};
  }
  if (role == "assistant") {
    KERNEX_RETURN_IF_ERROR(
        check_keys(m, {"role", "content", "name", "tool_calls", "refusal"}, where));
    ContextEntry entry = ContextEntry::assistant(*text);
    if (!absent(m, "tool_calls")) {
      if (!m["tool_calls"].is_array())
        return std::unexpected(field_error(where + ".tool_calls", "expected a list"));
      for (std::size_t k = 0; k < m["tool_calls"].size(); ++k) {
        auto call =
            parse_tool_call(m["tool_calls"][k], where + ".tool_calls[" + std::to_string(k) + "]");
        if (!call) return std::unexpected(call.error());
        entry.tool_calls.push_back(std::move(*call));
      }
    }
    out.messages.push_back(std::move(entry));
    return {};
  }
  if (role == "tool") {
    KERNEX_RETURN_IF_ERROR(check_keys(m, {"role", "content", "tool_call_id", "name"}, where));
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
      return std::unexpected(field_error(where + ".tool_call_id", "expected a string"));
    ToolResult result{m["tool_call_id"].get<std::string>(), "", *text, false};
    // The call it answers, in an earlier assistant message (OpenAI refuses an orphan too).
    for (auto it = out.messages.rbegin(); it != out.messages.rend() && result.name.empty(); ++it) {
      for (const auto& call : it->tool_calls)
        if (call.id == result.call_id) result.name = call.name;
    }
    if (result.name.empty())
      return std::unexpected(field_error(where + ".tool_call_id",
                                         "answers no tool call of an earlier assistant message"));
    out.messages.push_back(ContextEntry::tool(std::move(result)));
    return {};
  }
  return std::unexpected(field_error(
      where + ".role", "expected system, developer, user, assistant or tool (not '" + role + "')"));
}

std::expected<void, ApiError> parse_messages(const Json& b, OpenAiRequest& out) {
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    return std::unexpected(field_error("messages", "expected a non-empty list"));
  for (std::size_t i = 0; i < b["messages"].size(); ++i)
    KERNEX_RETURN_IF_ERROR(parse_message(b["messages"][i], i, out));
  const bool ends_with_user = !out.messages.empty() && out.messages.back().role == "user";
  if (!ends_with_user && !out.continues_tool_calls())
    return std::unexpected(
        field_error("messages",
                    "the last message must be the user's, or tool results for the last "
                    "assistant message's tool_calls"));
  return {};
}

// Fields OpenAI documents that this server does not implement, refused by name unless they ask
// for the default (n: 1, logprobs: false, ...), which some clients always send.
std::expected<bool, ApiError> parse_default_only(const std::string& key, const Json& v) {
  const auto refuse = [&](const std::string& why) -> std::expected<bool, ApiError> {
    return std::unexpected(unsupported_field(key, why));
  };
  if (key == "n") return v == 1 ? true : refuse("only 1 choice per request is supported");
  if (key == "logprobs") return v == false ? true : refuse("log probabilities are not supported");
  if (key == "top_logprobs") return refuse("log probabilities are not supported");
  if (key == "logit_bias")
    return v.is_object() && v.empty() ? true : refuse("logit_bias is not supported");
  if (key == "store")
    return v == false ? true : refuse("completions are not stored for distillation here");
  if (key == "service_tier")
    return v == "auto" || v == "default" ? true : refuse("only auto or default");
  if (key == "modalities")
    return v == Json::array({"text"}) ? true : refuse("only [\"text\"] output");
  if (key == "prompt_cache_key")  // a routing hint for OpenAI's cache; no cache to route here
    return v.is_string() ? true
                         : std::expected<bool, ApiError>(
                               std::unexpected(field_error(key, "expected a string")));
  static const std::set<std::string> refused{"audio",     "prediction",    "web_search_options",
                                             "functions", "function_call", "verbosity"};
  if (refused.contains(key)) return refuse("not supported by this server");
  return false;
}

std::expected<void, ApiError> parse_field(const std::string& key, const Json& v,
                                          OpenAiRequest& out) {
  if (key == "model" || key == "messages" || key == "metadata" || key == "user" ||
      key == "safety_identifier")
    return {};  // parsed on their own
  auto sampling = parse_sampling_field(key, v, out.generation);
  if (!sampling) return std::unexpected(sampling.error());
  if (*sampling) return {};
  if (key == "stream") {
    if (!v.is_boolean()) return std::unexpected(field_error(key, "expected true or false"));
    out.stream = v.get<bool>();
  } else if (key == "stream_options") {
    if (!v.is_object()) return std::unexpected(field_error(key, "expected an object"));
    KERNEX_RETURN_IF_ERROR(check_keys(v, {"include_usage", "include_obfuscation"}, key));
    out.include_usage = v.value("include_usage", false) == true;
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    auto max = parse_max_tokens(v, key);
    if (!max) return std::unexpected(max.error());
    if (out.generation.max_tokens && *max && *out.generation.max_tokens != **max)
      return std::unexpected(field_error(key,
                                         "differs from the other of max_tokens and "
                                         "max_completion_tokens"));
    if (*max) out.generation.max_tokens = *max;
  } else if (key == "tools") {
    KERNEX_RETURN_IF_ERROR(parse_function_tools(v, out, true));
  } else if (key == "tool_choice" || key == "parallel_tool_calls") {
    if (key == "parallel_tool_calls" && !v.is_boolean())
      return std::unexpected(field_error(key, "expected true or false"));
    if (key == "parallel_tool_calls") out.generation.parallel_tool_calls = v.get<bool>();
    // tool_choice is read once the tools are known (parse_chat_request)
  } else if (key == "response_format") {
    auto format = parse_response_format(v, key);
    if (!format) return std::unexpected(format.error());
    out.generation.response_format = std::move(*format);
  } else {
    auto known = parse_default_only(key, v);
    if (!known) return std::unexpected(known.error());
    if (!*known) return std::unexpected(unsupported_field(key, "unknown field"));
  }
  return {};
}

}  // namespace

ApiError field_error(const std::string& field, const std::string& why) {
  ApiError e = api_error(400, "invalid_request", field + ": " + why);
  e.param = field;
  return e;
}

ApiError unsupported_field(const std::string& field, const std::string& why) {
  ApiError e = api_error(400, "unsupported_field", field + ": " + why);
  e.param = field;
  return e;
}

std::size_t OpenAiRequest::last_user() const {
  for (std::size_t i = messages.size(); i-- > 0;)
    if (messages[i].role == "user") return i;
  return messages.size();
}

bool OpenAiRequest::continues_tool_calls() const {
  if (messages.empty() || messages.back().role != "tool") return false;
  std::size_t i = messages.size();
  while (i > 0 && messages[i - 1].role == "tool") --i;
  return i > 0 && messages[i - 1].role == "assistant" && !messages[i - 1].tool_calls.empty() &&
         last_user() < messages.size();
}

std::expected<std::string, ApiError> content_text(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array())
    return std::unexpected(field_error(where, "expected a string or a list of parts"));
  std::string text;
  for (std::size_t k = 0; k < content.size(); ++k) {
    const Json& part = content[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return std::unexpected(field_error(at + ".type", "expected a string"));
    const std::string type = part["type"].get<std::string>();
    if (type != "text" && type != "input_text" && type != "output_text" && type != "refusal")
      return std::unexpected(
          unsupported_field(at + ".type", "'" + type + "' parts are not supported (text only)"));
    const char* field = type == "refusal" ? "refusal" : "text";
    if (!part.contains(field) || !part[field].is_string())
      return std::unexpected(field_error(at + "." + field, "expected a string"));
    text += part[field].get<std::string>();
  }
  return text;
}

std::expected<bool, ApiError> parse_sampling_field(const std::string& key, const Json& v,
                                                   Generation& g) {
  std::expected<double, ApiError> n = 0.0;
  if (key == "temperature") {
    n = number_in(v, key, 0, 2);
    if (n) g.temperature = *n;
  } else if (key == "top_p") {
    n = number_in(v, key, 0, 1);
    if (n) g.top_p = *n;
  } else if (key == "presence_penalty" || key == "frequency_penalty") {
    n = number_in(v, key, -2, 2);
    if (n) (key == "presence_penalty" ? g.presence_penalty : g.frequency_penalty) = *n;
  } else if (key == "seed") {
    const auto seed = json_int(v);
    if (!seed) return std::unexpected(field_error(key, "expected a 64-bit integer"));
    g.seed = *seed;
  } else if (key == "stop") {
    auto stop = parse_stop(v);
    if (!stop) return std::unexpected(stop.error());
    g.stop = std::move(*stop);
  } else if (key == "reasoning_effort") {
    static const std::set<std::string> efforts{"minimal", "low", "medium", "high"};
    if (!v.is_string() || !efforts.contains(v.get<std::string>()))
      return std::unexpected(field_error(key, "expected minimal, low, medium or high"));
    g.reasoning_effort = v.get<std::string>();
  } else {
    return false;
  }
  if (!n) return std::unexpected(n.error());
  return true;
}

std::expected<std::optional<std::uint64_t>, ApiError> parse_max_tokens(const Json& v,
                                                                       const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1)
    return std::unexpected(field_error(where, "expected a positive integer"));
  return v.get<std::uint64_t>();
}

std::expected<void, ApiError> only_known_keys(const Json& m, const std::set<std::string>& allowed,
                                              const std::string& where, std::string_view why) {
  for (const auto& [key, value] : m.items()) {
    if (allowed.contains(key) || value.is_null()) continue;
    return std::unexpected(unsupported_field(where + "." + key, std::string(why)));
  }
  return {};
}

std::expected<void, ApiError> parse_function_tools(const Json& v, OpenAiRequest& out, bool nested) {
  if (!v.is_array()) return std::unexpected(field_error("tools", "expected a list"));
  std::set<std::string> names;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& t = v[i];
    if (!t.is_object() || t.value("type", "") != "function" || (nested && !t.contains("function")))
      return std::unexpected(unsupported_field(
          where + ".type", nested ? "only {type: function, function: {...}} tools"
                                  : "only function tools ({type: function, name, parameters})"));
    const std::string fn_where = nested ? where + ".function" : where;
    auto spec = parse_function(nested ? t["function"] : t, fn_where);
    if (!spec) return std::unexpected(spec.error());
    if (!names.insert(spec->name).second)
      return std::unexpected(
          field_error(fn_where + ".name", "'" + spec->name + "' is offered twice"));
    out.tools.push_back(std::move(*spec));
  }
  return {};
}

std::expected<ToolSpec, ApiError> parse_function(const Json& fn, const std::string& where) {
  if (!fn.is_object()) return std::unexpected(field_error(where, "expected an object"));
  for (const auto& [key, value] : fn.items()) {
    if (key != "name" && key != "description" && key != "parameters" && key != "strict" &&
        key != "type" && !value.is_null())
      return std::unexpected(unsupported_field(where + "." + key, "unknown field"));
  }
  if (!fn.contains("name") || !fn["name"].is_string())
    return std::unexpected(field_error(where + ".name", "expected a string"));
  ToolSpec spec;
  spec.name = fn["name"].get<std::string>();
  static constexpr std::size_t kMaxName = 64;
  bool ok = !spec.name.empty() && spec.name.size() <= kMaxName;
  for (char c : spec.name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  if (!ok) return std::unexpected(field_error(where + ".name", "expected 1-64 of [A-Za-z0-9_-]"));
  if (!absent(fn, "description")) {
    if (!fn["description"].is_string())
      return std::unexpected(field_error(where + ".description", "expected a string"));
    spec.description = fn["description"].get<std::string>();
  }
  if (!absent(fn, "parameters")) {
    if (!fn["parameters"].is_object())
      return std::unexpected(field_error(where + ".parameters", "expected a JSON Schema object"));
    spec.parameters = fn["parameters"];
  }
  if (!absent(fn, "strict") && !fn["strict"].is_boolean())
    return std::unexpected(field_error(where + ".strict", "expected true or false"));
  return spec;
}

std::expected<ResponseFormat, ApiError> parse_json_schema(const Json& v, const std::string& where) {
  if (!v.is_object()) return std::unexpected(field_error(where, "expected an object"));
  KERNEX_RETURN_IF_ERROR(check_keys(v, {"name", "schema", "strict", "description", "type"}, where));
  ResponseFormat f;
  f.kind = ResponseFormat::Kind::JsonSchema;
  if (!v.contains("name") || !v["name"].is_string() || v["name"].get<std::string>().empty())
    return std::unexpected(field_error(where + ".name", "expected a non-empty string"));
  f.name = v["name"].get<std::string>();
  if (absent(v, "schema")) {
    f.schema = Json::object();
  } else if (!v["schema"].is_object()) {
    return std::unexpected(field_error(where + ".schema", "expected a JSON Schema object"));
  } else {
    f.schema = v["schema"];
    if (auto usable = check_json_schema(f.schema); !usable)
      return std::unexpected(field_error(where + ".schema", usable.error().describe()));
  }
  if (!absent(v, "strict")) {
    if (!v["strict"].is_boolean())
      return std::unexpected(field_error(where + ".strict", "expected true or false"));
    f.strict = v["strict"].get<bool>();
  }
  return f;
}

std::expected<ResponseFormat, ApiError> parse_response_format(const Json& v,
                                                              const std::string& where) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    return std::unexpected(
        field_error(where + ".type", "expected text, json_object or json_schema"));
  const std::string type = v["type"].get<std::string>();
  if (type == "text" || type == "json_object") {
    KERNEX_RETURN_IF_ERROR(check_keys(v, {"type"}, where));
    ResponseFormat f;
    if (type == "json_object") f.kind = ResponseFormat::Kind::JsonObject;
    return f;
  }
  if (type != "json_schema")
    return std::unexpected(
        field_error(where + ".type", "expected text, json_object or json_schema"));
  KERNEX_RETURN_IF_ERROR(check_keys(v, {"type", "json_schema"}, where));
  if (!v.contains("json_schema"))
    return std::unexpected(field_error(where + ".json_schema", "expected an object"));
  return parse_json_schema(v["json_schema"], where + ".json_schema");
}

std::expected<ToolChoice, ApiError> parse_tool_choice(const Json& v,
                                                      const std::vector<ToolSpec>& tools,
                                                      const std::string& where) {
  ToolChoice c;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "auto") return c;
    if (s == "none")
      c.mode = ToolChoice::Mode::None;
    else if (s == "required")
      c.mode = ToolChoice::Mode::Required;
    else
      return std::unexpected(field_error(where, "expected auto, none, required or a function"));
    return c;
  }
  if (!v.is_object() || v.value("type", "") != "function")
    return std::unexpected(unsupported_field(where,
                                             "expected auto, none, required or "
                                             "{type: function, function: {name}}"));
  const Json& named = v.contains("function") ? v["function"] : v;
  if (!named.is_object() || !named.contains("name") || !named["name"].is_string())
    return std::unexpected(field_error(where + ".function.name", "expected a string"));
  c.mode = ToolChoice::Mode::Named;
  c.name = named["name"].get<std::string>();
  bool offered = false;
  for (const auto& t : tools) offered = offered || t.name == c.name;
  if (!offered)
    return std::unexpected(field_error(where + ".function.name",
                                       "'" + c.name + "' is not one of the request's tools"));
  return c;
}

std::expected<void, ApiError> parse_request_tool_choice(const Json& b, OpenAiRequest& out) {
  if (absent(b, "tool_choice")) return {};
  auto choice = parse_tool_choice(b["tool_choice"], out.tools, "tool_choice");
  if (!choice) return std::unexpected(choice.error());
  if (choice->mode != ToolChoice::Mode::Auto && choice->mode != ToolChoice::Mode::None &&
      out.tools.empty())
    return std::unexpected(field_error("tool_choice", "names tools but the request has none"));
  out.generation.tool_choice = *choice;
  return {};
}

std::expected<void, ApiError> parse_identity(const HttpRequest& req, const Json& b,
                                             OpenAiRequest& out) {
  if (!absent(b, "metadata")) {
    const Json& md = b["metadata"];
    if (!md.is_object() || md.size() > 16)
      return std::unexpected(field_error("metadata", "expected an object of up to 16 strings"));
    for (const auto& [key, value] : md.items()) {
      if (!value.is_string() || key.size() > 64 || value.get<std::string>().size() > 512)
        return std::unexpected(field_error("metadata." + key,
                                           "expected a string of up to 512 "
                                           "characters under a key of up to 64"));
    }
    out.metadata = md;
  }
  const std::string header = req.header("x-session-id");
  const std::string named = out.metadata.value("session_id", "");
  if (!header.empty() && !named.empty() && header != named)
    return std::unexpected(field_error("metadata.session_id", "differs from X-Session-Id"));
  out.session = header.empty() ? named : header;
  if (!out.session.empty() && !valid_session_id(out.session)) {
    ApiError e = api_error(400, "invalid_session",
                           "X-Session-Id / metadata.session_id: expected 1-256 bytes of UTF-8 "
                           "without control characters");
    e.param = header.empty() ? "metadata.session_id" : "X-Session-Id";
    return std::unexpected(e);
  }
  if (const std::string busy = req.header("x-kernex-if-busy"); !busy.empty()) {
    out.if_busy = parse_if_busy(busy);
    if (!out.if_busy)
      return std::unexpected(
          field_error("X-Kernex-If-Busy", "expected reject, enqueue or interrupt"));
  }
  for (const char* key : {"user", "safety_identifier"}) {
    if (absent(b, key)) continue;
    if (!b[key].is_string() ||
        (!b[key].get<std::string>().empty() && !valid_session_id(b[key].get<std::string>())))
      return std::unexpected(field_error(key,
                                         "expected up to 256 bytes of UTF-8 without "
                                         "control characters"));
    if (out.user.empty()) out.user = b[key].get<std::string>();
  }
  return {};
}

std::expected<OpenAiRequest, ApiError> parse_chat_request(const HttpRequest& req, const Json& b) {
  OpenAiRequest out;
  if (!b.contains("model") || !b["model"].is_string())
    return std::unexpected(field_error("model", "expected a string"));
  out.model = b["model"].get<std::string>();
  KERNEX_RETURN_IF_ERROR(parse_identity(req, b, out));
  for (const auto& [key, value] : b.items()) {
    if (value.is_null()) continue;
    KERNEX_RETURN_IF_ERROR(parse_field(key, value, out));
  }
  KERNEX_RETURN_IF_ERROR(parse_messages(b, out));
  // Without `stream`, an Accept: text/event-stream asks for a stream (as the native endpoint).
  if (absent(b, "stream"))
    out.stream = req.header("accept").find("text/event-stream") != std::string::npos;
  KERNEX_RETURN_IF_ERROR(parse_request_tool_choice(b, out));
  return out;
}

}  // namespace kernex::server
