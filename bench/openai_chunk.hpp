// An OpenAI chat.completion.chunk's content text (empty when it has none or is not a chunk): what
// the bench's client counts as a first token and the bare proxy relays.
#pragma once

#include <string>
#include <string_view>

#include "kernex/json.hpp"

namespace kernex::bench {

inline std::string chunk_content(std::string_view data) {
  const Json j = Json::parse(data, nullptr, false);
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return {};
  const Json delta = j["choices"][0].value("delta", Json::object());
  if (!delta.is_object() || !delta.contains("content") || !delta["content"].is_string()) return {};
  return delta["content"].get<std::string>();
}

}  // namespace kernex::bench
