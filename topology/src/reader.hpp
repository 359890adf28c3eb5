// Reads fields of a parsed TOPOLOGY document (TOML or YAML, as the skills' Node tree) with
// errors that name the file, the line and the field path.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "node.hpp"

namespace kernex::topology::detail {

using skills::detail::Node;

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  std::unexpected<Error> err(const Node& node, const std::string& path,
                             const std::string& what) const;
  // Calls `fn(key, value, path.key)` for each entry; a key outside `allowed` is an error.
  Result<void> each_key(
      const Node& map, const std::string& path, std::initializer_list<std::string_view> allowed,
      const std::function<Result<void>(const std::string&, const Node&, const std::string&)>& fn)
      const;
  Result<std::string> string(const Node& node, const std::string& path) const;
  Result<std::int64_t> integer(const Node& node, const std::string& path, std::int64_t min,
                               std::int64_t max) const;
  Result<double> number(const Node& node, const std::string& path, double min, double max) const;
  Result<std::vector<std::string>> strings(const Node& node, const std::string& path,
                                           std::size_t max_items = 256) const;
  // A name (valid_name) naming something: "agent", "phase", ...
  Result<std::string> name(const Node& node, const std::string& path) const;
  // A path inside a folder: relative, no "..", no NUL, at most 1024 bytes.
  Result<std::string> relative_path(const Node& node, const std::string& path) const;

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

bool safe_relative_path(std::string_view path);

}  // namespace kernex::topology::detail

namespace kernex::topology::detail {

// Stores a read value (converted to the field's type) or passes the error on.
template <class T, class U>
Result<void> assign(Result<T> read, U& field) {
  if (!read) return std::unexpected(read.error());
  field = static_cast<U>(std::move(*read));
  return {};
}

}  // namespace kernex::topology::detail

namespace kernex::topology {
struct Topology;
struct AgentLimits;
namespace detail {
// The parts of parse(): artifact order and bounds, agents' .md files, [agents], limits tables.
Result<void> check_graph(const Topology& topology, const Reader& reader, const Node& phases);
Result<void> load_agents(Topology& topology, const Reader& reader, const Node& phases);
Result<void> read_agents(const Reader& reader, const Node& node, Topology& out);
Result<void> read_limits(const Reader& reader, const Node& node, const std::string& path,
                         AgentLimits& out);
}  // namespace detail
}  // namespace kernex::topology
