// A provider that streams its answer in pieces and honours Context::stop as a real one aborts
// its HTTP request: after each piece it looks, and a stop request makes the call fail. Config:
// `chunks`, the pieces (default "Hello ", "world"). An instance is not meant for two calls at
// once: one that finds another call inside it says so in its answer (" [shared instance]").
#include <atomic>

#include "kernex/plugin.hpp"

namespace {

class ChunksProvider final : public kernex::Provider {
 public:
  explicit ChunksProvider(std::vector<std::string> chunks) : chunks_(std::move(chunks)) {}
  std::string name() const override { return "chunks"; }
  std::string default_model() const override { return "chunks-1"; }
  kernex::Result<kernex::Response> complete(const kernex::Context& context,
                                            const std::vector<kernex::ToolSpec>&,
                                            const kernex::StreamSink& sink) override {
    const int others = inside_++;
    bool shared = others > 0;
    kernex::Response r;
    r.model = "chunks-1";
    r.provider = "chunks";
    r.stop_reason = "end_turn";
    r.usage.input_tokens = 3;
    r.usage.output_tokens = chunks_.size();
    for (const auto& chunk : chunks_) {
      if (sink)
        sink(kernex::StreamEvent{
            kernex::StreamEvent::Kind::TextDelta, chunk, {}, {}, {}, {}, false});
      r.text += chunk;
      shared = shared || inside_ > 1;
      if (context.stop.stop_requested()) {
        --inside_;
        return kernex::fail(kernex::ErrorCode::Provider, "chunks: request aborted");
      }
    }
    --inside_;
    if (shared) r.text += " [shared instance]";
    if (sink) sink(kernex::StreamEvent{kernex::StreamEvent::Kind::Done, {}, {}, {}, {}, {}, false});
    return r;
  }

 private:
  std::vector<std::string> chunks_;
  std::atomic<int> inside_{0};
};

kernex::Result<std::shared_ptr<kernex::Provider>> make_chunks(const kernex::Json& config) {
  std::vector<std::string> chunks{"Hello ", "world"};
  if (config.is_object() && config.contains("chunks")) {
    const kernex::Json& c = config.at("chunks");
    if (!c.is_array())
      return kernex::fail(kernex::ErrorCode::Config, "chunks: option `chunks` must be a list");
    chunks.clear();
    for (const auto& piece : c) {
      if (!piece.is_string())
        return kernex::fail(kernex::ErrorCode::Config, "chunks: every chunk must be a string");
      chunks.push_back(piece.get<std::string>());
    }
  }
  return std::make_shared<ChunksProvider>(std::move(chunks));
}

}  // namespace

KERNEX_PLUGIN(Provider, "chunks", "1.0.0", "Streams its answer in pieces and stops when asked",
              make_chunks)
