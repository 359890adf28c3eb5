// Ollama /api/chat: tools, NDJSON streaming. No key (an api_key, when given, is sent as a
// bearer token for Ollama behind an authenticating proxy).
#include "kernex/plugin.hpp"
#include "kernex/providers/catalog.hpp"
#include "kernex/providers/request.hpp"
#include "kernex/providers/stream_driver.hpp"

namespace kernex::providers {

namespace {

std::string map_done(const std::string& reason, bool has_calls) {
  if (has_calls) return "tool_use";
  if (reason == "length") return "max_tokens";
  if (reason.empty() || reason == "stop") return "end_turn";
  return reason;
}

class OllamaProvider final : public Provider {
 public:
  explicit OllamaProvider(CommonOptions options) : o_(std::move(options)), client_(o_.client) {
    std::string base = o_.base_url;
    if (path_ends_with(o_.url, "/api/chat")) {
      endpoint_ = base;
    } else {
      if (path_ends_with(o_.url, "/api")) base.resize(base.size() - 4);
      endpoint_ = join_url(base, "/api/chat");
    }
  }

  std::string name() const override { return o_.name; }
  std::string default_model() const override { return o_.model; }
  // The pool's next instance: these options as parsed, with a client of its own.
  std::shared_ptr<Provider> concurrent_instance() override {
    return std::make_shared<OllamaProvider>(o_);
  }

  Result<Response> complete(const Context& context, const std::vector<ToolSpec>& tools,
                            const StreamSink& sink) override {
    http::Request request = json_request(context, endpoint_);
    if (!o_.api_key.empty()) request.headers.emplace_back("Authorization", "Bearer " + o_.api_key);
    request.body = build_body(context, static_cast<bool>(sink))
                       .dump(-1, ' ', false, Json::error_handler_t::replace);
    if (!tools.empty()) append_member(request.body, "tools", *function_tools_text(tools));
    if (sink) {
      Stream mapping(*this, context);
      return drive_stream(client_, request, o_, Framing::Ndjson, mapping, sink);
    }
    KERNEX_ASSIGN_OR_RETURN(auto body, send_buffered(client_, request, o_));
    if (body.contains("error")) return std::unexpected(stream_error(o_, body.dump()));
    Response r;
    r.provider = o_.name;
    KERNEX_RETURN_IF_ERROR(absorb(body, r, Emitter(no_sink_)));
    finish(r, context, str(body, "done_reason"));
    return r;
  }

 private:
  // Ollama's options (temperature, top_p, num_predict, stop, seed, penalties) and `format`
  // (json, or a JSON Schema). It has no tool_choice: the loop's own rules apply.
  static void apply_generation(const Generation& g, Json& body) {
    Json options = body.value("options", Json::object());
    sampling_fields(g, options);
    if (g.max_tokens) options["num_predict"] = *g.max_tokens;
    if (!options.empty()) body["options"] = std::move(options);
    if (g.response_format.kind == ResponseFormat::Kind::JsonObject) body["format"] = "json";
    if (g.response_format.kind == ResponseFormat::Kind::JsonSchema)
      body["format"] = g.response_format.schema;
  }

  // The body without `tools`: complete() appends their cached text (function_tools_text).
  Json build_body(const Context& context, bool streaming) const {
    Json messages = system_first(context);
    for (const ContextEntry& e : context.messages()) {
      if (e.role == "tool") {
        Json m{{"role", "tool"}, {"content", e.tool_result ? e.tool_result->content : e.content}};
        if (e.tool_result) m["tool_name"] = e.tool_result->name;
        messages.push_back(std::move(m));
        continue;
      }
      Json m{{"role", e.role}, {"content", e.content}};
      if (e.role == "assistant" && !e.tool_calls.empty()) {
        Json calls = Json::array();
        for (const ToolCall& c : e.tool_calls) {
          calls.push_back(
              {{"function",
                {{"name", c.name},
                 {"arguments", c.arguments.is_object() ? c.arguments : Json::object()}}}});
        }
        m["tool_calls"] = std::move(calls);
      }
      messages.push_back(std::move(m));
    }
    Json body{{"model", context.model.value_or(o_.model)},
              {"messages", std::move(messages)},
              {"stream", streaming}};
    if (o_.max_tokens) body["options"] = {{"num_predict", *o_.max_tokens}};
    apply_generation(context.generation, body);
    return body;
  }

  // Folds one response object (whole or a stream line) into `r`, emitting its deltas.
  Result<void> absorb(const Json& j, Response& r, const Emitter& emit) {
    if (auto m = str(j, "model"); !m.empty()) r.model = m;
    const Json message = member(j, "message", Json::object());
    const std::string text = str(message, "content");
    r.text += text;
    emit.text(text);
    const std::string thinking = str(message, "thinking");
    r.thinking += thinking;
    emit.thinking(thinking);
    const Json calls = member(message, "tool_calls", Json::array());
    if (calls.is_array()) {
      for (const Json& c : calls) {
        const Json fn = member(c, "function", Json::object());
        ToolCall call;
        call.id = str(c, "id");
        if (call.id.empty()) call.id = "call_" + std::to_string(r.tool_calls.size());
        call.name = str(fn, "name");
        if (call.name.empty())
          return fail(ErrorCode::Provider, o_.name + ": a tool call has no function name");
        const Json args = member(fn, "arguments", Json());  // an object, or a JSON text
        call.arguments = args.is_null() ? Json::object() : args;
        if (args.is_string()) call.arguments = parse_arguments(args.get<std::string>());
        emit.tool_start(call.id, call.name);
        emit.tool_delta(call.id,
                        call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace));
        emit.tool_end(call.id);
        r.tool_calls.push_back(std::move(call));
      }
    }
    if (j.contains("prompt_eval_count")) r.usage.input_tokens = u64(j, "prompt_eval_count");
    if (j.contains("eval_count")) r.usage.output_tokens = u64(j, "eval_count");
    return {};
  }

  void finish(Response& r, const Context& context, const std::string& done_reason) const {
    if (r.model.empty()) r.model = context.model.value_or(o_.model);
    r.stop_reason = map_done(done_reason, !r.tool_calls.empty());
  }

  // /api/chat NDJSON: each line a response object folded in as a whole one is, until the line
  // with done: true.
  class Stream final : public StreamMapping {
   public:
    Stream(OllamaProvider& provider, const Context& context) : p_(provider), context_(context) {
      r_.provider = p_.o_.name;
    }

    bool stopped() const override { return done_; }

    Result<void> on_event(WireEvent& ev, const Emitter& emit) override {
      if (ev.json.contains("error")) return std::unexpected(stream_error(p_.o_, ev.data));
      KERNEX_RETURN_IF_ERROR(p_.absorb(ev.json, r_, emit));
      if (flag(ev.json, "done")) {
        done_ = true;
        done_reason_ = str(ev.json, "done_reason");
      }
      return {};
    }

    Result<Response> finish(const StreamEnd& /*end*/, const Emitter& /*emit*/) override {
      if (!done_) return std::unexpected(stream_cut(p_.o_, "its done line"));
      p_.finish(r_, context_, done_reason_);
      return std::move(r_);
    }

   private:
    OllamaProvider& p_;
    const Context& context_;
    Response r_;
    bool done_ = false;
    std::string done_reason_;
  };

  CommonOptions o_;
  http::Client client_;
  std::string endpoint_;
  StreamSink no_sink_;
};

Result<std::shared_ptr<Provider>> make_ollama(const Json& config) {
  const CatalogEntry* entry = find_catalog_entry("ollama");
  OptionReader reader("ollama", config);
  KERNEX_ASSIGN_OR_RETURN(auto options,
                          read_common(reader, {"ollama", std::string(entry->default_model),
                                               std::string(entry->base_url), ""}));
  return std::make_shared<OllamaProvider>(std::move(options));
}

}  // namespace

}  // namespace kernex::providers

KERNEX_PLUGIN(Provider, "ollama", "1.0.0", "Ollama /api/chat: tools, NDJSON streaming",
              kernex::providers::make_ollama)
