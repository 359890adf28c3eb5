// Splits a byte stream into '\n'-terminated lines as it arrives, in chunks of any size: the framing
// of a child's stdout (SandboxedProcess::read_line, and so MCP's stdio transport).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"

namespace kernex::sandbox {

class LineBuffer {
 public:
  void append(std::string_view chunk);
  // The next whole line without its '\n' (a '\r' before it is kept), or nullopt until one has
  // arrived. ErrorCode::Limit when the line, whole or so far, is longer than `max_line` bytes.
  // Linear in the bytes appended however many lines a chunk holds: taken lines are dropped lazily.
  Result<std::optional<std::string>> next_line(std::size_t max_line);
  // Bytes buffered after the lines taken.
  std::size_t pending() const { return buf_.size() - start_; }

 private:
  std::string buf_;
  std::size_t start_ = 0;    // where the next line begins
  std::size_t scanned_ = 0;  // bytes from start_ known to hold no '\n'
};

}  // namespace kernex::sandbox
