// Reading Bot API objects, which are untrusted: a missing or mistyped field is "absent", never
// an exception.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kernex/json.hpp"

namespace kernex::telegram {

inline const Json* object_at(const Json* j, const char* key) {
  if (j == nullptr || !j->is_object()) return nullptr;
  auto it = j->find(key);
  return it != j->end() && it->is_object() ? &*it : nullptr;
}

inline std::optional<std::int64_t> int_at(const Json* j, const char* key) {
  if (j == nullptr || !j->is_object()) return std::nullopt;
  auto it = j->find(key);
  if (it == j->end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

inline std::optional<std::string> string_at(const Json* j, const char* key) {
  if (j == nullptr || !j->is_object()) return std::nullopt;
  auto it = j->find(key);
  if (it == j->end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace kernex::telegram
