#include "yaml_to_json.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <regex>
#include <set>
#include <string_view>

namespace kernex::detail {
namespace {

constexpr int kMaxDepth = 64;
constexpr std::size_t kMaxNodes = 100'000;

bool is_plain(const YAML::Node& node) { return node.Tag() == "?"; }

std::optional<Json> parse_core_int(std::string_view s) {
  bool negative = false;
  std::string_view digits = s;
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) {
    negative = digits.front() == '-';
    digits.remove_prefix(1);
  }
  int base = 10;
  if (digits.starts_with("0x")) {
    if (s.front() == '-' || s.front() == '+') return std::nullopt;  // core schema: no sign on hex
    base = 16;
    digits.remove_prefix(2);
  } else if (digits.starts_with("0o")) {
    if (s.front() == '-' || s.front() == '+') return std::nullopt;
    base = 8;
    digits.remove_prefix(2);
  }
  if (digits.empty()) return std::nullopt;
  std::uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (end != digits.data() + digits.size()) return std::nullopt;
  if (ec != std::errc()) return std::nullopt;  // out of range: stays a string
  if (!negative) {
    if (magnitude <= static_cast<std::uint64_t>(INT64_MAX))
      return Json(static_cast<std::int64_t>(magnitude));
    return Json(magnitude);
  }
  if (magnitude <= static_cast<std::uint64_t>(INT64_MAX))
    return Json(-static_cast<std::int64_t>(magnitude));
  if (magnitude == static_cast<std::uint64_t>(INT64_MAX) + 1) return Json(INT64_MIN);
  return std::nullopt;
}

std::optional<Json> parse_core_float(const std::string& s) {
  static const std::regex pattern(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (!std::regex_match(s, pattern)) return std::nullopt;
  // The pattern also matches integers; those too large for 64 bits stay strings rather than
  // silently losing digits as doubles.
  if (s.find_first_of(".eE") == std::string::npos) return std::nullopt;
  std::string_view v = s;
  if (!v.empty() && v.front() == '+') v.remove_prefix(1);
  double d = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || end != v.data() + v.size() || !std::isfinite(d)) return std::nullopt;
  return Json(d);
}

struct Converter {
  const YamlLocator& where;
  std::size_t nodes = 0;

  Result<Json> convert(const YAML::Node& node, const std::string& path, int depth) {
    if (++nodes > kMaxNodes)
      return fail(ErrorCode::Config, where.at(node, path) + ": too many values (more than " +
                                         std::to_string(kMaxNodes) + ")");
    if (depth > kMaxDepth)
      return fail(ErrorCode::Config, where.at(node, path) + ": nested more than " +
                                         std::to_string(kMaxDepth) + " levels deep");
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return Json(nullptr);
      case YAML::NodeType::Scalar:
        return yaml_scalar_to_json(node);
      case YAML::NodeType::Sequence: {
        Json out = Json::array();
        std::size_t i = 0;
        for (const auto& item : node) {
          auto v = convert(item, path + "[" + std::to_string(i++) + "]", depth + 1);
          if (!v) return v;
          out.push_back(std::move(*v));
        }
        return out;
      }
      case YAML::NodeType::Map: {
        Json out = Json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          const YAML::Node key = it->first;  // a copy: `it->` yields a temporary proxy
          if (!key.IsScalar())
            return fail(ErrorCode::Config,
                        where.at(key, path) + ": keys must be strings, got " + describe_yaml(key));
          std::string child = path.empty() ? key.Scalar() : path + "." + key.Scalar();
          if (out.contains(key.Scalar()))
            return fail(ErrorCode::Config, where.at(key, child) + ": duplicate key");
          auto v = convert(it->second, child, depth + 1);
          if (!v) return v;
          out[key.Scalar()] = std::move(*v);
        }
        return out;
      }
    }
    return Json(nullptr);
  }
};

}  // namespace

Json yaml_scalar_to_json(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return Json(nullptr);
  const std::string& s = node.Scalar();
  if (!is_plain(node)) return Json(s);
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return Json(nullptr);
  if (s == "true" || s == "True" || s == "TRUE") return Json(true);
  if (s == "false" || s == "False" || s == "FALSE") return Json(false);
  if (auto i = parse_core_int(s)) return *i;
  if (auto d = parse_core_float(s)) return *d;
  return Json(s);
}

std::string YamlLocator::at(const YAML::Node& node, const std::string& path) const {
  std::string out = origin;
  const YAML::Mark mark = node.Mark();
  if (mark.line >= 0) out += ":" + std::to_string(mark.line + 1);
  if (!path.empty()) out += ": " + path;
  return out;
}

Result<Json> yaml_to_json(const YAML::Node& node, const std::string& path,
                          const YamlLocator& where) {
  Converter c{where};
  return c.convert(node, path, 0);
}

std::string describe_yaml(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return "nothing (null)";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  std::string text = node.Scalar();
  constexpr std::size_t kShown = 60;
  if (text.size() > kShown) text = text.substr(0, kShown) + "...";
  // Quoted the way JSON would, so control characters from the file can't garble the terminal.
  std::string shown = Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  // A plain number or bool reads better unquoted (`got -3`), a word quoted (`got "ten"`).
  Json typed = yaml_scalar_to_json(node);
  if (typed.is_number() || typed.is_boolean()) return text;
  return shown;
}

}  // namespace kernex::detail
