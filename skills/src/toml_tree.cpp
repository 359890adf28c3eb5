// TOML -> Node with toml++ (header-only; confined to this file).
#include <sstream>
#include <string>

#include <toml++/toml.h>

#include "node.hpp"

namespace kernex::skills::detail {
namespace {

Node convert(const toml::node& value, int first_line) {
  Node n;
  const auto& begin = value.source().begin;
  n.line = begin.line > 0 ? static_cast<int>(begin.line) + first_line - 1 : 0;
  n.column = begin.column > 0 ? static_cast<int>(begin.column) - 1 : 0;
  if (const auto* t = value.as_table()) {
    n.kind = Node::Kind::Map;
    for (const auto& [k, v] : *t)
      n.entries.emplace_back(std::string(k.str()), convert(v, first_line));
  } else if (const auto* a = value.as_array()) {
    n.kind = Node::Kind::List;
    for (const auto& item : *a) n.items.push_back(convert(item, first_line));
  } else if (const auto* s = value.as_string()) {
    n.kind = Node::Kind::Scalar;
    n.text = s->get();
  } else if (const auto* i = value.as_integer()) {
    n.kind = Node::Kind::Int;
    n.integer = i->get();
    n.text = std::to_string(n.integer);
  } else if (const auto* f = value.as_floating_point()) {
    n.kind = Node::Kind::Float;
    n.number = f->get();
    std::ostringstream out;
    out << n.number;
    n.text = out.str();
  } else if (const auto* b = value.as_boolean()) {
    n.kind = Node::Kind::Bool;
    n.boolean = b->get();
    n.text = n.boolean ? "true" : "false";
  } else {
    // Dates and times have no counterpart in the model; keep their TOML spelling.
    std::ostringstream out;
    if (const auto* d = value.as_date())
      out << d->get();
    else if (const auto* tm = value.as_time())
      out << tm->get();
    else if (const auto* dt = value.as_date_time())
      out << dt->get();
    n.kind = Node::Kind::Scalar;
    n.text = out.str();
  }
  return n;
}

}  // namespace

std::optional<Node> parse_toml(std::string_view text, int first_line, ParseFailure& failure) {
  try {
    toml::table table = toml::parse(text);
    Node root = convert(table, first_line);
    root.line = first_line;
    return root;
  } catch (const toml::parse_error& e) {
    failure =
        ParseFailure{static_cast<int>(e.source().begin.line),
                     static_cast<int>(e.source().begin.column) - 1, std::string(e.description())};
    if (failure.column < 0) failure.column = 0;
    return std::nullopt;
  }
}

}  // namespace kernex::skills::detail
