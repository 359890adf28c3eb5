#include "kernex/http/sse.hpp"

namespace kernex::http {

Result<void> SseParser::feed(std::string_view chunk, const Handler& on_event) {
  if (!bom_checked_ && !chunk.empty()) {
    buffer_.append(chunk);
    if (buffer_.size() < 3 && std::string_view("\xEF\xBB\xBF").starts_with(buffer_)) return {};
    if (buffer_.starts_with("\xEF\xBB\xBF")) buffer_.erase(0, 3);
    bom_checked_ = true;
    std::string rest;
    rest.swap(buffer_);
    return feed(rest, on_event);
  }
  std::size_t start = 0;
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    const char c = chunk[i];
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') {
        start = i + 1;
        continue;
      }
    }
    if (c != '\n' && c != '\r') continue;
    buffer_.append(chunk.substr(start, i - start));
    start = i + 1;
    skip_lf_ = c == '\r';
    std::string text;
    text.swap(buffer_);
    if (auto r = line(text, on_event); !r) return r;
  }
  buffer_.append(chunk.substr(start));
  if (buffer_.size() > max_line_) {
    return fail(ErrorCode::Provider,
                "event stream line longer than " + std::to_string(max_line_) + " bytes");
  }
  return {};
}

Result<void> SseParser::line(std::string_view text, const Handler& on_event) {
  if (text.size() > max_line_) {
    return fail(ErrorCode::Provider,
                "event stream line longer than " + std::to_string(max_line_) + " bytes");
  }
  if (text.empty()) {
    if (has_data_) {
      SseEvent event = std::move(pending_);
      pending_ = {};
      has_data_ = false;
      on_event(event);
    } else {
      pending_.event.clear();
    }
    return {};
  }
  if (text.front() == ':') return {};
  const auto colon = text.find(':');
  std::string_view field = text.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) pending_.data += '\n';
    pending_.data.append(value);
    has_data_ = true;
    if (pending_.data.size() > max_event_) {
      return fail(ErrorCode::Provider,
                  "event stream event larger than " + std::to_string(max_event_) + " bytes");
    }
  } else if (field == "event") {
    pending_.event = value;
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) pending_.id = value;
  }
  // `retry` and unknown fields are ignored, as the spec says.
  return {};
}

bool SseParser::has_partial() const { return !buffer_.empty() || has_data_; }

void SseParser::reset() {
  buffer_.clear();
  pending_ = {};
  has_data_ = false;
  skip_lf_ = false;
}

Result<void> LineSplitter::feed(std::string_view chunk, const Handler& on_line) {
  buffer_.append(chunk);
  std::size_t start = 0;
  for (auto nl = buffer_.find('\n', start); nl != std::string::npos;
       nl = buffer_.find('\n', start)) {
    std::string_view text(buffer_.data() + start, nl - start);
    start = nl + 1;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    on_line(text);
  }
  buffer_.erase(0, start);
  if (buffer_.size() > max_line_) {
    return fail(ErrorCode::Provider,
                "stream line longer than " + std::to_string(max_line_) + " bytes");
  }
  return {};
}

std::string LineSplitter::take_rest() {
  std::string rest;
  rest.swap(buffer_);
  while (!rest.empty() && (rest.back() == '\r' || rest.back() == ' ')) rest.pop_back();
  return rest;
}

}  // namespace kernex::http
