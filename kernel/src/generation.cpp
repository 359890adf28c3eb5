#include "kernex/generation.hpp"

namespace kernex {

std::vector<std::string> Generation::set_fields() const {
  std::vector<std::string> out;
  if (temperature) out.emplace_back("temperature");
  if (top_p) out.emplace_back("top_p");
  if (max_tokens) out.emplace_back("max_tokens");
  if (!stop.empty()) out.emplace_back("stop");
  if (seed) out.emplace_back("seed");
  if (presence_penalty) out.emplace_back("presence_penalty");
  if (frequency_penalty) out.emplace_back("frequency_penalty");
  if (reasoning_effort) out.emplace_back("reasoning_effort");
  if (response_format.kind != ResponseFormat::Kind::Text) out.emplace_back("response_format");
  if (tool_choice.mode != ToolChoice::Mode::Auto) out.emplace_back("tool_choice");
  if (parallel_tool_calls) out.emplace_back("parallel_tool_calls");
  return out;
}

void to_json(Json& j, const ResponseFormat& v) {
  static constexpr const char* kinds[] = {"text", "json_object", "json_schema"};
  j = Json{{"type", kinds[static_cast<int>(v.kind)]}};
  if (v.kind == ResponseFormat::Kind::JsonSchema) {
    j["name"] = v.name;
    j["schema"] = v.schema;
    j["strict"] = v.strict;
  }
}

void from_json(const Json& j, ResponseFormat& v) {
  const std::string type = j.value("type", "text");
  v = {};
  if (type == "json_object") v.kind = ResponseFormat::Kind::JsonObject;
  if (type == "json_schema") {
    v.kind = ResponseFormat::Kind::JsonSchema;
    v.name = j.value("name", "");
    v.schema = j.value("schema", Json::object());
    v.strict = j.value("strict", false);
  }
}

void to_json(Json& j, const ToolChoice& v) {
  static constexpr const char* modes[] = {"auto", "none", "required", "named"};
  j = Json{{"mode", modes[static_cast<int>(v.mode)]}};
  if (v.mode == ToolChoice::Mode::Named) j["name"] = v.name;
}

void from_json(const Json& j, ToolChoice& v) {
  const std::string mode = j.value("mode", "auto");
  v = {};
  if (mode == "none") v.mode = ToolChoice::Mode::None;
  if (mode == "required") v.mode = ToolChoice::Mode::Required;
  if (mode == "named") {
    v.mode = ToolChoice::Mode::Named;
    v.name = j.value("name", "");
  }
}

namespace {
template <typename T>
void put(Json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}
// Through json_fields: a stored or sent generation is untrusted, and nlohmann's get<uint64_t>()
// casts a float such as 1e30 to an integer (undefined behaviour) where this throws a type_error.
template <typename T>
void take(const Json& j, const char* key, std::optional<T>& v) {
  json_fields::defaulted(j, key, v);
}
}  // namespace

void to_json(Json& j, const Generation& v) {
  j = Json::object();
  put(j, "temperature", v.temperature);
  put(j, "top_p", v.top_p);
  put(j, "max_tokens", v.max_tokens);
  if (!v.stop.empty()) j["stop"] = v.stop;
  put(j, "seed", v.seed);
  put(j, "presence_penalty", v.presence_penalty);
  put(j, "frequency_penalty", v.frequency_penalty);
  put(j, "reasoning_effort", v.reasoning_effort);
  if (v.response_format.kind != ResponseFormat::Kind::Text)
    j["response_format"] = v.response_format;
  if (v.tool_choice.mode != ToolChoice::Mode::Auto) j["tool_choice"] = v.tool_choice;
  put(j, "parallel_tool_calls", v.parallel_tool_calls);
}

void from_json(const Json& j, Generation& v) {
  v = {};
  take(j, "temperature", v.temperature);
  take(j, "top_p", v.top_p);
  take(j, "max_tokens", v.max_tokens);
  if (j.contains("stop")) v.stop = j["stop"].get<std::vector<std::string>>();
  take(j, "seed", v.seed);
  take(j, "presence_penalty", v.presence_penalty);
  take(j, "frequency_penalty", v.frequency_penalty);
  take(j, "reasoning_effort", v.reasoning_effort);
  if (j.contains("response_format")) v.response_format = j["response_format"].get<ResponseFormat>();
  if (j.contains("tool_choice")) v.tool_choice = j["tool_choice"].get<ToolChoice>();
  take(j, "parallel_tool_calls", v.parallel_tool_calls);
}

}  // namespace kernex
