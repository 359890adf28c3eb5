// JSON as serve stores it in its own rows (serve.db and PostgreSQL): compact text that survives
// invalid UTF-8, and the text read back, where a damaged row reads as null instead of taking the
// server down.
#pragma once

#include <string>

#include "kernex/json.hpp"

namespace kernex::server {

inline std::string stored_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

inline Json stored_json(const std::string& text) {
  if (text.empty()) return nullptr;
  Json j = parse_untrusted(text);
  return j.is_discarded() ? Json(nullptr) : j;
}

}  // namespace kernex::server
