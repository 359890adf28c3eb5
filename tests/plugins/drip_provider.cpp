// A provider that streams a long answer slowly, like a model: "echo(<history size>): <message>\n"
// then numbered filler lines up to `length` bytes, `chunk` bytes every `delay_ms` (stops when
// asked). With `tool` set, its first call in a turn asks for that tool with `tool_arguments`, and
// the answer after it starts "tool said: <result>". Channel tests and the Telegram bench use it.
#include <condition_variable>
#include <mutex>

#include "kernex/plugin.hpp"

namespace {

using kernex::StreamEvent;

struct DripOptions {
  std::size_t length = 200;
  std::size_t chunk = 5;
  std::chrono::milliseconds delay{20};
  std::string tool;
  kernex::Json tool_arguments = kernex::Json::object();
};

std::string answer_for(const kernex::Context& context, std::size_t length) {
  std::string text;
  if (!context.turn.empty() && context.turn.back().tool_result)
    text = "tool said: " + context.turn.back().tool_result->content + "\n";
  text += "echo(" + std::to_string(context.history.size()) + "): " + context.current_message + "\n";
  for (int line = 1; text.size() < length; ++line)
    text += "line " + std::to_string(line) + " of a long streamed answer\n";
  return text;
}

class DripProvider final : public kernex::Provider {
 public:
  explicit DripProvider(DripOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "drip"; }
  std::string default_model() const override { return "drip-1"; }
  kernex::Result<kernex::Response> complete(const kernex::Context& context,
                                            const std::vector<kernex::ToolSpec>&,
                                            const kernex::StreamSink& sink) override {
    kernex::Response r;
    r.model = "drip-1";
    r.provider = "drip";
    r.stop_reason = "end_turn";
    if (!options_.tool.empty() && context.turn.empty()) {
      r.stop_reason = "tool_use";
      r.tool_calls.push_back({"call_1", options_.tool, options_.tool_arguments});
      return r;
    }
    const std::string text = answer_for(context, options_.length);
    std::mutex mutex;
    std::condition_variable_any wake;
    for (std::size_t at = 0; at < text.size(); at += options_.chunk) {
      std::unique_lock lock(mutex);
      if (wake.wait_for(lock, context.stop, options_.delay, [] { return false; }) ||
          context.stop.stop_requested())
        return kernex::fail(kernex::ErrorCode::Cancelled, "drip: stopped");
      if (sink)
        sink(StreamEvent{
            StreamEvent::Kind::TextDelta, text.substr(at, options_.chunk), {}, {}, {}, {}, false});
    }
    r.text = text;
    return r;
  }

 private:
  DripOptions options_;
};

kernex::Result<std::shared_ptr<kernex::Provider>> make_drip(const kernex::Json& config) {
  DripOptions o;
  try {
    if (config.contains("length")) o.length = config.at("length").get<std::size_t>();
    if (config.contains("chunk"))
      o.chunk = std::max<std::size_t>(1, config.at("chunk").get<std::size_t>());
    if (config.contains("delay_ms"))
      o.delay = std::chrono::milliseconds(config.at("delay_ms").get<std::int64_t>());
    if (config.contains("tool")) o.tool = config.at("tool").get<std::string>();
    if (config.contains("tool_arguments")) o.tool_arguments = config.at("tool_arguments");
  } catch (const std::exception& e) {
    return kernex::fail(kernex::ErrorCode::Config, std::string("drip: ") + e.what());
  }
  return std::make_shared<DripProvider>(std::move(o));
}

}  // namespace

KERNEX_PLUGIN(Provider, "drip", "1.0.0", "Streams a long answer slowly (tests)", make_drip)
