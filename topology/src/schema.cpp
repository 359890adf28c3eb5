// As in kernel/src/json_schema.cpp: valijson throws (not aborts) on a bad schema, and every file
// that includes it must say so the same way (one definition of its inline functions).
#define VALIJSON_USE_EXCEPTIONS 1
#include "schema.hpp"

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace kernex::topology::detail {
namespace {

bool is_name_map(const std::string& key) {
  return key == "properties" || key == "definitions" || key == "$defs" || key == "dependencies";
}

Result<void> refuse_keywords(const Json& node, const std::string& where, std::size_t depth) {
  if (depth > 64) return fail(ErrorCode::Config, where + ": schema nested deeper than 64");
  if (node.is_array()) {
    for (const auto& item : node) KERNEX_RETURN_IF_ERROR(refuse_keywords(item, where, depth + 1));
    return {};
  }
  if (!node.is_object()) return {};
  for (const auto& [key, value] : node.items()) {
    if (key == "$ref" || key == "pattern" || key == "patternProperties" || key == "uniqueItems") {
      return fail(ErrorCode::Config, where + ": schema keyword `" + key +
                                         "` is not supported here ($ref, pattern, "
                                         "patternProperties and uniqueItems are refused)");
    }
    if (is_name_map(key) && value.is_object()) {
      for (const auto& [name, sub] : value.items())
        KERNEX_RETURN_IF_ERROR(refuse_keywords(sub, where, depth + 1));
    } else {
      KERNEX_RETURN_IF_ERROR(refuse_keywords(value, where, depth + 1));
    }
  }
  return {};
}

Result<void> compile(const Json& schema, valijson::Schema& out, const std::string& where) {
  try {
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(schema);
    parser.populateSchema(adapter, out);
  } catch (const std::exception& e) {
    return fail(ErrorCode::Config, where + ": not a usable JSON Schema: " + e.what());
  }
  return {};
}

}  // namespace

Result<void> check_schema(const Json& schema, const std::string& where) {
  if (!schema.is_object() && !schema.is_boolean())
    return fail(ErrorCode::Config, where + ": a JSON Schema must be an object or a boolean");
  KERNEX_RETURN_IF_ERROR(refuse_keywords(schema, where, 0));
  valijson::Schema compiled;
  return compile(schema, compiled, where);
}

Result<void> validate(const Json& schema, const Json& document, const std::string& where) {
  if (schema.is_null()) return {};
  valijson::Schema compiled;
  KERNEX_RETURN_IF_ERROR(compile(schema, compiled, where));
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter target(document);
  bool ok = false;
  try {
    ok = validator.validate(compiled, target, &results);
  } catch (const std::exception& e) {
    return fail(ErrorCode::Parse, where + ": schema check failed: " + e.what());
  }
  if (ok) return {};
  std::string detail;
  valijson::ValidationResults::Error error;
  for (int shown = 0; shown < 3 && results.popError(error); ++shown) {
    std::string at;
    for (const auto& part : error.context) at += part;
    detail += (detail.empty() ? "" : "; ") + at + ": " + error.description;
  }
  return fail(ErrorCode::Parse, where + ": does not match its schema: " + detail);
}

Json extract_json(const std::string& text) {
  Json whole = parse_untrusted(text);
  if (!whole.is_discarded()) return whole;
  if (auto fence = text.find("```json"); fence != std::string::npos) {
    const auto start = text.find('\n', fence);
    const auto end = start == std::string::npos ? start : text.find("```", start);
    if (end != std::string::npos) {
      Json fenced = parse_untrusted(std::string_view(text).substr(start + 1, end - start - 1));
      if (!fenced.is_discarded()) return fenced;
    }
  }
  const auto open = text.find_first_of("{[");
  if (open == std::string::npos) return Json(Json::value_t::discarded);
  const char closer = text[open] == '{' ? '}' : ']';
  const auto close = text.rfind(closer);
  if (close == std::string::npos || close < open) return Json(Json::value_t::discarded);
  return parse_untrusted(std::string_view(text).substr(open, close - open + 1));
}

}  // namespace kernex::topology::detail
