// YAML -> JSON for option mappings handed to plugins, with one documented typing rule.
//
// Plain (unquoted) scalars follow the YAML 1.2 core schema: null/Null/NULL/~/empty -> null,
// true/True/TRUE/false/False/FALSE -> bool, decimal/0x/0o integers that fit in 64 bits -> integer,
// decimal floats -> double. Everything else stays a string: quoted or block scalars, explicitly
// tagged scalars (!!str), YAML 1.1 words like yes/no/on/off, out-of-range integers and .inf/.nan
// (JSON can't hold them). Mappings become objects (keys are the key scalar's text; duplicate keys
// are an error), sequences become arrays.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::detail {

// The JSON value of a scalar under the rule above (null for a null node).
Json yaml_scalar_to_json(const YAML::Node& scalar);

// Converts a whole subtree. `where` is the error prefix ("file:line: key.path") builder:
// errors name `path` extended with the offending key or index. Depth and size are capped so
// a hostile file (alias bombs, deep nesting) becomes an error rather than a crash.
struct YamlLocator {
  std::string origin;  // file name used in messages
  std::string at(const YAML::Node& node, const std::string& path) const;  // "origin:line: path"
};
Result<Json> yaml_to_json(const YAML::Node& node, const std::string& path,
                          const YamlLocator& where);

// A short human description of a node for "expected X, got Y" messages.
std::string describe_yaml(const YAML::Node& node);

}  // namespace kernex::detail
