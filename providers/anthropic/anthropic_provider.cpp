// Anthropic Messages API: tool_use / tool_result, thinking blocks replayed intact through
// provider_state, the KERNEX_CACHE_BOUNDARY prompt-cache marker, cache usage, SSE streaming.
#include <algorithm>
#include <array>
#include <map>

#include "kernex/plugin.hpp"
#include "kernex/providers/catalog.hpp"
#include "kernex/providers/request.hpp"
#include "kernex/providers/stream_driver.hpp"

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

// Messages API events: message_start (model, input usage), content blocks started, extended by
// deltas and stopped (a tool_use block's input arrives as JSON fragments), message_delta (stop
// reason, output usage), and message_stop. The blocks are kept whole for the replay.
class AnthropicStream final : public StreamMapping {
 public:
  AnthropicStream(const CommonOptions& o, const Context& context) : o_(o), context_(context) {
    r_.provider = o_.name;
  }

  bool stopped() const override { return stopped_; }

  Result<void> on_event(WireEvent& ev, const Emitter& emit) override {
    const Json& j = ev.json;
    const std::string type = str(j, "type").empty() ? std::string(ev.name) : str(j, "type");
    if (type == "error") return std::unexpected(stream_error(o_, ev.data));
    if (type == "message_start") {
      const Json msg = member(j, "message", Json::object());
      if (auto m = str(msg, "model"); !m.empty()) r_.model = m;
      read_usage(member(msg, "usage", Json::object()), r_.usage, true);
    } else if (type == "message_delta") {
      if (auto s = str(member(j, "delta", Json::object()), "stop_reason"); !s.empty())
        r_.stop_reason = s;
      read_usage(member(j, "usage", Json::object()), r_.usage, false);
    } else if (type == "message_stop") {
      stopped_ = true;
    } else if (type == "content_block_start" || type == "content_block_delta" ||
               type == "content_block_stop") {
      return on_block(type, j, emit);
    }
    return {};
  }

  Result<Response> finish(const StreamEnd& /*end*/, const Emitter& /*emit*/) override {
    if (!stopped_) return std::unexpected(stream_cut(o_, "message_stop"));
    Response whole;
    KERNEX_RETURN_IF_ERROR(read_blocks(blocks_, whole, o_.name));
    r_.text = std::move(whole.text);
    r_.thinking = std::move(whole.thinking);
    r_.tool_calls = std::move(whole.tool_calls);
    if (r_.model.empty()) r_.model = context_.model.value_or(o_.model);
    if (r_.stop_reason.empty()) r_.stop_reason = r_.tool_calls.empty() ? "end_turn" : "tool_use";
    r_.provider_state = Json{{"content", std::move(blocks_)}};
    return std::move(r_);
  }

 private:
  Result<void> on_block(const std::string& type, const Json& j, const Emitter& emit) {
    if (!j.contains("index") || !j.at("index").is_number_unsigned() ||
        j.at("index").get<std::size_t>() > 4096) {
      return std::unexpected(malformed_event(o_, type + " without a valid index"));
    }
    const std::size_t index = j.at("index").get<std::size_t>();
    if (type == "content_block_start") return block_start(index, j, emit);
    if (index >= blocks_.size()) {
      return std::unexpected(
          malformed_event(o_, type + " for block " + std::to_string(index) + " never started"));
    }
    Json& block = blocks_[index];
    if (type == "content_block_delta") {
      block_delta(index, block, member(j, "delta", Json::object()), emit);
      return {};
    }
    if (str(block, "type") != "tool_use") return {};  // content_block_stop
    Json input = parse_arguments(partial_json_[index]);
    if (!input.is_object()) {
      return std::unexpected(malformed_event(
          o_, "tool_use input is not a JSON object: " + excerpt(partial_json_[index], 256)));
    }
    block["input"] = std::move(input);
    emit.tool_end(str(block, "id"));
    return {};
  }

  Result<void> block_start(std::size_t index, const Json& j, const Emitter& emit) {
    Json block = member(j, "content_block", Json::object());
    if (!block.is_object())
      return std::unexpected(malformed_event(o_, "content_block is not an object"));
    while (blocks_.size() <= index) blocks_.push_back(Json::object());
    const std::string btype = str(block, "type");
    if (btype == "tool_use") {
      partial_json_[index].clear();
      emit.tool_start(str(block, "id"), str(block, "name"));
    } else if (btype == "text") {
      if (any_text_) emit.text("\n");
      any_text_ = true;
      emit.text(str(block, "text"));
    }
    blocks_[index] = std::move(block);
    return {};
  }

  void block_delta(std::size_t index, Json& block, const Json& delta, const Emitter& emit) {
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
      partial_json_[index] += fragment;
      emit.tool_delta(str(block, "id"), fragment);
    }
  }

  const CommonOptions& o_;
  const Context& context_;
  Response r_;
  Json blocks_ = Json::array();
  std::map<std::size_t, std::string> partial_json_;
  bool stopped_ = false;
  bool any_text_ = false;
};

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
  // The pool's next instance: these options as parsed, with a client of its own.
  std::shared_ptr<Provider> concurrent_instance() override {
    return std::make_shared<AnthropicProvider>(o_, thinking_, thinking_budget_);
  }

  Result<Response> complete(const Context& context, const std::vector<ToolSpec>& tools,
                            const StreamSink& sink) override {
    auto body = build_body(context, tools, static_cast<bool>(sink));
    if (!body) return std::unexpected(body.error());
    http::Request request = json_request(context, endpoint_);
    if (!o_.api_key.empty()) request.headers.emplace_back("x-api-key", o_.api_key);
    request.headers.emplace_back("anthropic-version", "2023-06-01");
    request.body = body->dump(-1, ' ', false, Json::error_handler_t::replace);
    if (sink) {
      AnthropicStream mapping(o_, context);
      return drive_stream(client_, request, o_, Framing::Sse, mapping, sink);
    }
    KERNEX_ASSIGN_OR_RETURN(auto parsed, send_buffered(client_, request, o_));
    if (str(parsed, "type") == "error") return std::unexpected(stream_error(o_, parsed.dump()));
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
    Json messages = conversation(context);
    if (!messages.empty() && messages.back().at("role") == "assistant") {
      return fail(ErrorCode::Provider,
                  o_.name +
                      ": the conversation ends with an assistant message (prefill is not "
                      "supported)");
    }
    Json body{{"model", context.model.value_or(o_.model)},
              {"max_tokens", o_.max_tokens.value_or(kDefaultMaxTokens)},
              {"messages", std::move(messages)}};
    if (Json system = system_blocks(context.system_prompt); !system.empty())
      body["system"] = std::move(system);
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

  // The conversation as Messages API turns: consecutive entries of one role are merged, tool
  // results are user blocks, and an assistant turn replays its provider_state blocks intact.
  static Json conversation(const Context& context) {
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
    return messages;
  }

  // The system prompt as text blocks: the part before KERNEX_CACHE_BOUNDARY is marked cacheable.
  static Json system_blocks(std::string_view prompt) {
    const SplitPrompt split = split_cache_boundary(prompt);
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
    return system;
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

  CommonOptions o_;
  bool thinking_ = false;
  std::optional<std::uint64_t> thinking_budget_;
  http::Client client_;
  std::string endpoint_;
};

// Extended thinking is the provider's option: `extended_thinking: true` (adaptive), or a
// `thinking_budget` of tokens, which turns it on with that budget.
constexpr std::array kAnthropicFields{
    config::Field{"extended_thinking", config::FieldType::Bool,
                  "adaptive extended thinking, its blocks replayed on later turns", "false"},
    config::Field{"thinking_budget", config::FieldType::Integer,
                  "thinking tokens per call; turns extended thinking on", "unset", 1,
                  kMaxTokensOption},
};

Result<std::shared_ptr<Provider>> make_anthropic(const Json& config) {
  const CatalogEntry* entry = find_catalog_entry("anthropic");
  OptionReader reader("anthropic", config, kAnthropicFields);
  KERNEX_ASSIGN_OR_RETURN(auto thinking, reader.boolean("extended_thinking"));
  KERNEX_ASSIGN_OR_RETURN(auto budget, reader.uint("thinking_budget"));
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
