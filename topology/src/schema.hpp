// JSON Schema (draft 7, through valijson) over artifacts. Schemas come from a topology's folder and
// documents from models, so both are bounded: a schema may not use `$ref` (recursion), `pattern`
// or `patternProperties` (std::regex backtracks without bound on hostile text) or `uniqueItems`
// (quadratic in a hostile array).
#pragma once

#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::topology::detail {

// Checks that `schema` can be compiled and uses no refused keyword. Errors name `where`.
Result<void> check_schema(const Json& schema, const std::string& where);
// ErrorCode::Parse naming `where` and the first failures when `document` does not match.
Result<void> validate(const Json& schema, const Json& document, const std::string& where);
// The JSON value in a model's answer: the whole text, else the first ```json fence, else the
// span from the first '{' or '[' to the last matching closer. Discarded when none parses.
Json extract_json(const std::string& text);

}  // namespace kernex::topology::detail
