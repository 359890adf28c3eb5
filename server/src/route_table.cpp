// The route matcher (see route_table.hpp).
#include "route_table.hpp"

namespace kernex::server {

const std::string& RouteParams::operator[](std::string_view name) const {
  static const std::string kNone;
  for (const auto& [key, value] : named) {
    if (key == name) return value;
  }
  return kNone;
}

std::vector<std::string> path_segments(const HttpRequest& req) {
  const std::string& path = req.raw_path.empty() ? req.path : req.raw_path;
  const bool raw = !req.raw_path.empty();
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    const std::size_t j = path.find('/', i);
    std::string seg = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    out.push_back(raw ? percent_decode(seg, false) : std::move(seg));
    i = j == std::string::npos ? path.size() : j;
  }
  return out;
}

bool match_route(std::string_view pattern, const std::vector<std::string>& segments,
                 RouteParams& out) {
  std::size_t at = 0;  // the segment the next pattern part matches
  while (!pattern.empty()) {
    pattern.remove_prefix(pattern.front() == '/' ? 1 : 0);
    const std::size_t end = pattern.find('/');
    const std::string_view part = pattern.substr(0, end);
    pattern.remove_prefix(end == std::string_view::npos ? pattern.size() : end);
    const bool param = part.size() > 2 && part.front() == '{' && part.back() == '}';
    if (param && part.ends_with("...}")) {
      out.rest.assign(segments.begin() + static_cast<std::ptrdiff_t>(std::min(at, segments.size())),
                      segments.end());
      return at <= segments.size();
    }
    if (at >= segments.size()) return false;
    if (param) {
      out.named.emplace_back(part.substr(1, part.size() - 2), segments[at]);
    } else if (part != segments[at]) {
      return false;
    }
    ++at;
  }
  return at == segments.size();
}

}  // namespace kernex::server
