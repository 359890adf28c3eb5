// Routes as data: each route of the HTTP API is a method, a path pattern, who may call it and a
// handler, and one matcher picks the route a request asks for. The patterns are literal segments,
// "{name}" (one segment, bound by name) and a last "{name...}" (the remaining segments).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http_types.hpp"

namespace kernex::server {

enum class RouteAuth {
  Public,         // anyone who reaches the listener
  Tenant,         // a caller whose credentials name a tenant
  TenantSession,  // and {session} is one this tenant used (another tenant's is not found)
};

// What a pattern bound: the {name} segments, and the segments a last {name...} took.
struct RouteParams {
  std::vector<std::pair<std::string_view, std::string>> named;
  std::vector<std::string> rest;
  // The segment bound to {name}; "" when the pattern has none.
  const std::string& operator[](std::string_view name) const;
};

// The path's segments, each decoded after splitting: "%2F" inside a session id is part of it.
std::vector<std::string> path_segments(const HttpRequest& req);

// Whether `segments` match `pattern` ("/v1/runs/{run}/events"); the params are bound into `out`.
bool match_route(std::string_view pattern, const std::vector<std::string>& segments,
                 RouteParams& out);

// What a table of routes answers for a request: the route whose pattern and method match, or
// only whether some route serves the path (with another method: 405, else 404).
template <class Route>
struct RouteLookup {
  const Route* route = nullptr;
  bool path_known = false;
  RouteParams params;
};

// The first route whose pattern matches and whose method is the request's (an empty method
// takes any: the handler answers the methods it does not serve).
template <class Route, class Table>
RouteLookup<Route> find_route(const Table& table, const HttpRequest& req,
                              const std::vector<std::string>& segments) {
  RouteLookup<Route> found;
  for (const Route& route : table) {
    RouteParams params;
    if (!match_route(route.pattern, segments, params)) continue;
    found.path_known = true;
    if (!route.method.empty() && route.method != req.method) continue;
    found.route = &route;
    found.params = std::move(params);
    break;
  }
  return found;
}

}  // namespace kernex::server
