#include "node.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace kernex::skills::detail {

const Node* Node::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string_view describe_kind(const Node& node) {
  switch (node.kind) {
    case Node::Kind::Null:
      return "nothing";
    case Node::Kind::Scalar:
      return "a string";
    case Node::Kind::Bool:
      return "a boolean";
    case Node::Kind::Int:
    case Node::Kind::Float:
      return "a number";
    case Node::Kind::List:
      return "a list";
    case Node::Kind::Map:
      return "a mapping";
  }
  return "nothing";
}

namespace {

// YAML 1.2 core schema for unquoted scalars.
Json plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  std::string_view v = s;
  bool negative = false;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    negative = v[0] == '-';
    v.remove_prefix(1);
  }
  int base = 10;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'o')) {
    base = v[1] == 'x' ? 16 : 8;
    v.remove_prefix(2);
  }
  if (!v.empty()) {
    std::int64_t i = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i, base);
    if (ec == std::errc() && end == v.data() + v.size()) return negative ? -i : i;
  }
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf")
    return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -std::numeric_limits<double>::infinity();
  std::string_view f = s;
  if (!f.empty() && f[0] == '+') f.remove_prefix(1);
  if (!f.empty() &&
      (std::isdigit(static_cast<unsigned char>(f[0])) || f[0] == '-' || f[0] == '.')) {
    double d = 0;
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), d);
    if (ec == std::errc() && end == f.data() + f.size() && std::isfinite(d)) return d;
  }
  return s;
}

}  // namespace

Json to_json(const Node& node) {
  switch (node.kind) {
    case Node::Kind::Null:
      return nullptr;
    case Node::Kind::Scalar:
      return node.plain ? plain_scalar(node.text) : Json(node.text);
    case Node::Kind::Bool:
      return node.boolean;
    case Node::Kind::Int:
      return node.integer;
    case Node::Kind::Float:
      return node.number;
    case Node::Kind::List: {
      Json out = Json::array();
      for (const auto& item : node.items) out.push_back(to_json(item));
      return out;
    }
    case Node::Kind::Map: {
      Json out = Json::object();
      for (const auto& [k, v] : node.entries) out[k] = to_json(v);
      return out;
    }
  }
  return nullptr;
}

Node from_json(const Json& json) {
  Node n;
  switch (json.type()) {
    case Json::value_t::string:
      n.kind = Node::Kind::Scalar;
      n.text = json.get<std::string>();
      break;
    case Json::value_t::boolean:
      n.kind = Node::Kind::Bool;
      n.boolean = json.get<bool>();
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      n.kind = Node::Kind::Int;
      n.integer =
          json.is_number_unsigned() && json.get<std::uint64_t>() >
                                           std::uint64_t(std::numeric_limits<std::int64_t>::max())
              ? std::numeric_limits<std::int64_t>::max()
              : json.get<std::int64_t>();
      n.text = json.dump();
      break;
    case Json::value_t::number_float:
      n.kind = Node::Kind::Float;
      n.number = json.get<double>();
      n.text = json.dump();
      break;
    case Json::value_t::array:
      n.kind = Node::Kind::List;
      for (const auto& item : json) n.items.push_back(from_json(item));
      break;
    case Json::value_t::object:
      n.kind = Node::Kind::Map;
      for (const auto& [k, v] : json.items()) n.entries.emplace_back(k, from_json(v));
      break;
    default:
      break;
  }
  return n;
}

}  // namespace kernex::skills::detail
