// Prints a run's stream events as they arrive: answer text for a terminal, or one JSON object
// per event (`--json --stream`): {"event":"text_delta","text":...}, "thinking_delta",
// "tool_call_start" {id,name}, "tool_call_delta" {id,text}, "tool_call_end" {id},
// "usage" {usage,stop_reason}, "done", "error" {message}, and the loop's "tool_run"
// {id,name,arguments} and "tool_result" {id,name,content,is_error}. Text mode prints the answer
// only: tool runs are not part of it.
#pragma once

#include "kernex/message.hpp"

namespace kernex::cli {

class StreamPrinter {
 public:
  enum class Mode { Text, JsonEvents };
  explicit StreamPrinter(Mode mode) : mode_(mode) {}
  StreamSink sink();
  bool printed_text() const { return printed_text_; }
  // Ends the streamed answer with a newline when it lacks one.
  void finish_line();
  static bool stdout_is_terminal();

 private:
  void on_event(const StreamEvent& event);
  Mode mode_;
  bool printed_text_ = false;
  char last_ = '\n';
};

}  // namespace kernex::cli
