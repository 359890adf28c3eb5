// Model backends. A provider makes one model call; the kernel's loop runs tools and repeats.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/message.hpp"
#include "kernex/tool.hpp"

namespace kernex {

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  // Model used when the Context names none.
  virtual std::string default_model() const { return {}; }
  // One completion of `context.messages()` with `tools` offered (empty: no tools). When `sink`
  // is set the provider streams StreamEvents into it while it works and still returns the whole
  // Response. Errors are values; a thrown exception is caught by the kernel and reported as a
  // provider error naming this plugin.
  virtual Result<Response> complete(const Context& context, const std::vector<ToolSpec>& tools,
                                    const StreamSink& sink) = 0;
  // complete() without holding the caller's thread while the model answers; optional. False (the
  // default): not supported, and the kernel calls complete(). True: accepted, and `done` gets
  // what complete() would have returned, exactly once, from any thread (before start returns
  // too); `sink` may be called from that thread until then, never after. `context`, `tools` and
  // `sink` stay alive until done is called; honour `context.stop` by calling done early (with
  // ErrorCode::Cancelled). The kernel calls start only where the run can wait without a thread
  // (kernex/suspend.hpp), complete() elsewhere; a throw means not accepted (done is not called)
  // and is reported like complete()'s.
  using Done = std::function<void(Result<Response>)>;
  virtual bool start(const Context& /*context*/, const std::vector<ToolSpec>& /*tools*/,
                     const StreamSink& /*sink*/, Done /*done*/) {
    return false;
  }
  // Another instance for use on another thread at the same time (batched sub-queries), sharing
  // whatever must be shared, such as a replay script's position. Null (the default): the kernel
  // makes a fresh instance from the plugin's factory with the same options.
  virtual std::shared_ptr<Provider> concurrent_instance() { return nullptr; }
};

// Turns text into a shorter text; used by CompactionStrategy::Summarize.
class Summarizer {
 public:
  virtual ~Summarizer() = default;
  virtual Result<std::string> summarize(const std::string& text) = 0;
};

struct GuardrailAction {
  enum class Kind { Allow, Block, Sanitize };
  Kind kind = Kind::Allow;
  std::string text;  // Block: reason; Sanitize: replacement text

  static GuardrailAction allow() { return {}; }
  static GuardrailAction block(std::string reason) { return {Kind::Block, std::move(reason)}; }
  static GuardrailAction sanitize(std::string text) { return {Kind::Sanitize, std::move(text)}; }
};

class Guardrail {
 public:
  virtual ~Guardrail() = default;
  virtual GuardrailAction check_input(const std::string& text) = 0;
  virtual GuardrailAction check_output(const std::string& text) = 0;
};

}  // namespace kernex
