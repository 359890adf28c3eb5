// Plays a scripted conversation so the whole loop runs offline. The script is JSON Lines, one
// provider response per line: {"text", "tool_calls": [{"id","name","arguments"}], "usage",
// "stop_reason", "model", "thinking", "error", "match", "delay_ms"} (all optional; delay_ms
// holds the answer back that long, or until the run's stop token fires: hosts test cancel with
// it). Config: `script` (file, required) and `record` (file: every request received is appended
// as one JSON line).
// A request takes the first unused line whose "match" text occurs in its current message, else
// the first unused line without "match": sub-queries that run concurrently (llm_query_batched)
// then get their answers whatever order they arrive in. Every provider instance made from one
// script (and record file) plays the same script while any of them is alive.
#include <array>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/config_fields.hpp"
#include "kernex/files.hpp"
#include "kernex/plugin.hpp"

namespace {

using kernex::ErrorCode;
using kernex::Json;
using kernex::Result;

Result<kernex::Response> parse_line(const Json& j, const std::string& where) {
  if (!j.is_object()) return kernex::fail(ErrorCode::Parse, where + ": expected a JSON object");
  kernex::Response r;
  try {
    r.text = j.value("text", std::string());
    r.thinking = j.value("thinking", std::string());
    r.stop_reason = j.value("stop_reason", std::string());
    r.model = j.value("model", std::string());
    if (j.contains("tool_calls")) {
      const Json& calls = j.at("tool_calls");
      if (!calls.is_array())
        return kernex::fail(ErrorCode::Parse, where + ": tool_calls: expected an array");
      for (std::size_t i = 0; i < calls.size(); ++i) {
        const Json& c = calls[i];
        const std::string field = where + ": tool_calls[" + std::to_string(i) + "]";
        if (!c.is_object() || !c.contains("name") || !c.at("name").is_string()) {
          return kernex::fail(ErrorCode::Parse,
                              field + ": expected an object with a string `name`");
        }
        kernex::ToolCall call;
        call.name = c.at("name").get<std::string>();
        call.id = c.value("id", "call_" + std::to_string(i + 1));
        call.arguments = c.value("arguments", Json::object());
        r.tool_calls.push_back(std::move(call));
      }
      if (r.stop_reason.empty()) r.stop_reason = "tool_use";
    }
    if (j.contains("usage")) {
      const Json& u = j.at("usage");
      if (!u.is_object())
        return kernex::fail(ErrorCode::Parse, where + ": usage: expected an object");
      r.usage.input_tokens = kernex::uint_value(u, "input_tokens");
      r.usage.output_tokens = kernex::uint_value(u, "output_tokens");
      r.usage.cache_read_tokens = kernex::uint_value(u, "cache_read_tokens");
      r.usage.cache_write_tokens = kernex::uint_value(u, "cache_write_tokens");
      r.usage.cost_usd = u.value("cost_usd", 0.0);
    }
  } catch (const Json::exception& e) {
    return kernex::fail(ErrorCode::Parse, where + ": " + e.what());
  }
  if (r.stop_reason.empty()) r.stop_reason = "end_turn";
  return r;
}

Json describe_request(const kernex::Context& ctx, const std::vector<kernex::ToolSpec>& tools) {
  Json messages = Json::array();
  for (const auto& m : ctx.messages()) messages.push_back(m);
  Json specs = Json::array();
  for (const auto& t : tools) specs.push_back(t);
  Json out{{"system", ctx.system_prompt}, {"messages", messages}, {"tools", specs}};
  if (ctx.model) out["model"] = *ctx.model;
  if (ctx.generation != kernex::Generation{}) out["generation"] = ctx.generation;
  return out;
}

struct Step {
  kernex::Response response;
  std::string error;  // a scripted provider failure
  std::optional<std::string> match;
  std::chrono::milliseconds delay{0};
  bool used = false;
};

struct Script {
  std::mutex mutex;
  std::string path;
  std::vector<Step> steps;
  std::string record;
  std::size_t requests = 0;

  // Matching lines are looked at only while some are unused, and plain lines from a cursor past
  // the used ones: a long script (a server's load test) costs the same per request at its end.
  Step* take(const std::string& message) {
    if (unused_matches == std::size_t(-1)) {
      unused_matches = 0;
      for (const auto& step : steps) unused_matches += step.match && !step.used ? 1 : 0;
    }
    if (unused_matches > 0) {
      for (auto& step : steps) {
        if (!step.used && step.match && message.find(*step.match) != std::string::npos) {
          --unused_matches;
          return &step;
        }
      }
    }
    while (next_plain < steps.size() && (steps[next_plain].used || steps[next_plain].match))
      ++next_plain;
    return next_plain < steps.size() ? &steps[next_plain] : nullptr;
  }
  std::size_t unused_matches = std::size_t(-1);  // counted on the first request
  std::size_t next_plain = 0;
};

class ReplayProvider final : public kernex::Provider {
 public:
  explicit ReplayProvider(std::shared_ptr<Script> script) : s_(std::move(script)) {}

  std::string name() const override { return "replay"; }
  std::string default_model() const override { return "replay"; }
  // Concurrent sub-queries take their lines from the same script, so each line is played once.
  std::shared_ptr<kernex::Provider> concurrent_instance() override {
    return std::make_shared<ReplayProvider>(s_);
  }

  Result<kernex::Response> complete(const kernex::Context& context,
                                    const std::vector<kernex::ToolSpec>& tools,
                                    const kernex::StreamSink& sink) override {
    if (context.stop.stop_requested()) return cancelled();
    auto step = take(context, tools);
    if (!step) return std::unexpected(step.error());
    if (step->delay.count() > 0) {
      // Outside the script's lock: concurrent sub-queries keep playing while this one waits.
      std::mutex mutex;
      std::condition_variable_any wake;
      std::unique_lock waiting(mutex);
      wake.wait_for(waiting, context.stop, step->delay, [] { return false; });
      if (context.stop.stop_requested()) return cancelled();
    }
    if (!step->error.empty()) return kernex::fail(ErrorCode::Provider, step->error);
    kernex::Response r = step->response;
    if (r.model.empty()) r.model = context.model.value_or("replay");
    r.provider = "replay";
    if (sink) stream(r, sink);
    return r;
  }

 private:
  static std::unexpected<kernex::Error> cancelled() {
    return kernex::fail(ErrorCode::Cancelled, "replay: the request was cancelled");
  }

  // Records the request and marks the line that answers it as used; returns a copy of it.
  Result<Step> take(const kernex::Context& context, const std::vector<kernex::ToolSpec>& tools) {
    std::lock_guard lock(s_->mutex);
    if (!s_->record.empty()) {
      std::ofstream out(s_->record, std::ios::app);
      out << describe_request(context, tools).dump() << '\n';
      if (!out)
        return kernex::fail(ErrorCode::Io, "replay: cannot append to record file " + s_->record);
    }
    ++s_->requests;
    Step* taken = s_->take(context.current_message);
    if (taken == nullptr) {
      return kernex::fail(ErrorCode::Provider, "replay script " + s_->path +
                                                   " has no response left for request " +
                                                   std::to_string(s_->requests) + " (it holds " +
                                                   std::to_string(s_->steps.size()) + ")");
    }
    taken->used = true;
    return *taken;
  }

  static void stream(const kernex::Response& r, const kernex::StreamSink& sink) {
    using Kind = kernex::StreamEvent::Kind;
    if (!r.thinking.empty()) sink({Kind::ThinkingDelta, r.thinking, {}, {}, {}, {}});
    if (!r.text.empty()) sink({Kind::TextDelta, r.text, {}, {}, {}, {}});
    for (const auto& call : r.tool_calls) {
      sink({Kind::ToolCallStart, {}, call.id, call.name, {}, {}});
      sink({Kind::ToolCallDelta, call.arguments.dump(), call.id, call.name, {}, {}});
      sink({Kind::ToolCallEnd, {}, call.id, call.name, {}, {}});
    }
    sink({Kind::Usage, {}, {}, {}, r.usage, r.stop_reason});
    sink({Kind::Done, {}, {}, {}, {}, {}});
  }

  std::shared_ptr<Script> s_;
};

// The replay provider's options, read through the one typed config reader.
constexpr std::array kReplayFields{
    kernex::config::Field{"script", kernex::config::FieldType::Path,
                          "the JSON Lines file of responses to play (required)"},
    kernex::config::Field{"record", kernex::config::FieldType::Path,
                          "where each request is appended as JSON Lines", "unset"},
};

kernex::config::Where option_where(std::string_view key) {
  return {"", 0, "replay: option `" + std::string(key) + "`"};
}

// The options' paths by key (script, record).
Result<std::map<std::string, std::string>> read_options(const Json& config) {
  namespace config_fields = kernex::config;
  const config_fields::Section section{"", kReplayFields};
  if (!config.is_object()) {
    return config_fields::field_error(
        {"", 0, "replay: options"},
        "expected a mapping (a JSON object), got " + config_fields::FieldValue::of(config).got);
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : config.items()) {
    KERNEX_RETURN_IF_ERROR(config_fields::known_key(section, key, option_where(key)));
    KERNEX_ASSIGN_OR_RETURN(
        auto text,
        config_fields::read_string(config_fields::FieldValue::of(value), option_where(key)));
    if (text && text->empty() && key == "script")  // an empty record is no record
      return config_fields::field_error(option_where(key), "expected a path, got \"\"");
    if (text) out[key] = *text;
  }
  if (!out.contains("script"))
    return config_fields::field_error(option_where("script"), "required (a JSON Lines file)");
  return out;
}

Result<std::shared_ptr<kernex::Provider>> make_replay(const Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto options, read_options(config));
  const std::string script = options.at("script");
  auto text = kernex::read_regular_file(script, "replay script", kernex::kMaxScriptFileBytes);
  if (!text) return kernex::fail(ErrorCode::Config, "replay: " + text.error().message);
  std::vector<Step> steps;
  std::istringstream in(std::move(*text));
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = script + ":" + std::to_string(number);
    Json j = kernex::parse_untrusted(line);
    if (j.is_discarded()) return kernex::fail(ErrorCode::Config, where + ": not valid JSON");
    Step step;
    if (j.is_object() && j.contains("match")) {
      if (!j.at("match").is_string())
        return kernex::fail(ErrorCode::Config, where + ": match: expected a string");
      step.match = j.at("match").get<std::string>();
    }
    if (j.is_object() && j.contains("delay_ms")) {
      const Json& d = j.at("delay_ms");
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > 86'400'000) {
        return kernex::fail(ErrorCode::Config,
                            where + ": delay_ms: expected milliseconds from 0 to 86400000");
      }
      step.delay = std::chrono::milliseconds(d.get<std::uint64_t>());
    }
    if (j.is_object() && j.contains("error")) {
      step.error =
          j.at("error").is_string() ? j.at("error").get<std::string>() : j.at("error").dump();
    } else {
      auto parsed = parse_line(j, where);
      if (!parsed) return kernex::fail(ErrorCode::Config, "replay: bad script", parsed.error());
      step.response = std::move(*parsed);
    }
    steps.push_back(std::move(step));
  }
  auto state = std::make_shared<Script>();
  state->path = script;
  state->steps = std::move(steps);
  state->record = options.contains("record") ? options.at("record") : std::string();
  return std::make_shared<ReplayProvider>(std::move(state));
}

}  // namespace

KERNEX_PLUGIN(Provider, "replay", "1.0.0", "Plays a JSON Lines script of provider responses",
              make_replay)
