// Incremental Server-Sent Events and NDJSON parsing: bytes go in as they arrive from the
// network, complete events come out. No I/O, so it is unit-tested on its own.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"

namespace kernex::http {

struct SseEvent {
  std::string event;  // "" when the event had no `event:` field ("message" by the spec)
  std::string data;   // `data:` lines joined by '\n'
  std::string id;
};

// WHATWG event-stream rules: lines end in \n, \r\n or \r; `field: value` (one leading space
// stripped); lines starting with ':' are comments; a blank line dispatches the event (only
// when it has data). Lines and pending events are capped so a hostile server can't exhaust
// memory.
class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;
  explicit SseParser(std::size_t max_line = 1u << 20, std::size_t max_event = 2u << 20)
      : max_line_(max_line), max_event_(max_event) {}

  // Parses `chunk`, calling `on_event` for every event it completes.
  Result<void> feed(std::string_view chunk, const Handler& on_event);
  // Whether bytes of an unfinished line or event are pending: true at end of stream means
  // the stream was cut mid-event.
  bool has_partial() const;
  // End of stream: a last event without its blank line is not dispatched (as browsers do).
  void reset();

 private:
  Result<void> line(std::string_view text, const Handler& on_event);

  std::size_t max_line_;
  std::size_t max_event_;
  std::string buffer_;
  bool skip_lf_ = false;  // the previous chunk ended in '\r'
  bool bom_checked_ = false;
  SseEvent pending_;
  bool has_data_ = false;
};

// Newline-delimited JSON (Ollama): complete lines out, blank lines skipped, '\r' stripped.
class LineSplitter {
 public:
  using Handler = std::function<void(std::string_view line)>;
  explicit LineSplitter(std::size_t max_line = 1u << 20) : max_line_(max_line) {}
  Result<void> feed(std::string_view chunk, const Handler& on_line);
  bool has_partial() const { return buffer_.find_first_not_of(" \t\r\n") != std::string::npos; }
  // The last line when the stream ended without a newline.
  std::string take_rest();

 private:
  std::size_t max_line_;
  std::string buffer_;
};

}  // namespace kernex::http
