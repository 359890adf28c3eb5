// An out-of-tree provider plugin: answers with the last user message, streamed word by word
// when the kernel asks for a stream. It makes no network calls, so it is a template to copy:
// replace complete() with a call to your model.
#include <kernex/plugin.hpp>

#include <string>
#include <vector>

namespace {

class EchoProvider final : public kernex::Provider {
 public:
  explicit EchoProvider(std::string prefix) : prefix_(std::move(prefix)) {}

  std::string name() const override { return "echo"; }
  std::string default_model() const override { return "echo-1"; }

  kernex::Result<kernex::Response> complete(const kernex::Context& context,
                                            const std::vector<kernex::ToolSpec>& tools,
                                            const kernex::StreamSink& sink) override {
    (void)tools;  // a real model may answer with tool calls; the kernel then runs them
    std::string last_user;
    for (const kernex::ContextEntry& e : context.messages()) {
      if (e.role == "user") last_user = e.content;
    }
    kernex::Response r;
    r.text = prefix_ + last_user;
    r.model = context.model.value_or(default_model());
    r.provider = name();
    r.stop_reason = "end_turn";
    r.usage.input_tokens = last_user.size() / 4 + 1;  // a rough count: ~4 bytes per token
    r.usage.output_tokens = r.text.size() / 4 + 1;
    if (sink) stream(r, sink);
    return r;  // the whole answer too: the kernel keeps what it returns, not what streamed
  }

 private:
  // One text delta per word (spaces kept), then usage and the end of the stream.
  static void stream(const kernex::Response& r, const kernex::StreamSink& sink) {
    using Kind = kernex::StreamEvent::Kind;
    std::size_t start = 0;
    while (start < r.text.size()) {
      std::size_t end = r.text.find(' ', start);
      end = end == std::string::npos ? r.text.size() : end + 1;
      sink({Kind::TextDelta, r.text.substr(start, end - start), {}, {}, {}, {}});
      start = end;
    }
    sink({Kind::Usage, {}, {}, {}, r.usage, r.stop_reason});
    sink({Kind::Done, {}, {}, {}, {}, {}});
  }

  std::string prefix_;
};

// Options come from `--provider-opt KEY=VALUE` or `providers: {echo: {...}}` in kernex.yaml.
// Unknown options are errors, as for the built-in providers.
kernex::Result<std::shared_ptr<kernex::Provider>> make_echo(const kernex::Json& options) {
  std::string prefix;
  for (const auto& [key, value] : options.items()) {
    if (key == "prefix" && value.is_string()) {
      prefix = value.get<std::string>();
    } else if (key != "model") {
      return kernex::fail(kernex::ErrorCode::Config,
                          "echo: unknown or mistyped option '" + key + "'");
    }
  }
  return std::make_shared<EchoProvider>(std::move(prefix));
}

}  // namespace

KERNEX_PLUGIN(Provider, "echo", "1.0.0", "Answers with the last user message (example plugin)",
              make_echo)
