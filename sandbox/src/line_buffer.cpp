#include "kernex/sandbox/line_buffer.hpp"

namespace kernex::sandbox {

void LineBuffer::append(std::string_view chunk) {
  // Drop the taken lines once they are at least half the buffer, so each byte moves O(1) times.
  if (start_ > 0 && start_ * 2 >= buf_.size()) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  buf_.append(chunk);
}

Result<std::optional<std::string>> LineBuffer::next_line(std::size_t max_line) {
  const auto nl = buf_.find('\n', start_ + scanned_);
  const std::size_t length = (nl == std::string::npos ? buf_.size() : nl) - start_;
  if (length > max_line) {
    return fail(ErrorCode::Limit,
                "a line of output exceeded " + std::to_string(max_line) + " bytes");
  }
  if (nl == std::string::npos) {
    scanned_ = length;
    return std::optional<std::string>();
  }
  std::string line = buf_.substr(start_, length);
  start_ = nl + 1;
  scanned_ = 0;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  }
  return std::optional<std::string>(std::move(line));
}

}  // namespace kernex::sandbox
