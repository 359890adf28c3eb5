#include "eval_reply.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstdint>

#include "kernex/json.hpp"

namespace kernex::repl {
namespace {

enum class Kind : std::uint8_t { Number, NumberOrNull, String, Array };

struct Field {
  std::string_view name;
  Kind kind;
  bool is_error;
};
constexpr std::array<Field, 6> kFields{{{"cpu_ms", Kind::Number, false},
                                        {"peak_rss_kb", Kind::NumberOrNull, false},
                                        {"stdout", Kind::String, false},
                                        {"stderr", Kind::String, false},
                                        {"error", Kind::String, true},
                                        {"pending_queries", Kind::Array, false}}};

constexpr std::string_view kPrefix = R"({"ok":true,"value":)";

// pending_queries items: objects of scalars with these keys, each once.
constexpr std::array<std::string_view, 5> kQueryFields{"id", "kind", "prompt", "model",
                                                       "context_size"};

// Accepts exactly {"ok":true,"value":{<known fields>}}, at most four levels deep (the value, the
// pending_queries array, its objects); returning false stops the parse.
class ReplyShape {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  bool is_error() const { return is_error_; }
  int fields() const { return std::popcount(seen_); }

  bool null() { return scalar(Kind::NumberOrNull); }
  bool boolean(bool b) {
    if (depth_ == 1) return top_keys_ == 1 && b;  // ok, which must be true
    return depth_ == 4;
  }
  bool number_integer(number_integer_t) { return scalar(Kind::Number); }
  bool number_unsigned(number_unsigned_t) { return scalar(Kind::Number); }
  bool number_float(number_float_t, const string_t&) { return scalar(Kind::Number); }
  bool string(string_t&) { return scalar(Kind::String); }
  bool binary(binary_t&) { return false; }
  bool start_object(std::size_t) {
    ++depth_;
    if (depth_ == 1) return true;
    if (depth_ == 2) return top_keys_ == 2;  // the value
    item_seen_ = 0;
    return depth_ == 4;  // an item of pending_queries (depth 3 holds only that array)
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    ++depth_;
    return depth_ == 3 && current_ != nullptr && current_->kind == Kind::Array;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(string_t& k) {
    if (depth_ == 1) {
      ++top_keys_;
      return (top_keys_ == 1 && k == "ok") || (top_keys_ == 2 && k == "value");
    }
    if (depth_ == 4) return once(kQueryFields, k, item_seen_) < kQueryFields.size();
    const std::size_t i = once(kFields, k, seen_);
    if (i == kFields.size()) return false;
    current_ = &kFields[i];
    is_error_ = is_error_ || current_->is_error;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  static std::string_view name(const Field& f) { return f.name; }
  static std::string_view name(std::string_view s) { return s; }
  // The index of `k` among `names` if it is there and not yet in `seen` (which it joins), else
  // size.
  template <class Names>
  static std::size_t once(const Names& names, std::string_view k, unsigned& seen) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (name(names[i]) != k) continue;
      if (seen & (1u << i)) return names.size();
      seen |= 1u << i;
      return i;
    }
    return names.size();
  }
  bool scalar(Kind kind) const {
    if (depth_ == 4) return true;  // inside a pending query
    if (depth_ != 2 || current_ == nullptr) return false;
    return current_->kind == kind || (kind == Kind::Number && current_->kind == Kind::NumberOrNull);
  }

  int depth_ = 0;
  int top_keys_ = 0;
  unsigned seen_ = 0, item_seen_ = 0;
  const Field* current_ = nullptr;
  bool is_error_ = false;
};

}  // namespace

bool is_eval_field(std::string_view key) {
  return std::any_of(kFields.begin(), kFields.end(), [&](const Field& f) { return f.name == key; });
}

std::string eval_request_line(std::string_view code) {
  std::string line = R"({"op":"eval","code":)";
  line += Json(code).dump(-1, ' ', false, Json::error_handler_t::replace);
  line += "}\n";
  return line;
}

std::optional<EvalContent> eval_content(std::string_view reply, double wall_ms) {
  if (!reply.starts_with(kPrefix) || reply.size() < kPrefix.size() + 2 ||
      reply[kPrefix.size()] != '{' || !reply.ends_with("}}")) {
    return std::nullopt;
  }
  ReplyShape shape;
  if (!Json::sax_parse(reply.data(), reply.data() + reply.size(), &shape)) return std::nullopt;
  // Valid JSON whose second and last member is an object: that object runs from the prefix to the
  // brace before the final one.
  std::string_view value = reply.substr(kPrefix.size(), reply.size() - kPrefix.size() - 1);
  EvalContent out;
  out.is_error = shape.is_error();
  out.content.reserve(value.size() + 32);
  out.content.append(value.substr(0, value.size() - 1));
  out.content += shape.fields() == 0 ? R"("wall_ms":)" : R"(,"wall_ms":)";
  char number[32];  // a double's shortest form takes at most 24
  out.content.append(number, std::to_chars(number, number + sizeof number, wall_ms).ptr);
  out.content += '}';
  return out;
}

}  // namespace kernex::repl
