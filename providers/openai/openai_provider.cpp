// OpenAI Chat Completions and the compatible services (presets in catalog.hpp). One model call
// per complete(): POST {base_url}/chat/completions, buffered or streamed over SSE.
#include "openai_provider.hpp"

#include <array>
#include <map>
#include <span>

#include "kernex/providers/catalog.hpp"
#include "kernex/providers/request.hpp"
#include "kernex/providers/stream_driver.hpp"

namespace kernex::providers {

namespace {

// Content is a string, null, or (some compatible servers) an array of {type:"text", text}.
std::string content_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const auto& part : content) out += str(part, "text");
  }
  return out;
}

// prompt_tokens counts cached tokens too; Usage keeps fresh input and cache reads apart.
Usage parse_usage(const Json& u) {
  Usage usage;
  const std::uint64_t prompt = u64(u, "prompt_tokens");
  std::uint64_t cached = u64(member(u, "prompt_tokens_details", Json::object()), "cached_tokens");
  if (cached == 0) cached = u64(u, "prompt_cache_hit_tokens");  // DeepSeek
  cached = std::min(cached, prompt);
  usage.input_tokens = prompt - cached;
  usage.cache_read_tokens = cached;
  usage.output_tokens = u64(u, "completion_tokens");
  return usage;
}

std::string map_finish(const std::string& finish, bool has_calls) {
  if (finish == "tool_calls" || finish == "function_call" || (finish.empty() && has_calls))
    return "tool_use";
  if (finish == "stop" || finish.empty()) return has_calls ? "tool_use" : "end_turn";
  if (finish == "length") return "max_tokens";
  return finish;
}

std::string arguments_text(const Json& arguments) {
  return arguments.is_string() ? arguments.get<std::string>()
                               : arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The reply's first choice: text, reasoning, tool calls, finish reason and usage.
Result<Response> parse_response(const CommonOptions& o, const Json& body, const Context& context) {
  const Json& choices = body.contains("choices") ? body.at("choices") : Json();
  if (!choices.is_array() || choices.empty() || !choices.front().is_object()) {
    return fail(ErrorCode::Provider,
                redact(o.name + ": the response has no choices (body: " +
                           excerpt(body.dump(-1, ' ', false, Json::error_handler_t::replace)) + ")",
                       o.api_key));
  }
  const Json& choice = choices.front();
  const Json message = member(choice, "message", Json::object());
  Response r;
  r.provider = o.name;
  r.model = str(body, "model");
  if (r.model.empty()) r.model = context.model.value_or(o.model);
  r.text = content_text(member(message, "content", Json()));
  r.thinking = str(message, "reasoning_content");
  if (r.thinking.empty()) r.thinking = str(message, "reasoning");
  const Json calls = member(message, "tool_calls", Json::array());
  if (calls.is_array()) {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Json& c = calls[i];
      const Json fn = member(c, "function", Json::object());
      ToolCall call;
      call.id = str(c, "id");
      if (call.id.empty()) call.id = "call_" + std::to_string(i);
      call.name = str(fn, "name");
      if (call.name.empty()) {
        return fail(ErrorCode::Provider,
                    o.name + ": tool_calls[" + std::to_string(i) + "] has no function name");
      }
      const Json args = member(fn, "arguments", Json());  // a JSON text, or an object
      call.arguments = args.is_null()     ? parse_arguments("")
                       : args.is_string() ? parse_arguments(args.get<std::string>())
                                          : args;
      r.tool_calls.push_back(std::move(call));
    }
  }
  r.stop_reason = map_finish(str(choice, "finish_reason"), !r.tool_calls.empty());
  if (body.contains("usage")) r.usage = parse_usage(body.at("usage"));
  return r;
}

// Chat Completions chunks: choices[0].delta carries content, reasoning and tool-call fragments
// (keyed by index; the name and id come first), the last chunks the finish reason and usage,
// and "[DONE]" ends the stream.
class OpenAiStream final : public StreamMapping {
 public:
  OpenAiStream(const CommonOptions& o, const Context& context) : o_(o), context_(context) {
    r_.provider = o_.name;
  }

  bool on_marker(std::string_view data) override {
    if (data != "[DONE]") return false;
    saw_done_ = true;
    return true;
  }

  Result<void> on_event(WireEvent& ev, const Emitter& emit) override {
    const Json& j = ev.json;
    if (j.contains("error")) return std::unexpected(stream_error(o_, ev.data));
    if (auto m = str(j, "model"); !m.empty()) r_.model = m;
    if (j.contains("usage") && j.at("usage").is_object()) r_.usage = parse_usage(j.at("usage"));
    const Json choices = member(j, "choices", Json::array());
    if (!choices.is_array() || choices.empty()) return {};
    const Json& choice = choices.front();
    const Json delta = member(choice, "delta", Json::object());
    const std::string text = content_text(member(delta, "content", Json()));
    r_.text += text;
    emit.text(text);
    std::string thinking = str(delta, "reasoning_content");
    if (thinking.empty()) thinking = str(delta, "reasoning");
    r_.thinking += thinking;
    emit.thinking(thinking);
    const Json tool_deltas = member(delta, "tool_calls", Json::array());
    if (tool_deltas.is_array()) {
      for (std::size_t i = 0; i < tool_deltas.size(); ++i) tool_delta(tool_deltas[i], i, emit);
    }
    if (auto f = str(choice, "finish_reason"); !f.empty()) finish_ = f;
    return {};
  }

  Result<Response> finish(const StreamEnd& end, const Emitter& emit) override {
    if (!end.any_event) return whole_body(end.raw, emit);
    if (end.cut || (!saw_done_ && finish_.empty()))
      return std::unexpected(stream_cut(o_, "the response was complete"));
    for (auto& [index, call] : calls_) {
      if (!call.started) {
        return fail(ErrorCode::Provider,
                    o_.name + ": streamed tool call " + std::to_string(index) + " has no name");
      }
      emit.tool_end(call.id);
      r_.tool_calls.push_back(ToolCall{call.id, call.name, parse_arguments(call.arguments)});
    }
    if (r_.model.empty()) r_.model = context_.model.value_or(o_.model);
    r_.stop_reason = map_finish(finish_, !r_.tool_calls.empty());
    return std::move(r_);
  }

 private:
  struct Call {
    std::string id;
    std::string name;
    std::string arguments;
    bool started = false;
  };

  void tool_delta(const Json& d, std::size_t position, const Emitter& emit) {
    const std::int64_t index = d.contains("index") && d.at("index").is_number_integer()
                                   ? d.at("index").get<std::int64_t>()
                                   : static_cast<std::int64_t>(position);
    Call& call = calls_[index];
    if (auto id = str(d, "id"); !id.empty() && call.id.empty()) call.id = id;
    const Json fn = member(d, "function", Json::object());
    if (auto name = str(fn, "name"); !name.empty() && !call.started) call.name += name;
    const Json args = member(fn, "arguments", Json());
    const std::string fragment =
        args.is_string() ? args.get<std::string>() : (args.is_null() ? "" : args.dump());
    call.arguments += fragment;
    if (!call.started && !call.name.empty()) {
      if (call.id.empty()) call.id = "call_" + std::to_string(index);
      call.started = true;
      emit.tool_start(call.id, call.name);
      emit.tool_delta(call.id, call.arguments);
    } else if (call.started) {
      emit.tool_delta(call.id, fragment);
    }
  }

  // The server ignored "stream": true and sent one JSON body: answer from it.
  Result<Response> whole_body(std::string_view raw, const Emitter& emit) const {
    KERNEX_ASSIGN_OR_RETURN(auto body, parse_body(o_, raw));
    KERNEX_ASSIGN_OR_RETURN(auto whole, parse_response(o_, body, context_));
    emit.thinking(whole.thinking);
    emit.text(whole.text);
    for (const ToolCall& c : whole.tool_calls) {
      emit.tool_start(c.id, c.name);
      emit.tool_delta(c.id, arguments_text(c.arguments));
      emit.tool_end(c.id);
    }
    return whole;
  }

  const CommonOptions& o_;
  const Context& context_;
  Response r_;
  std::map<std::int64_t, Call> calls_;
  std::string finish_;
  bool saw_done_ = false;
};

class OpenAiProvider final : public Provider {
 public:
  explicit OpenAiProvider(CommonOptions options)
      : o_(std::move(options)),
        client_(o_.client),
        endpoint_(path_ends_with(o_.url, "/chat/completions")
                      ? o_.base_url
                      : join_url(o_.base_url, "/chat/completions")) {}

  std::string name() const override { return o_.name; }
  std::string default_model() const override { return o_.model; }
  // The pool's next instance: these options as parsed, with a client of its own.
  std::shared_ptr<Provider> concurrent_instance() override {
    return std::make_shared<OpenAiProvider>(o_);
  }

  Result<Response> complete(const Context& context, const std::vector<ToolSpec>& tools,
                            const StreamSink& sink) override {
    const bool streaming = static_cast<bool>(sink);
    http::Request request = json_request(context, endpoint_);
    if (!o_.api_key.empty()) request.headers.emplace_back("Authorization", "Bearer " + o_.api_key);
    request.body =
        build_body(context, tools, streaming).dump(-1, ' ', false, Json::error_handler_t::replace);
    if (!tools.empty()) append_member(request.body, "tools", *function_tools_text(tools));
    if (streaming) {
      OpenAiStream mapping(o_, context);
      return drive_stream(client_, request, o_, Framing::Sse, mapping, sink);
    }
    KERNEX_ASSIGN_OR_RETURN(auto body, send_buffered(client_, request, o_));
    return parse_response(o_, body, context);
  }

 private:
  // The request's generation fields, as OpenAI names them (an OpenAI-compatible server takes
  // them all; structured output is native here).
  static void apply_generation(const Context& context, const std::vector<ToolSpec>& tools,
                               Json& body) {
    const Generation& g = context.generation;
    sampling_fields(g, body);
    if (g.max_tokens) body["max_tokens"] = *g.max_tokens;
    if (g.reasoning_effort) body["reasoning_effort"] = *g.reasoning_effort;
    const ResponseFormat& f = g.response_format;
    if (f.kind == ResponseFormat::Kind::JsonObject)
      body["response_format"] = {{"type", "json_object"}};
    if (f.kind == ResponseFormat::Kind::JsonSchema) {
      body["response_format"] = {
          {"type", "json_schema"},
          {"json_schema", {{"name", f.name}, {"schema", f.schema}, {"strict", f.strict}}}};
    }
    const ToolChoice choice = call_tool_choice(context, tools);
    if (choice.mode == ToolChoice::Mode::Required) body["tool_choice"] = "required";
    if (choice.mode == ToolChoice::Mode::Named)
      body["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice.name}}}};
    if (g.parallel_tool_calls && !tools.empty())
      body["parallel_tool_calls"] = *g.parallel_tool_calls;
  }

  // The body without `tools`: complete() appends their cached text (function_tools_text).
  Json build_body(const Context& context, const std::vector<ToolSpec>& tools,
                  bool streaming) const {
    Json messages = system_first(context);
    for (const ContextEntry& e : context.messages()) {
      if (e.role == "tool") {
        if (e.tool_result) {
          messages.push_back({{"role", "tool"},
                              {"tool_call_id", e.tool_result->call_id},
                              {"content", e.tool_result->content}});
        } else {
          messages.push_back({{"role", "user"}, {"content", "[Tool result]\n" + e.content}});
        }
        continue;
      }
      Json m{{"role", e.role}};
      if (e.role == "assistant" && !e.tool_calls.empty()) {
        m["content"] = e.content.empty() ? Json(nullptr) : Json(e.content);
        Json calls = Json::array();
        for (const ToolCall& c : e.tool_calls) {
          calls.push_back(
              {{"id", c.id},
               {"type", "function"},
               {"function", {{"name", c.name}, {"arguments", arguments_text(c.arguments)}}}});
        }
        m["tool_calls"] = std::move(calls);
      } else {
        m["content"] = e.content;
      }
      messages.push_back(std::move(m));
    }
    Json body{{"model", context.model.value_or(o_.model)}, {"messages", std::move(messages)}};
    if (o_.max_tokens) body["max_tokens"] = *o_.max_tokens;
    apply_generation(context, tools, body);
    if (streaming) {
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
    }
    return body;
  }

  CommonOptions o_;
  http::Client client_;
  std::string endpoint_;
};

// The openai plugin's own option: the preset (groq, mistral, ...) whose defaults it starts from.
// The preset plugins (`groq`, ...) are their preset and take only the common options.
constexpr std::array kPresetField{
    config::Field{"preset", config::FieldType::String,
                  "an OpenAI-compatible service whose model, base_url and key variable are the "
                  "defaults (kOpenAiPresets)",
                  "openai"},
};

}  // namespace

Result<std::shared_ptr<Provider>> make_openai_provider(const Json& config,
                                                       std::string_view plugin_name) {
  const std::string plugin(plugin_name);
  OptionReader reader(plugin, config,
                      plugin == "openai" ? std::span<const config::Field>(kPresetField)
                                         : std::span<const config::Field>());
  std::string preset_name = plugin;
  if (plugin == "openai") {
    KERNEX_ASSIGN_OR_RETURN(auto preset, reader.string("preset"));
    if (preset) preset_name = *preset;
  }
  const CatalogEntry* entry = nullptr;
  for (const auto& e : kOpenAiPresets) {
    if (e.name == preset_name) entry = &e;
  }
  if (entry == nullptr) {
    std::string known;
    for (const auto& e : kOpenAiPresets) known += (known.empty() ? "" : ", ") + std::string(e.name);
    return fail(ErrorCode::Config,
                plugin + ": unknown preset `" + preset_name + "` (known: " + known + ")");
  }
  ProviderDefaults defaults{std::string(entry->name), std::string(entry->default_model),
                            std::string(entry->base_url), std::string(entry->key_env)};
  KERNEX_ASSIGN_OR_RETURN(auto options, read_common(reader, defaults));
  return std::make_shared<OpenAiProvider>(std::move(options));
}

}  // namespace kernex::providers
