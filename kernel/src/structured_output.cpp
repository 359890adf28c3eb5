#include "structured_output.hpp"

#include "kernex/json_schema.hpp"

namespace kernex {
namespace {

// "```json\n{...}\n```" -> "{...}"; anything else unchanged.
std::string without_fence(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) return text;
  std::string t = text.substr(first, last - first + 1);
  if (!t.starts_with("```") || !t.ends_with("```") || t.size() < 6) return t;
  const auto line = t.find('\n');
  if (line == std::string::npos) return t;
  return t.substr(line + 1, t.size() - 3 - (line + 1));
}

}  // namespace

std::expected<std::string, std::string> structured_answer(const ResponseFormat& format,
                                                          const std::string& text) {
  if (format.kind == ResponseFormat::Kind::Text) return text;
  const std::string json_text = without_fence(text);
  const Json doc = parse_untrusted(json_text);
  if (doc.is_discarded()) return std::unexpected("the answer is not valid JSON");
  if (format.kind == ResponseFormat::Kind::JsonObject) {
    if (!doc.is_object()) return std::unexpected("the answer is not a JSON object");
    return json_text;
  }
  if (auto violation = schema_violation(format.schema, doc)) return std::unexpected(*violation);
  return json_text;
}

std::string structured_retry_prompt(const ResponseFormat& format, const std::string& problem) {
  std::string prompt = "Your last answer was rejected: " + problem +
                       ". Answer again with only the JSON value, no other text";
  if (format.kind == ResponseFormat::Kind::JsonSchema)
    prompt += ", satisfying this JSON Schema: " + format.schema.dump();
  return prompt + ".";
}

}  // namespace kernex
