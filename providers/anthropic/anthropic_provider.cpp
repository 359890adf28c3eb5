// Anthropic Messages API: tool_use / tool_result, thinking blocks replayed intact through
// provider_state, the KERNEX_CACHE_BOUNDARY prompt-cache marker, cache usage, SSE streaming.
#include <algorithm>
#include <map>

#include "kernex/http/sse.hpp"
#include "kernex/plugin.hpp"
#include "kernex/providers/catalog.hpp"
#include "kernex/providers/support.hpp"

namespace kernex::providers {

namespace {

constexpr std::uint64_t kDefaultMaxTokens = 16384;  // kernex's default

// Anthropic reports fresh input apart from cache reads and writes, as Usage does.
void read_usage(const Json& u, Usage& usage, bool overwrite_zero) {
  if (!u.is_object()) return;
  auto set = [&](const char* key, std::uint64_t& field) {
    if (!u.contains(key) || u.at(key).is_null()) return;
    const std::uint64_t v = u64(u, key);
    if (v > 0 || overwrite_zero) field = v;
  };
  set("input_tokens", usage.input_tokens);
  set("output_tokens", usage.output_tokens);
  set("cache_read_input_tokens", usage.cache_read_tokens);
  set("cache_creation_input_tokens", usage.cache_write_tokens);
}

// Text, thinking and tool calls out of content blocks; unknown block types are kept (in
// provider_state) but otherwise ignored.
Result<void> read_blocks(const Json& content, Response& r, const std::string& name) {
  if (!content.is_array()) return {};
  bool first_text = true;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const Json& b = content[i];
    const std::string type = str(b, "type");
    if (type == "text") {
      if (!first_text) r.text += '\n';
      r.text += str(b, "text");
      first_text = false;
    } else if (type == "thinking") {
      r.thinking += str(b, "thinking");
    } else if (type == "tool_use") {
      ToolCall call{str(b, "id"), str(b, "name"), member(b, "input", Json::object())};
      if (call.id.empty() || call.name.empty()) {
        return fail(ErrorCode::Provider,
                    name + ": content[" + std::to_string(i) + "]: tool_use without id or name");
      }
      r.tool_calls.push_back(std::move(call));
    }
  }
  return {};
}

class AnthropicProvider final : public Provider {
 public:
  AnthropicProvider(CommonOptions options, bool thinking,
                    std::optional<std::uint64_t> thinking_budget)
      : o_(std::move(options)),
        thinking_(thinking),
        thinking_budget_(thinking_budget),
        client_(o_.client) {
    if (path_ends_with(o_.url, "/messages")) {
      endpoint_ = o_.base_url;
    } else if (path_ends_with(o_.url, "/v1")) {
      endpoint_ = join_url(o_.base_url, "/messages");
    } else {
      endpoint_ = join_url(o_.base_url, "/v1/messages");
    }
  }

  std::string name() const override { return o_.name; }
  std::string default_model() const override { return o_.model; }

  Result<Response> complete(const Context& context, const std::vector<ToolSpec>& tools,
                            const StreamSink& sink) override {
    auto body = build_body(context, tools, static_cast<bool>(sink));
    if (!body) return std::unexpected(body.error());
    http::Request request;
    request.stop = context.stop;  // the host cancelling the run aborts the request
    request.url = endpoint_;
    request.headers = json_headers();
    if (!o_.api_key.empty()) request.headers.emplace_back("x-api-key", o_.api_key);
    request.headers.emplace_back("anthropic-version", "2023-06-01");
    request.body = body->dump(-1, ' ', false, Json::error_handler_t::replace);
    if (sink) return stream(request, context, sink);

    auto response = client_.send(request);
    if (!response) return std::unexpected(transport_error(o_, response.error()));
    if (response->status < 200 || response->status >= 300)
      return std::unexpected(http_error(o_, *response));
    KERNEX_ASSIGN_OR_RETURN(auto parsed, parse_body(o_, response->body));
    if (str(parsed, "type") == "error") return std::unexpected(stream_error(o_, response->body));
    Response r;
    r.provider = o_.name;
    r.model = str(parsed, "model");
    if (r.model.empty()) r.model = context.model.value_or(o_.model);
    const Json content = member(parsed, "content", Json::array());
    KERNEX_RETURN_IF_ERROR(read_blocks(content, r, o_.name));
    read_usage(member(parsed, "usage", Json::object()), r.usage, true);
    r.stop_reason = str(parsed, "stop_reason");
    if (r.stop_reason.empty()) r.stop_reason = r.tool_calls.empty() ? "end_turn" : "tool_use";
    r.provider_state = Json{{"content", content}};
    return r;
  }

 private:
  Result<Json> build_body(const Context& context, const std::vector<ToolSpec>& tools,
                          bool streaming) const {
    Json messages = Json::array();
    auto push = [&](const std::string& role, Json blocks) {
      if (!messages.empty() && messages.back().at("role") == role) {
        for (auto& b : blocks) messages.back()["content"].push_back(std::move(b));
      } else {
        messages.push_back({{"role", role}, {"content", std::move(blocks)}});
      }
    };
    for (const ContextEntry& e : context.messages()) {
      if (e.role == "tool") {
        Json block{{"type", "tool_result"}};
        if (e.tool_result) {
          block["tool_use_id"] = e.tool_result->call_id;
          block["content"] = e.tool_result->content;
          if (e.tool_result->is_error) block["is_error"] = true;
          push("user", Json::array({block}));
        } else {
          push("user", Json::array({{{"type", "text"}, {"text", "[Tool result]\n" + e.content}}}));
        }
      } else if (e.role == "assistant") {
        const Json* replay = nullptr;
        if (e.provider_state.is_object() && e.provider_state.contains("content") &&
            e.provider_state.at("content").is_array() && !e.provider_state.at("content").empty()) {
          replay =
              &e.provider_state.at("content");  // thinking signatures must round-trip unchanged
        }
        Json blocks = replay != nullptr ? *replay : Json::array();
        if (replay == nullptr) {
          if (!e.content.empty()) blocks.push_back({{"type", "text"}, {"text", e.content}});
          for (const ToolCall& c : e.tool_calls) {
            blocks.push_back({{"type", "tool_use"},
                              {"id", c.id},
                              {"name", c.name},
                              {"input", c.arguments.is_object() ? c.arguments : Json::object()}});
          }
        }
        if (!blocks.empty()) push("assistant", std::move(blocks));
      } else {
        // Empty text blocks are refused by the API.
        push("user",
             Json::array({{{"type", "text"},
                           {"text", e.content.empty() ? std::string("(empty)") : e.content}}}));
      }
    }
    if (!messages.empty() && messages.back().at("role") == "assistant") {
      return fail(ErrorCode::Provider,
                  o_.name +
                      ": the conversation ends with an assistant message (prefill is not "
                      "supported)");
    }
    Json body{{"model", context.model.value_or(o_.model)},
              {"max_tokens", o_.max_tokens.value_or(kDefaultMaxTokens)},
              {"messages", std::move(messages)}};
    const SplitPrompt split = split_cache_boundary(context.system_prompt);
    Json system = Json::array();
    if (split.found) {
      if (!split.stable.empty()) {
        system.push_back(
            {{"type", "text"}, {"text", split.stable}, {"cache_control", {{"type", "ephemeral"}}}});
      }
      if (!split.dynamic.empty()) system.push_back({{"type", "text"}, {"text", split.dynamic}});
    } else if (!split.stable.empty()) {
      system.push_back({{"type", "text"}, {"text", split.stable}});
    }
    if (!system.empty()) body["system"] = std::move(system);
    if (!tools.empty()) {
      Json defs = Json::array();
      for (const ToolSpec& t : tools) {
        defs.push_back(
            {{"name", t.name}, {"description", t.description}, {"input_schema", t.parameters}});
      }
      body["tools"] = std::move(defs);
    }
    if (thinking_) {
      body["thinking"] = thinking_budget_
                             ? Json{{"type", "enabled"}, {"budget_tokens", *thinking_budget_}}
                             : Json{{"type", "adaptive"}};
    }
    apply_generation(context, tools, body);
    if (streaming) body["stream"] = true;
    return body;
  }

  // Messages API names: max_tokens, temperature, top_p, stop_sequences, tool_choice (with
  // disable_parallel_tool_use). No seed, penalties or native JSON output (the kernel checks it).
  static void apply_generation(const Context& context, const std::vector<ToolSpec>& tools,
                               Json& body) {
    const Generation& g = context.generation;
    if (g.max_tokens) body["max_tokens"] = *g.max_tokens;
    if (g.temperature) body["temperature"] = std::min(*g.temperature, 1.0);
    if (g.top_p) body["top_p"] = *g.top_p;
    if (!g.stop.empty()) body["stop_sequences"] = g.stop;
    if (tools.empty()) return;
    const ToolChoice choice = call_tool_choice(context, tools);
    Json tc{{"type", "auto"}};
    if (choice.mode == ToolChoice::Mode::Required) tc["type"] = "any";
    if (choice.mode == ToolChoice::Mode::Named) tc = {{"type", "tool"}, {"name", choice.name}};
    if (g.parallel_tool_calls == false) tc["disable_parallel_tool_use"] = true;
    if (choice.mode != ToolChoice::Mode::Auto || g.parallel_tool_calls == false)
      body["tool_choice"] = std::move(tc);
  }

  Result<Response> stream(const http::Request& request, const Context& context,
                          const StreamSink& sink) {
    Emitter emit(sink);
    http::SseParser parser;
    Response r;
    r.provider = o_.name;
    Json blocks = Json::array();
    std::map<std::size_t, std::string> partial_json;
    bool stopped = false;
    bool any_text = false;
    std::optional<Error> failure;

    auto malformed = [&](const std::string& what) {
      failure = Error(ErrorCode::Provider, o_.name + ": malformed stream event from " +
                                               o_.url.authority() + ": " + what);
    };
    auto on_event = [&](const http::SseEvent& ev) {
      if (failure || stopped) return;
      Json j = parse_untrusted(ev.data);
      if (j.is_discarded() || !j.is_object())
        return malformed("data is not a JSON object: " + excerpt(ev.data, 256));
      const std::string type = str(j, "type").empty() ? ev.event : str(j, "type");
      if (type == "error") {
        failure = stream_error(o_, ev.data);
        return;
      }
      if (type == "message_start") {
        const Json msg = member(j, "message", Json::object());
        if (auto m = str(msg, "model"); !m.empty()) r.model = m;
        read_usage(member(msg, "usage", Json::object()), r.usage, true);
        return;
      }
      if (type == "message_delta") {
        if (auto s = str(member(j, "delta", Json::object()), "stop_reason"); !s.empty())
          r.stop_reason = s;
        read_usage(member(j, "usage", Json::object()), r.usage, false);
        return;
      }
      if (type == "message_stop") {
        stopped = true;
        return;
      }
      if (type != "content_block_start" && type != "content_block_delta" &&
          type != "content_block_stop")
        return;
      if (!j.contains("index") || !j.at("index").is_number_unsigned() ||
          j.at("index").get<std::size_t>() > 4096) {
        return malformed(type + " without a valid index");
      }
      const std::size_t index = j.at("index").get<std::size_t>();
      if (type == "content_block_start") {
        Json block = member(j, "content_block", Json::object());
        if (!block.is_object()) return malformed("content_block is not an object");
        while (blocks.size() <= index) blocks.push_back(Json::object());
        const std::string btype = str(block, "type");
        if (btype == "tool_use") {
          partial_json[index].clear();
          emit.tool_start(str(block, "id"), str(block, "name"));
        } else if (btype == "text") {
          if (any_text) emit.text("\n");
          any_text = true;
          emit.text(str(block, "text"));
        }
        blocks[index] = std::move(block);
        return;
      }
      if (index >= blocks.size())
        return malformed(type + " for block " + std::to_string(index) + " never started");
      Json& block = blocks[index];
      if (type == "content_block_delta") {
        const Json delta = member(j, "delta", Json::object());
        const std::string dtype = str(delta, "type");
        if (dtype == "text_delta") {
          const std::string t = str(delta, "text");
          block["text"] = str(block, "text") + t;
          emit.text(t);
        } else if (dtype == "thinking_delta") {
          const std::string t = str(delta, "thinking");
          block["thinking"] = str(block, "thinking") + t;
          emit.thinking(t);
        } else if (dtype == "signature_delta") {
          block["signature"] = str(block, "signature") + str(delta, "signature");
        } else if (dtype == "input_json_delta") {
          const std::string fragment = str(delta, "partial_json");
          partial_json[index] += fragment;
          emit.tool_delta(str(block, "id"), fragment);
        }
        return;
      }
      // content_block_stop
      if (str(block, "type") == "tool_use") {
        Json input = parse_arguments(partial_json[index]);
        if (!input.is_object())
          return malformed("tool_use input is not a JSON object: " +
                           excerpt(partial_json[index], 256));
        block["input"] = std::move(input);
        emit.tool_end(str(block, "id"));
      }
    };

    auto response = client_.stream(request, [&](std::string_view chunk) {
      auto fed = parser.feed(chunk, on_event);
      if (!fed) failure = Error(ErrorCode::Provider, o_.name + ": " + fed.error().message);
      return !failure;
    });
    auto finish_with = [&](Error e) -> Result<Response> {
      emit.error(e.message);
      return std::unexpected(std::move(e));
    };
    if (failure) return finish_with(*failure);
    if (!response) return finish_with(transport_error(o_, response.error()));
    if (response->status < 200 || response->status >= 300)
      return finish_with(http_error(o_, *response));
    if (!stopped) {
      return finish_with(Error(
          ErrorCode::Provider,
          o_.name + ": the stream from " + o_.url.authority() + " ended before message_stop"));
    }
    Response whole;
    if (auto ok = read_blocks(blocks, whole, o_.name); !ok) return finish_with(ok.error());
    r.text = std::move(whole.text);
    r.thinking = std::move(whole.thinking);
    r.tool_calls = std::move(whole.tool_calls);
    if (r.model.empty()) r.model = context.model.value_or(o_.model);
    if (r.stop_reason.empty()) r.stop_reason = r.tool_calls.empty() ? "end_turn" : "tool_use";
    r.provider_state = Json{{"content", std::move(blocks)}};
    emit.usage(r.usage, r.stop_reason);
    emit.done();
    return r;
  }

  CommonOptions o_;
  bool thinking_ = false;
  std::optional<std::uint64_t> thinking_budget_;
  http::Client client_;
  std::string endpoint_;
};

Result<std::shared_ptr<Provider>> make_anthropic(const Json& config) {
  const CatalogEntry* entry = find_catalog_entry("anthropic");
  OptionReader reader("anthropic", config);
  // Extended thinking is the provider's option: `extended_thinking: true` (adaptive), or a
  // `thinking_budget` of tokens, which turns it on with that budget.
  KERNEX_ASSIGN_OR_RETURN(auto thinking, reader.boolean("extended_thinking"));
  KERNEX_ASSIGN_OR_RETURN(auto budget, reader.uint("thinking_budget", 1, kMaxTokensOption));
  KERNEX_ASSIGN_OR_RETURN(
      auto options,
      read_common(reader, {"anthropic", std::string(entry->default_model),
                           std::string(entry->base_url), std::string(entry->key_env)}));
  const bool thinking_on = thinking.value_or(false) || budget.has_value();
  return std::make_shared<AnthropicProvider>(std::move(options), thinking_on, budget);
}

}  // namespace

}  // namespace kernex::providers

KERNEX_PLUGIN(Provider, "anthropic", "1.0.0",
              "Anthropic Messages API: tools, thinking replay, prompt caching, streaming",
              kernex::providers::make_anthropic)
