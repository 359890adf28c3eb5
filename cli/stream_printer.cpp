#include "stream_printer.hpp"

#include "terminal_text.hpp"

#include <unistd.h>

#include <iostream>

namespace kernex::cli {
namespace {

// The kernel dumps the arguments as JSON; shown as JSON again, or as text should that fail.
Json arguments_of(const StreamEvent& e) {
  Json j = parse_untrusted(e.text);
  return j.is_discarded() ? Json(e.text) : j;
}

}  // namespace

StreamSink StreamPrinter::sink() {
  return [this](const StreamEvent& event) { on_event(event); };
}

bool StreamPrinter::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

void StreamPrinter::finish_line() {
  if (printed_text_ && last_ != '\n') std::cout << '\n';
  std::cout.flush();
}

void StreamPrinter::on_event(const StreamEvent& e) {
  using Kind = StreamEvent::Kind;
  if (mode_ == Mode::Text) {
    if (e.kind == Kind::TextDelta && !e.text.empty()) {
      // Model text for a person: controls made visible (a reply could clear the terminal).
      std::cout << for_terminal(e.text) << std::flush;
      printed_text_ = true;
      last_ = e.text.back();
    } else if (e.kind == Kind::ToolCallStart && printed_text_ && last_ != '\n') {
      // Text before a tool call ends a paragraph; the next turn's answer starts a new line.
      std::cout << '\n';
      last_ = '\n';
    }
    return;
  }
  Json j;
  switch (e.kind) {
    case Kind::TextDelta:
      j = {{"event", "text_delta"}, {"text", e.text}};
      break;
    case Kind::ThinkingDelta:
      j = {{"event", "thinking_delta"}, {"text", e.text}};
      break;
    case Kind::ToolCallStart:
      j = {{"event", "tool_call_start"}, {"id", e.tool_call_id}, {"name", e.tool_name}};
      break;
    case Kind::ToolCallDelta:
      j = {{"event", "tool_call_delta"}, {"id", e.tool_call_id}, {"text", e.text}};
      break;
    case Kind::ToolCallEnd:
      j = {{"event", "tool_call_end"}, {"id", e.tool_call_id}};
      break;
    case Kind::Usage:
      j = {{"event", "usage"}, {"usage", e.usage}, {"stop_reason", e.stop_reason}};
      break;
    case Kind::Done:
      j = {{"event", "done"}};
      break;
    case Kind::Error:
      j = {{"event", "error"}, {"message", e.text}};
      break;
    case Kind::ToolRun:
      j = {{"event", "tool_run"},
           {"id", e.tool_call_id},
           {"name", e.tool_name},
           {"arguments", arguments_of(e)}};
      break;
    case Kind::ToolResult:
      j = {{"event", "tool_result"},
           {"id", e.tool_call_id},
           {"name", e.tool_name},
           {"content", e.text},
           {"is_error", e.is_error}};
      break;
  }
  std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n' << std::flush;
}

}  // namespace kernex::cli
