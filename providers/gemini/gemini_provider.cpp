// Gemini generateContent / streamGenerateContent (SSE): function calling, the key in the
// x-goog-api-key header (never in the URL), thought parts and signatures replayed intact.
#include <array>
#include <cctype>

#include "kernex/plugin.hpp"
#include "kernex/providers/catalog.hpp"
#include "kernex/providers/request.hpp"
#include "kernex/providers/stream_driver.hpp"

namespace kernex::providers {

namespace {

constexpr std::string_view kSyntheticId = "gemini_call_";  // ids we made up are not sent back

bool valid_model(std::string_view model) {
  if (model.empty() || model.size() > 128) return false;
  for (char c : model) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  }
  return true;
}

// Gemini takes an OpenAPI subset: `type` must be one string, and some JSON Schema keywords
// are refused outright.
Json normalise_schema(const Json& schema) {
  if (schema.is_array()) {
    Json out = Json::array();
    for (const auto& s : schema) out.push_back(normalise_schema(s));
    return out;
  }
  if (!schema.is_object()) return schema;
  Json out = Json::object();
  for (const auto& [key, value] : schema.items()) {
    if (key == "$schema" || key == "additionalProperties" || key == "$id" || key == "$defs")
      continue;
    if (key == "type" && value.is_array()) {
      for (const auto& t : value) {
        if (t.is_string() && t.get<std::string>() != "null") {
          out["type"] = t;
          break;
        }
      }
      continue;
    }
    out[key] = (key == "properties" && value.is_object())
                   ? [&] {
                       Json props = Json::object();
                       for (const auto& [name, sub] : value.items()) props[name] = normalise_schema(sub);
                       return props;
                     }()
                   : normalise_schema(value);
  }
  return out;
}

Usage read_usage(const Json& u) {
  Usage usage;
  const std::uint64_t prompt = u64(u, "promptTokenCount");
  const std::uint64_t cached = std::min(u64(u, "cachedContentTokenCount"), prompt);
  usage.input_tokens = prompt - cached;
  usage.cache_read_tokens = cached;
  usage.output_tokens = u64(u, "candidatesTokenCount") + u64(u, "thoughtsTokenCount");
  return usage;
}

std::string map_finish(const std::string& reason, bool has_calls) {
  if (has_calls) return "tool_use";
  if (reason.empty() || reason == "STOP") return "end_turn";
  if (reason == "MAX_TOKENS") return "max_tokens";
  return reason;
}

class GeminiProvider final : public Provider {
 public:
  GeminiProvider(CommonOptions options, bool thinking)
      : o_(std::move(options)), thinking_(thinking), client_(o_.client) {
    base_ = o_.base_url;
    if (!path_ends_with(o_.url, "/v1beta") && !path_ends_with(o_.url, "/v1") &&
        !path_ends_with(o_.url, "/v1alpha")) {
      base_ = join_url(base_, "/v1beta");
    }
  }

  std::string name() const override { return o_.name; }
  std::string default_model() const override { return o_.model; }
  // The pool's next instance: these options as parsed, with a client of its own.
  std::shared_ptr<Provider> concurrent_instance() override {
    return std::make_shared<GeminiProvider>(o_, thinking_);
  }

  Result<Response> complete(const Context& context, const std::vector<ToolSpec>& tools,
                            const StreamSink& sink) override {
    std::string model = context.model.value_or(o_.model);
    if (model.starts_with("models/")) model.erase(0, 7);
    if (!valid_model(model)) {
      return fail(ErrorCode::Config,
                  o_.name + ": model id `" + excerpt(model, 128) +
                      "` is not valid (expected letters, digits, '.', '_' or '-', at most 128)");
    }
    http::Request request = json_request(
        context,
        join_url(base_, "/models/" + model +
                            (sink ? ":streamGenerateContent?alt=sse" : ":generateContent")));
    if (!o_.api_key.empty()) request.headers.emplace_back("x-goog-api-key", o_.api_key);
    request.body = build_body(context, tools).dump(-1, ' ', false, Json::error_handler_t::replace);
    if (sink) {
      Stream mapping(*this, model);
      return drive_stream(client_, request, o_, Framing::Sse, mapping, sink);
    }
    KERNEX_ASSIGN_OR_RETURN(auto body, send_buffered(client_, request, o_));
    Response r;
    r.provider = o_.name;
    Json parts = Json::array();
    std::string finish;
    KERNEX_RETURN_IF_ERROR(absorb(body, r, parts, finish, Emitter(no_sink_)));
    KERNEX_RETURN_IF_ERROR(conclude(r, parts, finish, model, body));
    return r;
  }

 private:
  // generationConfig (sampling, stop, seed, penalties, JSON output with a JSON Schema) and
  // toolConfig.functionCallingConfig (AUTO, ANY, a named function).
  static void apply_generation(const Context& context, const std::vector<ToolSpec>& tools,
                               Json& generation, Json& body) {
    const Generation& g = context.generation;
    if (g.temperature) generation["temperature"] = *g.temperature;
    if (g.top_p) generation["topP"] = *g.top_p;
    if (g.max_tokens) generation["maxOutputTokens"] = *g.max_tokens;
    if (!g.stop.empty()) generation["stopSequences"] = g.stop;
    if (g.seed) generation["seed"] = *g.seed;
    if (g.presence_penalty) generation["presencePenalty"] = *g.presence_penalty;
    if (g.frequency_penalty) generation["frequencyPenalty"] = *g.frequency_penalty;
    if (g.response_format.kind != ResponseFormat::Kind::Text)
      generation["responseMimeType"] = "application/json";
    if (g.response_format.kind == ResponseFormat::Kind::JsonSchema)
      generation["responseJsonSchema"] = g.response_format.schema;
    const ToolChoice choice = call_tool_choice(context, tools);
    if (choice.mode == ToolChoice::Mode::Required)
      body["toolConfig"] = {{"functionCallingConfig", {{"mode", "ANY"}}}};
    if (choice.mode == ToolChoice::Mode::Named) {
      body["toolConfig"] = {
          {"functionCallingConfig",
           {{"mode", "ANY"}, {"allowedFunctionNames", Json::array({choice.name})}}}};
    }
  }

  Json build_body(const Context& context, const std::vector<ToolSpec>& tools) const {
    Json contents = Json::array();
    auto push = [&](const std::string& role, Json parts) {
      if (!contents.empty() && contents.back().at("role") == role) {
        for (auto& p : parts) contents.back()["parts"].push_back(std::move(p));
      } else {
        contents.push_back({{"role", role}, {"parts", std::move(parts)}});
      }
    };
    for (const ContextEntry& e : context.messages()) {
      if (e.role == "tool") {
        if (!e.tool_result) {
          push("user", Json::array({{{"text", "[Tool result]\n" + e.content}}}));
          continue;
        }
        const ToolResult& t = *e.tool_result;
        Json fr{{"name", t.name}, {"response", {{t.is_error ? "error" : "result", t.content}}}};
        if (!t.call_id.empty() && !std::string_view(t.call_id).starts_with(kSyntheticId))
          fr["id"] = t.call_id;
        push("user", Json::array({{{"functionResponse", std::move(fr)}}}));
      } else if (e.role == "assistant") {
        Json parts = Json::array();
        if (e.provider_state.is_object() && e.provider_state.contains("parts") &&
            e.provider_state.at("parts").is_array()) {
          parts = e.provider_state.at("parts");  // thought signatures must round-trip unchanged
        } else {
          if (!e.content.empty()) parts.push_back({{"text", e.content}});
          for (const ToolCall& c : e.tool_calls) {
            Json fc{{"name", c.name},
                    {"args", c.arguments.is_object() ? c.arguments : Json::object()}};
            if (!std::string_view(c.id).starts_with(kSyntheticId) && !c.id.empty()) fc["id"] = c.id;
            parts.push_back({{"functionCall", std::move(fc)}});
          }
        }
        if (!parts.empty()) push("model", std::move(parts));
      } else {
        push("user", Json::array({{{"text", e.content}}}));
      }
    }
    Json body{{"contents", std::move(contents)}};
    const std::string system = strip_cache_boundary(context.system_prompt);
    if (!system.empty()) body["systemInstruction"] = {{"parts", Json::array({{{"text", system}}})}};
    if (!tools.empty()) {
      Json decls = Json::array();
      for (const ToolSpec& t : tools) {
        Json d{{"name", t.name}, {"description", t.description}};
        Json params = normalise_schema(t.parameters);
        // An object schema without properties is refused; a tool without parameters omits it.
        const bool empty_object =
            params.is_object() && member(params, "type", Json()) == "object" &&
            (!params.contains("properties") || params.at("properties").empty());
        if (!empty_object) d["parameters"] = std::move(params);
        decls.push_back(std::move(d));
      }
      body["tools"] = Json::array({{{"functionDeclarations", std::move(decls)}}});
    }
    Json generation = Json::object();
    if (o_.max_tokens) generation["maxOutputTokens"] = *o_.max_tokens;
    if (thinking_) generation["thinkingConfig"] = {{"includeThoughts", true}};
    apply_generation(context, tools, generation, body);
    if (!generation.empty()) body["generationConfig"] = std::move(generation);
    return body;
  }

  // Folds one GenerateContentResponse (whole or a stream event) into `r` and `parts`.
  Result<void> absorb(const Json& j, Response& r, Json& parts, std::string& finish,
                      const Emitter& emit) {
    if (j.contains("error")) return std::unexpected(stream_error(o_, j.dump()));
    if (auto m = str(j, "modelVersion"); !m.empty()) r.model = m;
    if (j.contains("usageMetadata")) r.usage = read_usage(j.at("usageMetadata"));
    const Json candidates = member(j, "candidates", Json::array());
    if (!candidates.is_array() || candidates.empty()) {
      const std::string blocked = str(member(j, "promptFeedback", Json::object()), "blockReason");
      if (!blocked.empty())
        return fail(ErrorCode::Provider, o_.name + ": the prompt was blocked: " + blocked);
      return {};
    }
    const Json& candidate = candidates.front();
    if (auto f = str(candidate, "finishReason"); !f.empty()) finish = f;
    const Json incoming =
        member(member(candidate, "content", Json::object()), "parts", Json::array());
    if (!incoming.is_array()) return {};
    for (const Json& part : incoming) {
      if (!part.is_object()) continue;
      if (part.contains("functionCall")) {
        const Json& fc = part.at("functionCall");
        ToolCall call;
        call.name = str(fc, "name");
        if (call.name.empty())
          return fail(ErrorCode::Provider, o_.name + ": a functionCall part has no name");
        call.id = str(fc, "id");
        if (call.id.empty())
          call.id = std::string(kSyntheticId) + std::to_string(r.tool_calls.size());
        call.arguments = member(fc, "args", Json::object());
        emit.tool_start(call.id, call.name);
        emit.tool_delta(call.id,
                        call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace));
        emit.tool_end(call.id);
        r.tool_calls.push_back(std::move(call));
        parts.push_back(part);
        continue;
      }
      if (!part.contains("text")) {
        parts.push_back(part);
        continue;
      }
      const std::string text = str(part, "text");
      const bool thought = flag(part, "thought");
      if (thought) {
        r.thinking += text;
        emit.thinking(text);
      } else {
        r.text += text;
        emit.text(text);
      }
      // Stream fragments of one text run are merged back into one part for the replay.
      Json* last = parts.empty() ? nullptr : &parts.back();
      if (last != nullptr && last->contains("text") && last->value("thought", false) == thought &&
          !last->contains("functionCall")) {
        (*last)["text"] = str(*last, "text") + text;
        if (part.contains("thoughtSignature"))
          (*last)["thoughtSignature"] = part.at("thoughtSignature");
      } else {
        parts.push_back(part);
      }
    }
    return {};
  }

  Result<void> conclude(Response& r, Json& parts, const std::string& finish,
                        const std::string& model, const Json& last) const {
    if (parts.empty() && finish.empty()) {
      return fail(ErrorCode::Provider,
                  o_.name + ": the response has no candidates (body: " +
                      excerpt(last.dump(-1, ' ', false, Json::error_handler_t::replace)) + ")");
    }
    if (r.model.empty()) r.model = model;
    r.stop_reason = map_finish(finish, !r.tool_calls.empty());
    r.provider_state = Json{{"parts", parts}};
    return {};
  }

  // streamGenerateContent events: each a GenerateContentResponse folded in as a whole one is;
  // the stream is complete once a candidate named its finishReason.
  class Stream final : public StreamMapping {
   public:
    Stream(GeminiProvider& provider, const std::string& model) : p_(provider), model_(model) {
      r_.provider = p_.o_.name;
    }

    Result<void> on_event(WireEvent& ev, const Emitter& emit) override {
      auto ok = p_.absorb(ev.json, r_, parts_, finish_, emit);
      last_ = std::move(ev.json);
      return ok;
    }

    Result<Response> finish(const StreamEnd& end, const Emitter& /*emit*/) override {
      if (end.cut || finish_.empty()) return std::unexpected(stream_cut(p_.o_, "a finishReason"));
      KERNEX_RETURN_IF_ERROR(p_.conclude(r_, parts_, finish_, model_, last_));
      return std::move(r_);
    }

   private:
    GeminiProvider& p_;
    const std::string& model_;
    Response r_;
    Json parts_ = Json::array();
    std::string finish_;
    Json last_ = Json::object();
  };

  CommonOptions o_;
  bool thinking_ = false;
  http::Client client_;
  std::string base_;
  StreamSink no_sink_;
};

constexpr std::array kGeminiFields{
    config::Field{"extended_thinking", config::FieldType::Bool,
                  "the model's thoughts in the reply (includeThoughts)", "false"},
};

Result<std::shared_ptr<Provider>> make_gemini(const Json& config) {
  const CatalogEntry* entry = find_catalog_entry("gemini");
  OptionReader reader("gemini", config, kGeminiFields);
  KERNEX_ASSIGN_OR_RETURN(auto thinking, reader.boolean("extended_thinking"));
  KERNEX_ASSIGN_OR_RETURN(
      auto options,
      read_common(reader, {"gemini", std::string(entry->default_model),
                           std::string(entry->base_url), std::string(entry->key_env)}));
  if (!valid_model(options.model.starts_with("models/") ? options.model.substr(7)
                                                        : options.model)) {
    return config::field_error(reader.where("model"),
                               "`" + excerpt(options.model, 128) +
                                   "` is not a valid model id (letters, digits, '.', '_' or '-')");
  }
  return std::make_shared<GeminiProvider>(std::move(options), thinking.value_or(false));
}

}  // namespace

}  // namespace kernex::providers

KERNEX_PLUGIN(Provider, "gemini", "1.0.0",
              "Google Gemini generateContent: function calling, streaming",
              kernex::providers::make_gemini)
