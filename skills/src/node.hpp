// A small document tree with source lines, built from YAML, TOML or JSON, so that one piece of
// code reads manifest fields and reports where a bad value is, whatever the format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernex/json.hpp"

namespace kernex::skills::detail {

struct Node {
  enum class Kind { Null, Scalar, Bool, Int, Float, List, Map };
  Kind kind = Kind::Null;
  std::string text;    // Scalar value; TOML dates and the source text of numbers
  bool plain = false;  // an unquoted YAML scalar: may read as a bool or a number
  bool boolean = false;
  std::int64_t integer = 0;
  double number = 0;
  // A mapping's key and value. A struct rather than std::pair<std::string, Node>: pair needs Node
  // complete where vector's members are instantiated inside Node, which clang refuses.
  struct Entry;
  std::vector<Node> items;     // List
  std::vector<Entry> entries;  // Map, in document order
  int line = 0;                // 1-based line in the file; 0 when unknown
  int column = 0;              // 0-based

  bool is_map() const { return kind == Kind::Map; }
  const Node* find(std::string_view key) const;
};

struct Node::Entry {
  Entry(std::string k, Node v) : key(std::move(k)), value(std::move(v)) {}
  std::string key;
  Node value;
};

// "a string", "a list", "a mapping", "a boolean", "a number", "nothing".
std::string_view describe_kind(const Node& node);
// YAML plain scalars are typed with the YAML 1.2 core schema (null, true/false, numbers).
Json to_json(const Node& node);
Node from_json(const Json& json);

// Where a document failed to parse.
struct ParseFailure {
  int line = 0;  // 1-based, relative to the parsed text
  int column = 0;
  std::string message;
};

// YAML. strict = StrictYAML rules (the Agent Skills reference validator): flow collections,
// tags and anchors are errors, every scalar (nulls included) is a string. Duplicate keys are
// errors in both modes. Node lines are relative to `text` plus `first_line - 1`.
std::optional<Node> parse_yaml(std::string_view text, bool strict, int first_line,
                               ParseFailure& failure);
std::optional<Node> parse_toml(std::string_view text, int first_line, ParseFailure& failure);

}  // namespace kernex::skills::detail
