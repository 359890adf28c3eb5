// How one run asks its model to generate: sampling, output format and tool choice, as an OpenAI-
// style client states them. Each provider maps the fields it supports (Provider::supported_
// generation names them); an unsupported field is not sent, and the host says so to its clients.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/json.hpp"

namespace kernex {

struct ResponseFormat {
  enum class Kind { Text, JsonObject, JsonSchema };
  Kind kind = Kind::Text;
  std::string name;  // JsonSchema: the schema's name
  Json schema;       // JsonSchema: the JSON Schema the answer must satisfy
  bool strict = false;
  bool operator==(const ResponseFormat&) const = default;
};

struct ToolChoice {
  enum class Mode { Auto, None, Required, Named };
  Mode mode = Mode::Auto;
  std::string name;  // Named: the one tool the model must call
  bool operator==(const ToolChoice&) const = default;
};

struct Generation {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<std::uint64_t> max_tokens;  // per model call
  std::vector<std::string> stop;            // at most 4
  std::optional<std::int64_t> seed;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<std::string> reasoning_effort;  // minimal | low | medium | high
  ResponseFormat response_format;
  ToolChoice tool_choice;
  std::optional<bool> parallel_tool_calls;
  bool operator==(const Generation&) const = default;

  // The names (OpenAI's) of the fields set, for checking them against a provider's support.
  std::vector<std::string> set_fields() const;
};

// Every field a provider may support, by OpenAI's name.
inline constexpr std::string_view kGenerationFields[] = {"temperature",
                                                         "top_p",
                                                         "max_tokens",
                                                         "stop",
                                                         "seed",
                                                         "presence_penalty",
                                                         "frequency_penalty",
                                                         "reasoning_effort",
                                                         "response_format",
                                                         "tool_choice",
                                                         "parallel_tool_calls"};

void to_json(Json& j, const ResponseFormat& v);
void from_json(const Json& j, ResponseFormat& v);
void to_json(Json& j, const ToolChoice& v);
void from_json(const Json& j, ToolChoice& v);
void to_json(Json& j, const Generation& v);
void from_json(const Json& j, Generation& v);

}  // namespace kernex
