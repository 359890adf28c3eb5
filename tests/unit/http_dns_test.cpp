// The HTTP client's name resolution (providers/http/src/dns_resolve.cpp) against a loopback DNS
// server (tests/support/dns_responder.hpp): a name's address reaches a real loopback HTTP server,
// NXDOMAIN, a server that never answers (the deadline), a stop while resolving, answers that are
// malformed or are no DNS message at all, UDP answers truncated (asked again over TCP), localhost
// and numeric hosts that never ask a server, and a server list that is not one.
#include <gtest/gtest.h>

#include <dirent.h>

#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "dns_responder.hpp"
#include "fake_http_server.hpp"
#include "kernex/http/client.hpp"
#include "loopback_socket.hpp"

namespace {

using kernex::ErrorCode;
using kernex::http::Client;
using kernex::http::ClientOptions;
using kernex::http::Request;
using kernex::http::Response;
using kernex::test::DnsResponder;
using kernex::test::FakeHttpServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kName = "model.kernex.test";

ClientOptions through(const DnsResponder& dns) {
  ClientOptions o;
  o.dns_servers = dns.server();
  o.backoff_base = 1ms;
  o.connect_timeout = 30s;
  o.read_timeout = 30s;
  o.total_timeout = 60s;
  o.max_retries = 0;
  o.proxy = "";  // none, whatever the environment says
  return o;
}

std::string url(const std::string& host, int port) {
  return "http://" + host + ":" + std::to_string(port) + "/v1";
}

Request get(const std::string& to, std::stop_token stop = {}) {
  return Request{"GET", to, {}, "", std::move(stop)};
}

std::size_t entries(const char* path) {
  std::size_t n = 0;
  DIR* dir = ::opendir(path);
  while (dir != nullptr && ::readdir(dir) != nullptr) ++n;
  if (dir != nullptr) ::closedir(dir);
  return n;
}

std::size_t open_descriptors() { return entries("/proc/self/fd"); }

// A GET of kName (port 9: the resolution is what is under test) through `dns`, by `connect`.
kernex::Result<Response> resolve_only(const DnsResponder& dns, std::chrono::milliseconds connect) {
  auto o = through(dns);
  o.connect_timeout = connect;
  Client client(o);
  return client.send(get(url(kName, 9)));
}

// A GET of kName through `dns`, answered 200 by a loopback HTTP server.
kernex::Result<Response> reach(const DnsResponder& dns) {
  FakeHttpServer http;
  http.push(FakeHttpServer::json(200, "{}"));
  Client client(through(dns));
  return client.send(get(url(kName, http.port())));
}

TEST(HttpDns, ANameResolvedByTheServerReachesItsAddress) {
  DnsResponder dns;
  dns.add(kName, "127.0.0.1");
  FakeHttpServer http;
  http.push(FakeHttpServer::json(200, R"({"ok":true})"));
  Client client(through(dns));
  auto r = client.send(get(url(kName, http.port())));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"ok":true})");
  EXPECT_GE(dns.udp_queries(), 1u);
  ASSERT_EQ(http.requests().size(), 1u);
  EXPECT_EQ(http.requests()[0].header("host"),
            std::string(kName) + ":" + std::to_string(http.port()));
}

// The resolution waits in the calling thread (Asio's resolver kept a thread per client for its
// blocking getaddrinfo): the process has as many threads while the client lives as before it.
TEST(HttpDns, ResolvingANameStartsNoThread) {
  DnsResponder dns;
  dns.add(kName, "127.0.0.1");
  const auto closed = kernex::test::listen_loopback();
  ::close(closed.fd);  // a port nothing listens on: no server thread either
  const std::size_t threads = entries("/proc/self/task");
  Client client(through(dns));
  auto r = client.send(get(url(kName, closed.port)));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cannot connect"), std::string::npos) << r.error().message;
  EXPECT_GE(dns.udp_queries(), 1u);
  EXPECT_EQ(entries("/proc/self/task"), threads);
}

TEST(HttpDns, AnUnknownNameIsNotFound) {
  DnsResponder dns;
  Client client(through(dns));
  auto r = client.send(get(url("nowhere.kernex.test", 9)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("connecting to nowhere.kernex.test:9: cannot resolve host: "),
            std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("not found"), std::string::npos) << r.error().message;
}

TEST(HttpDns, AServerThatNeverAnswersEndsAtTheDeadline) {
  DnsResponder dns(DnsResponder::Mode::silent);
  auto r = resolve_only(dns, 1s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("cannot resolve host: timed out"), std::string::npos)
      << r.error().message;
  EXPECT_GE(dns.udp_queries(), 1u);
}

// A stop while the query is out ends the call at once; the client resolves again afterwards (its
// connect then refused: nothing listens there), and once it is gone no descriptor it opened is
// left.
TEST(HttpDns, AStopEndsAResolutionAtOnceAndLeavesNothingOpen) {
  DnsResponder dns(DnsResponder::Mode::silent);
  dns.add(kName, "127.0.0.1");
  const auto closed = kernex::test::listen_loopback();
  ::close(closed.fd);  // a port nothing listens on
  const std::size_t before = open_descriptors();
  {
    Client client(through(dns));
    std::stop_source source;
    std::optional<kernex::Result<Response>> stopped;
    std::thread call(
        [&] { stopped = client.send(get(url(kName, closed.port), source.get_token())); });
    ASSERT_TRUE(dns.wait_queries(1, 60s));
    const auto at = Clock::now();
    source.request_stop();
    call.join();
    EXPECT_LT(Clock::now() - at, 2s) << "not the 30 s connect timeout";
    ASSERT_FALSE(*stopped);
    EXPECT_EQ(stopped->error().code, ErrorCode::Cancelled) << stopped->error().message;

    dns.set_mode(DnsResponder::Mode::answer);
    auto again = client.send(get(url(kName, closed.port)));
    ASSERT_FALSE(again);
    EXPECT_NE(again.error().message.find("cannot connect"), std::string::npos)
        << again.error().message;
  }
  EXPECT_EQ(open_descriptors(), before);
}

TEST(HttpDns, AStopRequestedBeforehandAsksNothing) {
  DnsResponder dns;
  dns.add(kName, "127.0.0.1");
  Client client(through(dns));
  std::stop_source source;
  source.request_stop();
  auto r = client.send(get(url(kName, 9), source.get_token()));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Cancelled);
  EXPECT_EQ(dns.udp_queries(), 0u);
}

TEST(HttpDns, ARecordCutShortIsATypedError) {
  DnsResponder dns(DnsResponder::Mode::malformed);
  dns.add(kName, "127.0.0.1");
  auto r = resolve_only(dns, 5s);  // c-ares may also drop the answer and wait for a better one
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("cannot resolve host: "), std::string::npos)
      << r.error().message;
}

TEST(HttpDns, BytesThatAreNoDnsMessageAreIgnoredUntilTheDeadline) {
  DnsResponder dns(DnsResponder::Mode::garbage);
  dns.add(kName, "127.0.0.1");
  auto r = resolve_only(dns, 1s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("cannot resolve host: timed out"), std::string::npos)
      << r.error().message;
}

TEST(HttpDns, ATruncatedUdpAnswerIsAskedAgainOverTcp) {
  DnsResponder dns(DnsResponder::Mode::truncate);
  dns.add(kName, "127.0.0.1");
  auto r = reach(dns);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(dns.tcp_queries(), 1u);
}

// An AAAA record for ::1 and an A record for 127.0.0.1: the server listens on IPv4 only, so the
// call reaches it whichever address comes first (one refused, the next tried).
TEST(HttpDns, BothFamiliesAreTriedInTurn) {
  DnsResponder dns;
  dns.add(kName, "::1");
  dns.add(kName, "127.0.0.1");
  auto r = reach(dns);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
}

TEST(HttpDns, LocalhostAndNumericHostsAskNoServer) {
  DnsResponder dns;
  FakeHttpServer http;
  http.push(FakeHttpServer::json(200, "{}"));
  http.push(FakeHttpServer::json(200, "{}"));
  Client client(through(dns));
  for (const char* host : {"localhost", "127.0.0.1"}) {
    auto r = client.send(get(url(host, http.port())));
    ASSERT_TRUE(r) << host << ": " << r.error().message;
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(dns.udp_queries(), 0u);
}

TEST(HttpDns, AServerListThatIsNotOneIsAConfigError) {
  DnsResponder dns;
  auto o = through(dns);
  o.dns_servers = "not a server, at all";
  Client client(o);
  auto r = client.send(get(url(kName, 9)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Config) << r.error().message;
  EXPECT_NE(r.error().message.find("dns_servers"), std::string::npos) << r.error().message;
}

}  // namespace
