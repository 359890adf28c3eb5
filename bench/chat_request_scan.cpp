#include "chat_request_scan.hpp"

#include <vector>

#include "kernex/json.hpp"

namespace kernex::bench {
namespace {

// Containers open above the current value. Depth 1 is the request, 2 `messages`, 3 a message,
// 4 its `content` array, 5 a content part; only those paths are looked at.
class Scan final : public Json::json_sax_t {
 public:
  ChatRequestScan out;
  bool object_at_top = false;

  bool null() override { return true; }
  bool boolean(bool value) override {
    if (frames_.size() == 1 && key_ == "stream") out.stream = value;
    return true;
  }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& value) override {
    if (message_field()) {
      if (key_ == "role") role_ = value;
      if (key_ == "content") content_ = value;
    } else if (part_field()) {
      if (key_ == "type") part_type_ = value;
      if (key_ == "text") part_text_ = value;
    }
    return true;
  }
  bool start_object(std::size_t) override {
    if (frames_.empty()) object_at_top = true;
    open(true);
    if (message_field()) role_.clear(), content_.clear();
    if (part_field()) part_type_.clear(), part_text_.clear();
    return true;
  }
  bool key(string_t& value) override {
    if (frames_.size() == 1 || in_messages()) key_ = value;
    return true;
  }
  bool end_object() override {
    if (part_field() && part_type_ == "text") content_ += part_text_;
    if (message_field() && role_ == "user") out.last_user_message = content_;
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    open(false);
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct Frame {
    bool object;
    bool messages;  // the request's `messages` array, or inside it
    bool content;   // a message's `content` array, or inside it
  };

  void open(bool object) {
    Frame f{object, false, false};
    if (frames_.size() == 1) f.messages = !object && key_ == "messages";
    if (frames_.size() >= 2) f.messages = frames_.back().messages;
    if (frames_.size() == 3 && f.messages) f.content = !object && key_ == "content";
    if (frames_.size() >= 4) f.content = frames_.back().content;
    frames_.push_back(f);
  }
  bool in_messages() const { return frames_.size() >= 2 && frames_[1].messages; }
  // A message object's own members (not its content parts').
  bool message_field() const { return frames_.size() == 3 && in_messages() && frames_[2].object; }
  bool part_field() const { return frames_.size() == 5 && frames_[3].content && frames_[4].object; }

  std::vector<Frame> frames_;
  std::string key_;  // the last key read at depth 1 or within `messages`
  std::string role_, content_, part_type_, part_text_;
};

}  // namespace

std::optional<ChatRequestScan> scan_chat_request(std::string_view body) {
  Scan scan;
  if (!Json::sax_parse(body.begin(), body.end(), &scan) || !scan.object_at_top) return std::nullopt;
  return std::move(scan.out);
}

}  // namespace kernex::bench
