#include "kernex/config_fields.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include "kernex/number.hpp"

namespace kernex::config {

namespace {

// Levenshtein distance, capped: config keys are short and a suggestion is only ever 1-2 edits off.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The one key within two edits of `key` (the closest; none when the nearest ones tie).
std::optional<std::string_view> nearest_key(const Section& section, std::string_view key) {
  constexpr std::size_t kMaxKeyLength = 256;  // a hostile key costs nothing
  if (key.size() > kMaxKeyLength) return std::nullopt;
  std::optional<std::string_view> best;
  std::size_t best_distance = 3;
  bool tie = false;
  for (const Field& f : section.fields) {
    const std::size_t d = edit_distance(key, f.name);
    if (d < best_distance) {
      best = f.name, best_distance = d, tie = false;
    } else if (d == best_distance && best) {
      tie = true;
    }
  }
  if (tie) return std::nullopt;
  return best;
}

std::string expected_got(std::string_view what, const FieldValue& v) {
  std::string msg = "expected ";
  msg.append(what).append(", got ").append(v.got);
  return msg;
}

// "a or b", "a, b or c".
std::string choice_list(std::span<const std::string_view> choices) {
  std::string out;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out.append(i + 1 == choices.size() ? " or " : ", ");
    out.append(choices[i]);
  }
  return out;
}

std::string_view type_name(const Field& f) {
  switch (f.type) {
    case FieldType::String:
      return "string";
    case FieldType::Bool:
      return "bool";
    case FieldType::Integer:
      return "integer";
    case FieldType::Number:
      return "number";
    case FieldType::Enum:
      return "enum";
    case FieldType::Path:
      return "path";
    case FieldType::List:
      return "list";
    case FieldType::Table:
      return "table";
    case FieldType::Options:
      return "options";
  }
  return "?";
}

}  // namespace

const Field* Section::find(std::string_view key) const {
  for (const Field& f : fields)
    if (f.name == key) return &f;
  return nullptr;
}

std::string Section::key_list() const {
  std::string out;
  for (const Field& f : fields) out.append(out.empty() ? "" : ", ").append(f.name);
  return out;
}

Where Where::child(std::string_view key, int at_line) const {
  Where w{file, at_line > 0 ? at_line : line, path};
  if (!w.path.empty()) w.path.append(".");
  w.path.append(key);
  return w;
}

Where Where::item(std::size_t index, int at_line) const {
  Where w{file, at_line > 0 ? at_line : line, path};
  w.path.append("[").append(std::to_string(index)).append("]");
  return w;
}

std::string Where::str() const {
  // Appends, not operator+: g++ 12 at -O2 reports a false -Wrestrict on ":" + to_string(...).
  std::string out = file;
  if (line > 0) out.append(":").append(std::to_string(line));
  if (!path.empty()) out.append(out.empty() ? "" : ": ").append(path);
  return out;
}

std::unexpected<Error> field_error(const Where& where, std::string_view what) {
  std::string msg = where.str();
  msg.append(msg.empty() ? "" : ": ").append(what);
  return fail(ErrorCode::Config, std::move(msg));
}

FieldValue FieldValue::of(const Json& json) {
  FieldValue v;
  if (json.is_array() || json.is_object()) {
    v.json = json.is_array() ? Json::array() : Json::object();
    v.got = json.is_array() ? "a list" : "a mapping";
    return v;
  }
  v.json = json;
  if (json.is_string()) v.text = json.get<std::string>();
  v.got = json.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr std::size_t kShown = 60;
  if (v.got.size() > kShown) v.got = v.got.substr(0, kShown) + "...";
  return v;
}

Result<const Field*> known_key(const Section& section, std::string_view key, const Where& where) {
  if (const Field* f = section.find(key)) return f;
  std::string msg = "unknown key (expected one of: " + section.key_list() + ")";
  if (auto near = nearest_key(section, key))
    msg.append("; did you mean `").append(*near).append("`?");
  return field_error(where, msg);
}

Result<std::optional<std::string>> read_string(const FieldValue& v, const Where& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.text) return field_error(where, expected_got("a string", v));
  return *v.text;
}

Result<std::optional<bool>> read_bool(const FieldValue& v, const Where& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.json.is_boolean()) return field_error(where, expected_got("true or false", v));
  return v.json.get<bool>();
}

Result<std::optional<std::uint64_t>> read_integer(const Field& f, const FieldValue& v,
                                                  const Where& where) {
  if (v.is_null()) return std::nullopt;
  const std::string what = "a non-negative integer";
  const bool whole = v.json.is_number_unsigned() ||
                     (v.json.is_number_integer() && v.json.get<std::int64_t>() >= 0);
  if (!whole) {
    // Digits too many for 64 bits read as a float: name the range, not the type.
    const bool digits = v.text && !v.text->empty() && v.json.is_number_float() &&
                        v.text->find_first_not_of("0123456789") == std::string::npos;
    return field_error(
        where, expected_got(digits ? what + " no larger than " + std::to_string(f.max) : what, v));
  }
  const std::uint64_t n = v.json.get<std::uint64_t>();
  if (n > f.max)
    return field_error(where, expected_got(what + " no larger than " + std::to_string(f.max), v));
  if (n < f.min)
    return field_error(where, f.min == 1 ? std::string("must be positive")
                                         : "must be at least " + std::to_string(f.min));
  return n;
}

Result<std::optional<double>> read_number(const Field& f, const FieldValue& v, const Where& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.json.is_number())
    return field_error(where, expected_got(number_range(f.number_min, f.number_max), v));
  if (auto problem = number_problem(v.json.get<double>(), f.number_min, f.number_max))
    return field_error(where, *problem);
  return v.json.get<double>();
}

Result<std::optional<std::size_t>> read_enum(const Field& f, const FieldValue& v,
                                             const Where& where) {
  if (v.is_null()) return std::nullopt;
  if (v.json.is_array() || v.json.is_object())
    return field_error(where, expected_got("a string", v));
  if (v.text) {
    for (std::size_t i = 0; i < f.choices.size(); ++i)
      if (*v.text == f.choices[i]) return i;
  }
  return field_error(where, expected_got(choice_list(f.choices), v));
}

std::string describe(const Section& section) {
  std::string out = "| key | type | default | |\n|---|---|---|---|\n";
  for (const Field& f : section.fields) {
    std::string type(type_name(f));
    if (f.type == FieldType::Integer)
      type += " [" + std::to_string(f.min) + ", " + std::to_string(f.max) + "]";
    if (f.type == FieldType::Number) type = number_range(f.number_min, f.number_max);
    if (f.type == FieldType::Enum) type = choice_list(f.choices);
    if (!f.unit.empty()) type.append(" (").append(f.unit).append(")");
    std::string key = section.name.empty() ? std::string(f.name)
                                           : std::string(section.name) + "." + std::string(f.name);
    out.append("| `").append(key).append("` | ").append(type).append(" | ");
    out.append(f.default_text).append(" | ").append(f.doc).append(" |\n");
  }
  return out;
}

}  // namespace kernex::config
