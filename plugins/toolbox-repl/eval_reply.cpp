#include "eval_reply.hpp"

#include <array>
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

// Accepts exactly {"ok":true,"value":{<known fields>}}; returning false stops the parse.
class ReplyShape {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  bool is_error() const { return is_error_; }
  std::size_t fields() const { return fields_; }

  bool null() { return scalar(Kind::NumberOrNull, false); }
  bool boolean(bool b) {
    // The one boolean at the top: ok, which must be true.
    if (depth_ == 1 && top_keys_ == 1) return b;
    return scalar_any();
  }
  bool number_integer(number_integer_t) { return scalar(Kind::Number, true); }
  bool number_unsigned(number_unsigned_t) { return scalar(Kind::Number, true); }
  bool number_float(number_float_t, const string_t&) { return scalar(Kind::Number, true); }
  bool string(string_t&) { return depth_ == 2 ? expect(Kind::String) : depth_ > 2; }
  bool binary(binary_t&) { return false; }
  bool start_object(std::size_t) {
    ++depth_;
    if (depth_ == 1) return true;
    if (depth_ == 2) return top_keys_ == 2;  // the value
    return depth_ > 3;                       // no field is an object; pending_queries holds objects
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    ++depth_;
    if (depth_ == 3) return expect(Kind::Array);
    return depth_ > 3;
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
    if (depth_ != 2) return true;
    for (std::size_t i = 0; i < kFields.size(); ++i) {
      if (kFields[i].name != k) continue;
      if (seen_ & (1u << i)) return false;  // a key twice
      seen_ |= 1u << i;
      current_ = &kFields[i];
      is_error_ = is_error_ || current_->is_error;
      ++fields_;
      return true;
    }
    return false;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  bool expect(Kind kind) const { return current_ != nullptr && current_->kind == kind; }
  bool scalar(Kind kind, bool number) {
    if (depth_ != 2) return depth_ > 2;
    if (expect(kind)) return true;
    return number && expect(Kind::NumberOrNull);
  }
  bool scalar_any() const { return depth_ > 2; }

  int depth_ = 0;
  int top_keys_ = 0;
  unsigned seen_ = 0;
  std::size_t fields_ = 0;
  const Field* current_ = nullptr;
  bool is_error_ = false;
};

}  // namespace

std::string eval_request_line(std::string_view code) {
  std::string line = R"({"op":"eval","code":)";
  line += Json(code).dump(-1, ' ', false, Json::error_handler_t::replace);
  line += "}\n";
  return line;
}

std::optional<EvalContent> eval_content(std::string_view reply, double wall_ms) {
  if (!reply.starts_with(kPrefix) || !reply.ends_with("}}")) return std::nullopt;
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
  char number[32];
  auto [end, ec] = std::to_chars(number, number + sizeof number, wall_ms);
  out.content.append(number, ec == std::errc() ? end : number);
  if (ec != std::errc()) out.content += '0';
  out.content += '}';
  return out;
}

}  // namespace kernex::repl
