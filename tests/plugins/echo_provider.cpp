// A provider that answers with the message it was asked about. Its factory rejects a config
// carrying "fail", with a cause chain, to test how the host reports plugin config errors.
#include "kernex/plugin.hpp"

#ifndef ECHO_DESCRIPTION
#define ECHO_DESCRIPTION "Echoes the current message"
#endif

namespace {

class EchoProvider final : public kernex::Provider {
 public:
  explicit EchoProvider(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string name() const override { return "echo"; }
  std::string default_model() const override { return "echo-1"; }
  kernex::Result<kernex::Response> complete(const kernex::Context& context,
                                            const std::vector<kernex::ToolSpec>& tools,
                                            const kernex::StreamSink& sink) override {
    (void)tools;
    kernex::Response r;
    r.text = prefix_ + context.current_message;
    r.stop_reason = "end_turn";
    r.model = "echo-1";
    r.provider = "echo";
    if (sink)
      sink(kernex::StreamEvent{kernex::StreamEvent::Kind::TextDelta, r.text, {}, {}, {}, {}});
    return r;
  }

 private:
  std::string prefix_;
};

kernex::Result<std::shared_ptr<kernex::Provider>> make_echo(const kernex::Json& config) {
  if (config.contains("fail")) {
    return kernex::fail(kernex::ErrorCode::Config, "echo: config key 'fail' is set",
                        kernex::Error(kernex::ErrorCode::Config, "asked to fail by the test"));
  }
  return std::make_shared<EchoProvider>(config.value("prefix", std::string()));
}

}  // namespace

KERNEX_PLUGIN(Provider, "echo", "1.0.0", ECHO_DESCRIPTION, make_echo)
