// valijson is given only schemas it can take without harm: it recurses without end on a cycle of
// bare $refs (a crash), aborts instead of throwing unless told (VALIJSON_USE_EXCEPTIONS), would
// fetch a remote $ref if it could, and runs `pattern`s through std::regex, which backtracks
// without bound ((a+)+$) and recurses per character. So a schema's $refs must be local JSON
// pointers that reach a schema without coming back, and patterns are not checked here (a
// provider with native structured output still applies them).
// Every file that includes valijson defines this first (topology/src/schema.cpp too): its inline
// functions must be compiled one way, or the linker keeps whichever copy it met first, and a
// process with both libraries aborted on a bad schema.
#define VALIJSON_USE_EXCEPTIONS 1
#include "kernex/json_schema.hpp"

#include <map>
#include <string>
#include <vector>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace kernex {
namespace {

// Keywords whose value is a map of names to schemas, a schema, or a list of schemas.
bool is_schema_map(const std::string& k) {
  return k == "properties" || k == "patternProperties" || k == "definitions" || k == "$defs" ||
         k == "dependencies" || k == "dependentSchemas";
}
bool is_schema_or_list(const std::string& k) {
  return k == "items" || k == "additionalItems" || k == "additionalProperties" || k == "not" ||
         k == "if" || k == "then" || k == "else" || k == "contains" || k == "propertyNames" ||
         k == "allOf" || k == "anyOf" || k == "oneOf" || k == "prefixItems";
}

// The schema without `pattern` and `patternProperties` (every schema position, not property
// names that happen to be called so).
Json without_patterns(const Json& schema) {
  if (!schema.is_object()) return schema;
  Json out = Json::object();
  for (const auto& [k, v] : schema.items()) {
    if ((k == "pattern" && v.is_string()) || k == "patternProperties") continue;
    if (is_schema_map(k) && v.is_object()) {
      Json m = Json::object();
      for (const auto& [name, sub] : v.items()) m[name] = without_patterns(sub);
      out[k] = std::move(m);
    } else if (is_schema_or_list(k) && v.is_array()) {
      Json a = Json::array();
      for (const auto& sub : v) a.push_back(without_patterns(sub));
      out[k] = std::move(a);
    } else if (is_schema_or_list(k)) {
      out[k] = without_patterns(v);
    } else {
      out[k] = v;
    }
  }
  return out;
}

// The schemas of the document by JSON pointer, and for each the schemas that apply to the same
// instance (allOf, anyOf, oneOf, not, if/then/else, dependent schemas, a $ref's target). A cycle
// there is a recursion that never moves into a smaller value: valijson would overflow the stack.
struct SchemaGraph {
  std::map<std::string, std::vector<std::string>> same_instance;
  Result<void> add(const Json& root, const Json& node, const std::string& at, int depth);
};

Result<std::string> ref_target(const Json& root, const Json& ref) {
  if (!ref.is_string()) return fail(ErrorCode::Usage, "a $ref is a string");
  const std::string r = ref.get<std::string>();
  if (r.empty() || r[0] != '#')
    return fail(ErrorCode::Usage, "$ref '" + r + "': only local references (#/...) are taken");
  try {
    (void)root.at(Json::json_pointer(r.substr(1)));
  } catch (const std::exception&) {
    return fail(ErrorCode::Usage, "$ref '" + r + "' points at nothing in the schema");
  }
  return r.substr(1);
}

std::string escaped(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

Result<void> SchemaGraph::add(const Json& root, const Json& node, const std::string& at,
                              int depth) {
  if (depth > 64) return fail(ErrorCode::Usage, "the JSON Schema nests too deep");
  if (!node.is_object()) return {};
  auto& edges = same_instance[at];
  for (const auto& [k, v] : node.items()) {
    const std::string here = at + "/" + escaped(k);
    const bool same = k == "allOf" || k == "anyOf" || k == "oneOf" || k == "not" || k == "if" ||
                      k == "then" || k == "else" || k == "dependencies" || k == "dependentSchemas";
    if (k == "$ref") {
      KERNEX_ASSIGN_OR_RETURN(auto target, ref_target(root, v));
      edges.push_back(target);
    } else if (is_schema_map(k) && v.is_object()) {
      for (const auto& [name, sub] : v.items()) {
        const std::string child = here + "/" + escaped(name);
        if (same) edges.push_back(child);
        KERNEX_RETURN_IF_ERROR(add(root, sub, child, depth + 1));
      }
    } else if (is_schema_or_list(k) && v.is_array()) {
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string child = here + "/" + std::to_string(i);
        if (same) edges.push_back(child);
        KERNEX_RETURN_IF_ERROR(add(root, v[i], child, depth + 1));
      }
    } else if (is_schema_or_list(k)) {
      if (same) edges.push_back(here);
      KERNEX_RETURN_IF_ERROR(add(root, v, here, depth + 1));
    }
  }
  return {};
}

bool has_cycle(const SchemaGraph& g, const std::string& at, std::map<std::string, int>& state) {
  int& s = state[at];
  if (s == 1) return true;
  if (s == 2) return false;
  s = 1;
  if (auto it = g.same_instance.find(at); it != g.same_instance.end()) {
    for (const auto& next : it->second)
      if (has_cycle(g, next, state)) return true;
  }
  state[at] = 2;
  return false;
}

Result<void> check_refs(const Json& schema) {
  SchemaGraph graph;
  KERNEX_RETURN_IF_ERROR(graph.add(schema, schema, "", 0));
  std::map<std::string, int> state;
  for (const auto& [at, edges] : graph.same_instance) {
    if (has_cycle(graph, at, state))
      return fail(ErrorCode::Usage,
                  "the JSON Schema refers to itself for the same value (a $ref, allOf, anyOf, "
                  "oneOf, not or if cycle) at '#" +
                      at + "'");
  }
  return {};
}

Result<void> parse_schema(const Json& schema, valijson::Schema& out) {
  KERNEX_RETURN_IF_ERROR(check_refs(schema));
  try {
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter adapter(schema);
    parser.populateSchema(adapter, out);
    return {};
  } catch (const std::exception& e) {
    return fail(ErrorCode::Usage, std::string("the JSON Schema cannot be used: ") + e.what());
  }
}

}  // namespace

Result<void> check_json_schema(const Json& schema) {
  if (!schema.is_object()) return fail(ErrorCode::Usage, "a JSON Schema is an object");
  valijson::Schema parsed;
  return parse_schema(without_patterns(schema), parsed);
}

std::optional<std::string> schema_violation(const Json& schema, const Json& document) {
  valijson::Schema parsed;
  if (auto ok = parse_schema(without_patterns(schema), parsed); !ok) return ok.error().describe();
  try {
    valijson::Validator validator;
    valijson::ValidationResults results;
    valijson::adapters::NlohmannJsonAdapter target(document);
    if (validator.validate(parsed, target, &results)) return std::nullopt;
    std::string out;
    valijson::ValidationResults::Error error;
    for (int shown = 0; shown < 5 && results.popError(error); ++shown) {
      std::string where;
      for (const auto& part : error.context) where += part;
      out += (out.empty() ? "" : "; ") + where + ": " + error.description;
    }
    return out.empty() ? std::string("does not match the schema") : out;
  } catch (const std::exception& e) {
    return std::string("validation failed: ") + e.what();
  }
}

}  // namespace kernex
