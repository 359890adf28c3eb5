// The route table's matcher: patterns with literal segments, {name} and a last {name...}; the
// decoded segments of a raw path; and the lookup that tells 404 (no pattern) from 405 (another
// method).
#include "route_table.hpp"

#include <gtest/gtest.h>

#include <array>

namespace kernex::server {
namespace {

std::vector<std::string> segs(std::initializer_list<const char*> parts) {
  return {parts.begin(), parts.end()};
}

TEST(ServeRouteTable, MatchesLiteralsAndBindsParams) {
  RouteParams p;
  ASSERT_TRUE(match_route("/v1/runs/{run}/events", segs({"v1", "runs", "r-1", "events"}), p));
  EXPECT_EQ(p["run"], "r-1");
  EXPECT_EQ(p["missing"], "");
  RouteParams q;
  EXPECT_FALSE(match_route("/v1/runs/{run}/events", segs({"v1", "runs", "r-1", "cancel"}), q));
  RouteParams r;
  EXPECT_FALSE(match_route("/v1/runs/{run}", segs({"v1", "runs"}), r));
  RouteParams s;
  EXPECT_FALSE(match_route("/v1/runs/{run}", segs({"v1", "runs", "a", "b"}), s));
  RouteParams t;
  EXPECT_TRUE(match_route("/healthz", segs({"healthz"}), t));
  RouteParams u;
  EXPECT_FALSE(match_route("/healthz", segs({}), u));
}

TEST(ServeRouteTable, RestTakesTheRemainingSegmentsEvenNone) {
  const std::string_view pattern = "/v1/sessions/{session}/workspace/{action...}";
  RouteParams none;
  ASSERT_TRUE(match_route(pattern, segs({"v1", "sessions", "s", "workspace"}), none));
  EXPECT_EQ(none["session"], "s");
  EXPECT_TRUE(none.rest.empty());
  RouteParams two;
  ASSERT_TRUE(match_route(pattern, segs({"v1", "sessions", "s", "workspace", "a", "b"}), two));
  EXPECT_EQ(two.rest, segs({"a", "b"}));
  RouteParams short_path;
  EXPECT_FALSE(match_route(pattern, segs({"v1", "sessions", "s"}), short_path));
}

TEST(ServeRouteTable, SegmentsAreDecodedAfterSplitting) {
  HttpRequest req;
  req.raw_path = "/v1/sessions/a%2Fb//messages/";
  req.path = "/v1/sessions/a/b//messages/";
  EXPECT_EQ(path_segments(req), segs({"v1", "sessions", "a/b", "messages"}));
  HttpRequest plain;
  plain.path = "/v1/models";
  EXPECT_EQ(path_segments(plain), segs({"v1", "models"}));
}

struct TestRoute {
  std::string_view method;
  std::string_view pattern;
  int id;
};

TEST(ServeRouteTable, LookupTellsUnknownPathFromWrongMethod) {
  const std::array<TestRoute, 4> table{{{"GET", "/v1/sessions/{session}/messages", 1},
                                        {"POST", "/v1/sessions/{session}/messages", 2},
                                        {"", "/v1/responses/{id}", 3},
                                        {"GET", "/v1/runs/{run}", 4}}};
  auto lookup = [&](const std::string& method, std::initializer_list<const char*> path) {
    HttpRequest req;
    req.method = method;
    return find_route<TestRoute>(table, req, segs(path));
  };
  auto post = lookup("POST", {"v1", "sessions", "s", "messages"});
  ASSERT_NE(post.route, nullptr);
  EXPECT_EQ(post.route->id, 2);
  EXPECT_EQ(post.params["session"], "s");
  auto put = lookup("PUT", {"v1", "sessions", "s", "messages"});
  EXPECT_EQ(put.route, nullptr);
  EXPECT_TRUE(put.path_known);  // 405
  auto any = lookup("PATCH", {"v1", "responses", "resp_1"});
  ASSERT_NE(any.route, nullptr);
  EXPECT_EQ(any.route->id, 3);
  auto unknown = lookup("GET", {"v1", "runs"});
  EXPECT_EQ(unknown.route, nullptr);
  EXPECT_FALSE(unknown.path_known);  // 404
}

}  // namespace
}  // namespace kernex::server
