#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace kernex {
// nlohmann::json keeps object keys sorted (std::map), which matches kernex's serde_json
// BTreeMap ordering that permission matching depends on.
using Json = nlohmann::json;

// Untrusted JSON (HTTP bodies, MCP and REPL messages, tool output) nested deeper than this is
// refused. nlohmann parses and destroys without recursion, but dump(), copies and comparisons
// recurse: a few hundred kilobytes of '[' would overflow the stack later, far from the parse.
inline constexpr std::size_t kMaxJsonDepth = 128;

// True when `text` opens more than `max_depth` arrays or objects at once (outside strings).
// Exact for valid JSON; for anything else the parse fails anyway.
inline bool json_nests_deeper_than(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// Json::parse for untrusted text: a discarded value (is_discarded()) when `text` is not JSON or
// nests deeper than `max_depth`.
inline Json parse_untrusted(std::string_view text, std::size_t max_depth = kMaxJsonDepth) {
  if (json_nests_deeper_than(text, max_depth)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, false);
}

// nlohmann turns a float into an integer with a plain cast, which is undefined behaviour when
// the value is out of range (3.7e20 read as uint64). Untrusted numbers meant as integers go
// through these: the value when `v` is an integer JSON number in range, else nullopt (floats,
// even whole ones, are not integers here).
inline std::optional<std::uint64_t> json_uint(const Json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}
inline std::optional<std::int64_t> json_int(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return std::nullopt;
}

// `obj[key]` as a non-negative integer, `fallback` when absent or null. Anything else throws a
// Json::type_error (302) naming the key, like nlohmann's value() does for a wrong type.
inline std::uint64_t uint_value(const Json& obj, const std::string& key,
                                std::uint64_t fallback = 0) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (auto n = json_uint(*it)) return *n;
  throw Json::type_error::create(
      302, "field '" + key + "': expected a non-negative integer, got " + it->dump(), nullptr);
}

// Field readers for from_json implementations that follow serde's rules: a missing required
// field, a wrong type or an out-of-range number throws a nlohmann::json::exception whose
// message names the full field path, e.g. "field 'toolboxes[0].name': type must be string,
// but is number". Defaulted fields keep their value when absent; std::optional fields also
// accept null.
namespace json_fields {

// Rethrows `e` with `segment` ("name" or "[3]") prepended to the field path in its message.
[[noreturn]] inline void rethrow_at(std::string_view segment, const Json::exception& e) {
  const std::string what = e.what();
  const auto end = what.find("] ");
  const std::string detail = end == std::string::npos ? what : what.substr(end + 2);
  constexpr std::string_view kField = "field '";
  std::string msg = "field '";
  msg += segment;
  if (detail.starts_with(kField)) {
    const std::string rest = detail.substr(kField.size());
    if (!rest.starts_with('[')) msg += '.';
    msg += rest;
  } else {
    msg += "': ";
    msg += detail;
  }
  if (e.id >= 400 && e.id < 500) throw Json::out_of_range::create(e.id, msg, nullptr);
  throw Json::type_error::create(e.id >= 300 && e.id < 400 ? e.id : 302, msg, nullptr);
}

inline void expect_object(const Json& j) {
  if (!j.is_object()) {
    throw Json::type_error::create(
        302, std::string("expected a JSON object, but is ") + j.type_name(), nullptr);
  }
}

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
void read(const Json& v, T& out) {
  if constexpr (is_optional<T>::value) {
    if (v.is_null()) {
      out.reset();
    } else {
      typename T::value_type inner{};
      read(v, inner);
      out = std::move(inner);
    }
  } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string> ||
                       std::is_same_v<T, Json>) {
    v.get_to(out);  // strict: nlohmann refuses other types for string and bool
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    // serde refuses negatives, fractions and overflow where nlohmann would convert silently.
    const bool is_int =
        v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
    if (!is_int) {
      throw Json::type_error::create(302,
                                     "type must be a non-negative integer, but is " +
                                         (v.is_number() ? v.dump() : std::string(v.type_name())),
                                     nullptr);
    }
    const auto n = v.get<std::uint64_t>();
    if (n > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
      throw Json::out_of_range::create(406, "number " + v.dump() + " is out of range", nullptr);
    }
    out = static_cast<T>(n);
  } else if constexpr (std::is_integral_v<T>) {
    const auto n = json_int(v);
    if (!n) {
      throw Json::type_error::create(302,
                                     "type must be an integer, but is " +
                                         (v.is_number() ? v.dump() : std::string(v.type_name())),
                                     nullptr);
    }
    if (*n < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        *n > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      throw Json::out_of_range::create(406, "number " + v.dump() + " is out of range", nullptr);
    }
    out = static_cast<T>(*n);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) {
      throw Json::type_error::create(
          302, std::string("type must be number, but is ") + v.type_name(), nullptr);
    }
    out = v.get<T>();
  } else if constexpr (is_vector<T>::value) {
    if (!v.is_array()) {
      throw Json::type_error::create(
          302, std::string("type must be array, but is ") + v.type_name(), nullptr);
    }
    T result;
    result.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      try {
        typename T::value_type item{};
        read(v[i], item);
        result.push_back(std::move(item));
      } catch (const Json::exception& e) {
        rethrow_at("[" + std::to_string(i) + "]", e);
      }
    }
    out = std::move(result);
  } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
    expect_object(v);
    T result;
    for (const auto& [key, value] : v.items()) {
      try {
        read(value, result[key]);
      } catch (const Json::exception& e) {
        rethrow_at(key, e);
      }
    }
    out = std::move(result);
  } else {
    v.get_to(out);  // a struct with its own from_json
  }
}

// A field serde requires.
template <class T>
void required(const Json& j, const std::string& key, T& out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    throw Json::out_of_range::create(403, "field '" + key + "': required field is missing",
                                     nullptr);
  }
  try {
    read(*it, out);
  } catch (const Json::exception& e) {
    rethrow_at(key, e);
  }
}

// A field with a default (`out` keeps its value when the key is absent).
template <class T>
void defaulted(const Json& j, const std::string& key, T& out) {
  const auto it = j.find(key);
  if (it == j.end()) return;
  try {
    read(*it, out);
  } catch (const Json::exception& e) {
    rethrow_at(key, e);
  }
}

}  // namespace json_fields
}  // namespace kernex
