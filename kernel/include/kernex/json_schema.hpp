// JSON Schema checks for structured output (OpenAI response_format json_schema): whether a
// schema can be used, and whether an answer satisfies it. valijson (draft 4/6/7), no network:
// a remote $ref is an error, never fetched.
#pragma once

#include <optional>
#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex {

// An error naming what is wrong when `schema` cannot be used.
Result<void> check_json_schema(const Json& schema);
// Nothing when `document` satisfies `schema`; else what does not (first few violations).
std::optional<std::string> schema_violation(const Json& schema, const Json& document);

}  // namespace kernex
