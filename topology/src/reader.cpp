#include "reader.hpp"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

#include "kernex/topology/topology.hpp"

namespace kernex::topology {

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

namespace detail {

bool safe_relative_path(std::string_view path) {
  if (path.empty() || path.size() > 1024 || path.find('\0') != std::string_view::npos ||
      path.front() == '/' || path.find('\\') != std::string_view::npos)
    return false;
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "..") return false;
  }
  return true;
}

std::unexpected<Error> Reader::err(const Node& node, const std::string& path,
                                   const std::string& what) const {
  std::string msg = file_;
  if (node.line > 0) msg += ":" + std::to_string(node.line);
  msg += ": ";
  if (!path.empty()) msg += path + ": ";
  msg += what;
  return fail(ErrorCode::Config, std::move(msg));
}

Result<void> Reader::each_key(
    const Node& map, const std::string& path, std::initializer_list<std::string_view> allowed,
    const std::function<Result<void>(const std::string&, const Node&, const std::string&)>& fn)
    const {
  if (!map.is_map())
    return err(
        map, path,
        std::string("expected a table, got ") + std::string(skills::detail::describe_kind(map)));
  std::set<std::string> seen;
  for (const auto& entry : map.entries) {
    const std::string sub = path.empty() ? entry.key : path + "." + entry.key;
    bool known = false;
    for (auto a : allowed) known = known || a == entry.key;
    if (!known) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return err(entry.value, sub, "unknown key (expected one of: " + list + ")");
    }
    if (!seen.insert(entry.key).second) return err(entry.value, sub, "duplicate key");
    KERNEX_RETURN_IF_ERROR(fn(entry.key, entry.value, sub));
  }
  return {};
}

Result<std::string> Reader::string(const Node& node, const std::string& path) const {
  if (node.kind != Node::Kind::Scalar)
    return err(node, path,
               "expected a string, got " + std::string(skills::detail::describe_kind(node)));
  if (node.text.size() > 64 * 1024) return err(node, path, "longer than 64 KiB");
  return node.text;
}

Result<std::int64_t> Reader::integer(const Node& node, const std::string& path, std::int64_t min,
                                     std::int64_t max) const {
  std::int64_t value = 0;
  if (node.kind == Node::Kind::Int) {
    value = node.integer;
  } else if (node.kind == Node::Kind::Scalar && node.plain) {  // YAML's unquoted 12
    auto [end, ec] =
        std::from_chars(node.text.data(), node.text.data() + node.text.size(), value, 10);
    if (ec != std::errc() || end != node.text.data() + node.text.size())
      return err(node, path, "expected an integer, got \"" + node.text + "\"");
  } else {
    return err(node, path,
               "expected an integer, got " + std::string(skills::detail::describe_kind(node)));
  }
  if (value < min || value > max)
    return err(node, path,
               "expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                   ", got " + std::to_string(value));
  return value;
}

Result<double> Reader::number(const Node& node, const std::string& path, double min,
                              double max) const {
  double value = 0;
  if (node.kind == Node::Kind::Int) {
    value = static_cast<double>(node.integer);
  } else if (node.kind == Node::Kind::Float) {
    value = node.number;
  } else if (node.kind == Node::Kind::Scalar && node.plain) {
    auto [end, ec] = std::from_chars(node.text.data(), node.text.data() + node.text.size(), value);
    if (ec != std::errc() || end != node.text.data() + node.text.size())
      return err(node, path, "expected a number, got \"" + node.text + "\"");
  } else {
    return err(node, path,
               "expected a number, got " + std::string(skills::detail::describe_kind(node)));
  }
  if (!std::isfinite(value) || value < min || value > max)
    return err(
        node, path,
        "expected a finite number from " + std::to_string(min) + " to " + std::to_string(max));
  return value;
}

Result<std::vector<std::string>> Reader::strings(const Node& node, const std::string& path,
                                                 std::size_t max_items) const {
  if (node.kind != Node::Kind::List)
    return err(
        node, path,
        "expected a list of strings, got " + std::string(skills::detail::describe_kind(node)));
  if (node.items.size() > max_items)
    return err(node, path, "more than " + std::to_string(max_items) + " items");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < node.items.size(); ++i) {
    KERNEX_ASSIGN_OR_RETURN(auto s, string(node.items[i], path + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::string> Reader::name(const Node& node, const std::string& path) const {
  KERNEX_ASSIGN_OR_RETURN(auto s, string(node, path));
  if (!valid_name(s))
    return err(node, path,
               "\"" + s.substr(0, 80) +
                   "\" is not a valid name (1-64 characters: letters, digits, '-', '_'; no '..', "
                   "'/' or '\\')");
  return s;
}

Result<std::string> Reader::relative_path(const Node& node, const std::string& path) const {
  KERNEX_ASSIGN_OR_RETURN(auto s, string(node, path));
  if (!safe_relative_path(s))
    return err(node, path,
               "\"" + s.substr(0, 80) +
                   "\" must be a relative path inside the folder (no '..', no leading '/')");
  return s;
}

}  // namespace detail
}  // namespace kernex::topology
