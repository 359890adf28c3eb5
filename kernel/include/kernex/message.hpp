// Inbound requests, provider responses, token usage and stream events.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernex/json.hpp"
#include "kernex/tool.hpp"

namespace kernex {

struct Attachment {
  std::string file_type = "Other";  // Image | Document | Audio | Video | Other
  std::optional<std::string> url;
  std::optional<std::vector<std::uint8_t>> data;
  std::optional<std::string> filename;
};

// A message from a user to the kernel (kernex `Request`).
struct Request {
  std::string id;  // UUIDv4, lowercase hyphenated
  std::string sender_id;
  std::optional<std::string> sender_name;
  std::string text;
  std::string timestamp;  // RFC 3339 UTC
  std::optional<std::string> reply_to;
  std::vector<Attachment> attachments;
  std::optional<std::string> source;

  // A fresh request: random id, now, nothing else set.
  static Request from_text(std::string sender_id, std::string text);
};

struct Usage {
  std::uint64_t input_tokens = 0;  // fresh (non-cached) input
  std::uint64_t output_tokens = 0;
  std::uint64_t cache_read_tokens = 0;   // prompt-cache hits
  std::uint64_t cache_write_tokens = 0;  // prompt-cache writes
  double cost_usd = 0.0;

  // Everything the provider reported, cache reads included.
  std::uint64_t total_tokens() const {
    return input_tokens + output_tokens + cache_read_tokens + cache_write_tokens;
  }
  // What counts against a token budget, the same for every provider: cache reads excluded
  // (kernex applied that rule to Anthropic only).
  std::uint64_t billed_tokens() const { return input_tokens + output_tokens + cache_write_tokens; }

  Usage& operator+=(const Usage& o) {
    input_tokens += o.input_tokens;
    output_tokens += o.output_tokens;
    cache_read_tokens += o.cache_read_tokens;
    cache_write_tokens += o.cache_write_tokens;
    cost_usd += o.cost_usd;
    return *this;
  }
  bool operator==(const Usage&) const = default;
};

// One model call's answer: text and/or tool calls. The loop, not the provider, runs tools.
struct Response {
  std::string text;
  std::vector<ToolCall> tool_calls;
  std::string thinking;  // reasoning text, never folded into `text`
  Usage usage;
  std::string stop_reason;  // provider's (end_turn, tool_use, max_tokens, ...)
  std::string model;
  std::string provider;
  Json provider_state;  // opaque, replayed on the assistant entry (ContextEntry::provider_state)
};

struct StreamEvent {
  enum class Kind {
    TextDelta,      // text: answer fragment
    ThinkingDelta,  // text: reasoning fragment
    ToolCallStart,  // tool_call_id, tool_name
    ToolCallDelta,  // tool_call_id, text: arguments JSON fragment
    ToolCallEnd,    // tool_call_id
    Usage,          // usage, stop_reason
    Done,
    Error,  // text: message (terminal)
    // Emitted by the kernel's loop, not by providers:
    ToolRun,     // a tool call about to run: tool_call_id, tool_name, text: arguments JSON
    ToolResult,  // its result: tool_call_id, tool_name, text: result content, is_error
  };
  Kind kind = Kind::TextDelta;
  std::string text;
  std::string tool_call_id;
  std::string tool_name;
  kernex::Usage usage;
  std::string stop_reason;
  bool is_error = false;  // ToolResult only
};

// Receives stream events as they arrive; an empty function means "don't stream".
using StreamSink = std::function<void(const StreamEvent&)>;

// Folds a stream back into text and usage (kernex StreamAccumulator).
class StreamAccumulator {
 public:
  void push(const StreamEvent& event);
  const std::string& text() const { return text_; }
  const std::optional<Usage>& usage() const { return usage_; }
  const std::string& stop_reason() const { return stop_reason_; }
  std::optional<std::uint64_t> total_tokens() const {
    return usage_ ? std::optional<std::uint64_t>(usage_->total_tokens()) : std::nullopt;
  }

 private:
  std::string text_;
  std::optional<Usage> usage_;
  std::string stop_reason_;
};

void to_json(Json& j, const Usage& v);
void from_json(const Json& j, Usage& v);
void to_json(Json& j, const Request& v);
void from_json(const Json& j, Request& v);
void to_json(Json& j, const Response& v);
void from_json(const Json& j, Response& v);

}  // namespace kernex
