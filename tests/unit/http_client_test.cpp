// The provider HTTP client against a loopback fake server: keep-alive, chunked bodies, retries
// and their limits, timeouts, size caps, CONNECT proxies and streaming.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <latch>
#include <stop_token>
#include <thread>

#include "fake_http_server.hpp"
#include "kernex/http/client.hpp"

namespace {

using kernex::http::Client;
using kernex::http::ClientOptions;
using kernex::http::Request;
using kernex::http::Url;
using kernex::test::FakeHttpServer;
using namespace std::chrono_literals;

ClientOptions fast() {
  ClientOptions o;
  o.backoff_base = 1ms;
  o.connect_timeout = 2s;
  o.read_timeout = 5s;
  o.total_timeout = 10s;
  return o;
}

Request post(const std::string& url, std::string body = R"({"q":1})") {
  return Request{"POST", url, {{"Content-Type", "application/json"}}, std::move(body), {}};
}

TEST(Url, ParsesSchemesPortsAndTargets) {
  auto u = Url::parse("https://API.example.com/v1?x=1#frag");
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "api.example.com");
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->target, "/v1?x=1");
  auto v6 = Url::parse("http://[::1]:8080");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->target, "/");
  EXPECT_EQ(v6->authority(), "[::1]:8080");
  EXPECT_TRUE(v6->is_loopback());
  EXPECT_TRUE(Url::parse("http://localhost:1")->is_loopback());
  EXPECT_TRUE(Url::parse("http://127.0.0.2")->is_loopback());
  EXPECT_FALSE(Url::parse("http://10.0.0.1")->is_loopback());
  EXPECT_FALSE(Url::parse("ftp://x").has_value());
  EXPECT_FALSE(Url::parse("api.example.com/v1").has_value());
  EXPECT_FALSE(Url::parse("https://user:pw@host/").has_value());
  EXPECT_FALSE(Url::parse("https://host:99999/").has_value());
  EXPECT_FALSE(Url::parse("https://host/a b").has_value());
}

TEST(RetryAfter, IntegerSecondsOnly) {
  EXPECT_EQ(kernex::http::parse_retry_after("5"), std::chrono::milliseconds(5000));
  EXPECT_EQ(kernex::http::parse_retry_after(" 86400 "), std::chrono::milliseconds(86'400'000));
  EXPECT_FALSE(kernex::http::parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"));
  EXPECT_FALSE(kernex::http::parse_retry_after("-1"));
  EXPECT_FALSE(kernex::http::parse_retry_after(""));
}

TEST(NoProxy, MatchesHostsAndDomains) {
  EXPECT_TRUE(kernex::http::no_proxy_matches("*", "api.openai.com"));
  EXPECT_TRUE(kernex::http::no_proxy_matches("foo.com, .openai.com", "api.openai.com"));
  EXPECT_TRUE(kernex::http::no_proxy_matches("openai.com", "api.openai.com"));
  EXPECT_TRUE(kernex::http::no_proxy_matches("api.openai.com:443", "API.openai.com"));
  EXPECT_FALSE(kernex::http::no_proxy_matches("notopenai.com", "openai.com.evil"));
  EXPECT_FALSE(kernex::http::no_proxy_matches("penai.com", "api.openai.com"));
  EXPECT_FALSE(kernex::http::no_proxy_matches("", "api.openai.com"));
}

TEST(HttpClient, PostsAndReadsAResponse) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, R"({"ok":true})"));
  Client client(fast());
  auto r = client.send(post(server.url("/v1/chat?x=1")));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"ok":true})");
  EXPECT_EQ(r->header("content-type"), "application/json");
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].target, "/v1/chat?x=1");
  EXPECT_EQ(reqs[0].body, R"({"q":1})");
  EXPECT_EQ(reqs[0].header("host"), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(reqs[0].header("content-type"), "application/json");
}

TEST(HttpClient, ReusesTheConnection) {
  FakeHttpServer server;
  for (int i = 0; i < 3; ++i) server.push(FakeHttpServer::json(200, "{}"));
  Client client(fast());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.send(post(server.url("/"))));
  EXPECT_EQ(server.connections(), 1u);
  EXPECT_EQ(client.stats().connections_opened, 1u);
}

TEST(HttpClient, ReconnectsWhenAKeptAliveConnectionWasClosed) {
  FakeHttpServer server;
  // The server closes after answering but does not say so: the pooled connection is dead.
  auto first = FakeHttpServer::json(200, "{\"n\":1}");
  first.close = true;
  server.push(first);
  server.push(FakeHttpServer::json(200, "{\"n\":2}"));
  ClientOptions o = fast();
  o.max_retries = 0;
  Client client(o);
  ASSERT_TRUE(client.send(post(server.url("/"))));
  auto second = client.send(post(server.url("/")));
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->body, "{\"n\":2}");
  EXPECT_EQ(server.connections(), 2u);
}

TEST(HttpClient, ReadsChunkedBodies) {
  FakeHttpServer server;
  server.push(FakeHttpServer::chunked(200, {"{\"a\":", "1", "}"}, "application/json"));
  Client client(fast());
  auto r = client.send(post(server.url("/")));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "{\"a\":1}");
}

TEST(HttpClient, RetriesServerErrorsThenSucceeds) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(500, "{}"));
  server.push(FakeHttpServer::json(502, "{}"));
  server.push(FakeHttpServer::json(200, "{\"done\":1}"));
  Client client(fast());
  auto r = client.send(post(server.url("/")));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(client.stats().attempts, 3u);
}

TEST(HttpClient, GivesUpAfterFourAttemptsWithTheLastResponse) {
  FakeHttpServer server;
  for (int i = 0; i < 5; ++i) server.push(FakeHttpServer::json(503, "{\"error\":\"busy\"}"));
  Client client(fast());
  auto r = client.send(post(server.url("/")));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "{\"error\":\"busy\"}");
  EXPECT_EQ(server.requests().size(), 4u);
}

TEST(HttpClient, DoesNotRetryClientErrors) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(400, "{}"));
  Client client(fast());
  auto r = client.send(post(server.url("/")));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(HttpClient, HonoursRetryAfterUpToTheCap) {
  FakeHttpServer server;
  server.push(FakeHttpServer::response(429, "{}", "application/json", {{"Retry-After", "30"}}));
  server.push(FakeHttpServer::json(200, "{}"));
  ClientOptions o = fast();
  o.retry_after_cap = 300ms;
  Client client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.send(post(server.url("/")));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(elapsed, 300ms);  // waited the capped Retry-After, not the 1 ms backoff
  EXPECT_LT(elapsed, 5s);
}

TEST(HttpClient, ReadTimeoutOnAStalledServer) {
  FakeHttpServer server;
  server.push(FakeHttpServer::stall());
  ClientOptions o = fast();
  o.read_timeout = 200ms;
  o.max_retries = 0;
  Client client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.send(post(server.url("/")));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, kernex::ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("timed out"), std::string::npos) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// Sends a POST to a server that accepts and never answers; the result and how long it took.
std::pair<kernex::Result<kernex::http::Response>, std::chrono::steady_clock::duration>
send_to_a_stalled_server(const ClientOptions& o, FakeHttpServer& server) {
  for (int i = 0; i < 4; ++i) server.push(FakeHttpServer::stall());
  Client client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.send(post(server.url("/")));
  return {std::move(r), std::chrono::steady_clock::now() - start};
}

TEST(HttpClient, TotalTimeoutBoundsRetries) {
  FakeHttpServer server;
  ClientOptions o = fast();
  o.read_timeout = 10s;
  o.total_timeout = 300ms;
  auto [r, elapsed] = send_to_a_stalled_server(o, server);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("timed out"), std::string::npos) << r.error().message;
  EXPECT_LT(elapsed, 3s);
}

// A read timeout is one attempt: the server has the request, so it is not sent again. The old
// client retried it, so read_timeout 2 s ran ~15 s with the default retries and backoff.
TEST(HttpClient, ReadTimeoutIsOneAttemptNotRetried) {
  FakeHttpServer server;
  ClientOptions o = fast();
  o.read_timeout = 300ms;
  o.total_timeout = 60s;
  o.max_retries = 3;
  o.backoff_base = 1s;  // retried, this would take 4 × 0.3 + 1 + 2 + 4 s
  auto [r, elapsed] = send_to_a_stalled_server(o, server);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("read timeout of 300 ms"), std::string::npos)
      << r.error().message;
  EXPECT_LT(elapsed, 3s);
  EXPECT_EQ(server.requests().size(), 1u);
}

// Durations any plugin may put in ClientOptions: the biggest ones must neither overflow
// std::chrono (UBSan stops the test) nor stretch the request past its total timeout.
TEST(HttpClient, HugeDurationsSaturateInsteadOfOverflowing) {
  using ms = std::chrono::milliseconds;
  {
    FakeHttpServer server;
    ClientOptions o = fast();
    o.read_timeout = ms::max();
    o.connect_timeout = ms::max();
    o.backoff_base = ms::max();
    o.total_timeout = 400ms;
    auto [r, elapsed] = send_to_a_stalled_server(o, server);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("total timeout of 400 ms"), std::string::npos)
        << r.error().message;
    EXPECT_LT(elapsed, 3s);
  }
  int port = 0;
  {
    FakeHttpServer gone;
    port = gone.port();
  }
  ClientOptions o = fast();
  o.total_timeout = ms::max();
  o.backoff_base = ms::max();
  o.retry_after_cap = ms::max();
  o.max_retries = 10;
  Client client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.send(post("http://127.0.0.1:" + std::to_string(port) + "/"));
  ASSERT_FALSE(r);
  // The first backoff wait (saturated at 30 days) cannot fit: one attempt, no endless sleep.
  EXPECT_NE(r.error().message.find("1 attempt(s)"), std::string::npos) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// Nothing listens there: said at once, not after the default 1 + 2 + 4 s of backoff.
TEST(HttpClient, ConnectionRefusedIsReportedAtOnce) {
  int port = 0;
  {
    FakeHttpServer gone;
    port = gone.port();
  }
  ClientOptions o = fast();
  o.backoff_base = ClientOptions{}.backoff_base;
  Client client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.send(post("http://127.0.0.1:" + std::to_string(port) + "/"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cannot connect"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("1 attempt(s)"), std::string::npos) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, o.backoff_base);
}

TEST(HttpClient, CapsTheResponseSize) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(200, std::string(5000, 'x')));
  ClientOptions o = fast();
  o.max_response_bytes = 1000;
  Client client(o);
  auto r = client.send(post(server.url("/")));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("larger than 1000 bytes"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(HttpClient, RefusesHeaderValuesWithLineBreaks) {
  FakeHttpServer server;
  Client client(fast());
  Request req = post(server.url("/"));
  req.headers.emplace_back("x-api-key", "secret\r\nX-Evil: 1");
  auto r = client.send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.find("secret"), std::string::npos);
  EXPECT_TRUE(server.requests().empty());
}

// The body buffer starts small and grows while reads fill it: bodies of every size around its
// steps (2, 4, 8, 16 KiB) and far beyond arrive whole, in one call and then another on the same
// client (whose buffer has grown), read at once and streamed.
TEST(HttpClient, BodiesOfEverySizeArriveWholeThroughTheGrowingBuffer) {
  std::vector<std::string> bodies;
  for (std::size_t size : {1u, 2047u, 2048u, 2049u, 4096u, 8193u, 16384u, 16385u, 300000u}) {
    std::string body(size, 'x');
    for (std::size_t i = 0; i < size; ++i) body[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);
    bodies.push_back(std::move(body));
  }
  FakeHttpServer server;
  for (const auto& b : bodies) server.push(FakeHttpServer::json(200, b));
  for (const auto& b : bodies) {
    std::vector<std::string> parts{b.substr(b.size() / 3)};  // an empty chunk would end the body
    if (b.size() >= 3) parts.insert(parts.begin(), b.substr(0, b.size() / 3));
    server.push(FakeHttpServer::chunked(200, parts, "text/plain"));
  }
  for (const auto& b : bodies) server.push(FakeHttpServer::sse({b}));
  Client client(fast());
  for (const auto& b : bodies) {
    auto r = client.send(post(server.url("/")));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->body, b) << "a body of " << b.size() << " bytes";
  }
  for (const auto& b : bodies) {
    auto r = client.send(post(server.url("/")));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->body, b) << "a chunked body of " << b.size() << " bytes";
  }
  for (const auto& b : bodies) {
    std::string streamed;
    auto r = client.stream(post(server.url("/")), [&](std::string_view c) {
      streamed += c;
      return true;
    });
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(streamed, b) << "a streamed body of " << b.size() << " bytes";
  }
}

TEST(HttpClient, StreamsTheBodyAsItArrives) {
  FakeHttpServer server;
  server.push(FakeHttpServer::sse({"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"}));
  Client client(fast());
  std::vector<std::string> chunks;
  auto r = client.stream(post(server.url("/")), [&](std::string_view c) {
    chunks.emplace_back(c);
    return true;
  });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->body.empty());
  std::string all;
  for (const auto& c : chunks) all += c;
  EXPECT_EQ(all, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
}

TEST(HttpClient, StreamRetriesBeforeTheFirstByteOnly) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(503, "{}"));
  server.push(FakeHttpServer::sse({"data: a\n\n", "data: b"}, /*cut=*/true));
  server.push(FakeHttpServer::sse({"data: never\n\n"}));
  Client client(fast());
  std::string got;
  auto r = client.stream(post(server.url("/")), [&](std::string_view c) {
    got += c;
    return true;
  });
  ASSERT_FALSE(r);  // cut mid-stream: reported, not retried
  EXPECT_NE(r.error().message.find("cut mid-response"), std::string::npos) << r.error().message;
  EXPECT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(got.substr(0, 9), "data: a\n\n");
}

TEST(HttpClient, StreamReturnsErrorBodiesWithoutCallingTheHandler) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(401, R"({"error":"bad key"})"));
  Client client(fast());
  bool called = false;
  auto r = client.stream(post(server.url("/")), [&](std::string_view) {
    called = true;
    return true;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, R"({"error":"bad key"})");
  EXPECT_FALSE(called);
}

TEST(HttpClient, TunnelsThroughAConnectProxy) {
  FakeHttpServer proxy;
  proxy.act_as_proxy();
  proxy.push(FakeHttpServer::json(200, "{\"via\":\"proxy\"}"));
  ClientOptions o = fast();
  o.proxy = "http://user:pw@127.0.0.1:" + std::to_string(proxy.port());
  Client client(o);
  auto r = client.send(post("http://api.example.invalid:8443/v1/x"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "{\"via\":\"proxy\"}");
  const auto reqs = proxy.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "CONNECT");
  EXPECT_EQ(reqs[0].target, "api.example.invalid:8443");
  EXPECT_EQ(reqs[0].header("proxy-authorization"), "Basic dXNlcjpwdw==");
  EXPECT_EQ(reqs[1].target, "/v1/x");
  EXPECT_EQ(reqs[1].header("host"), "api.example.invalid:8443");
  EXPECT_EQ(reqs[1].header("proxy-authorization"), "");  // proxy credentials stay on CONNECT
}

TEST(HttpClient, ReportsAProxyThatRefusesConnect) {
  FakeHttpServer proxy;
  proxy.push(FakeHttpServer::json(403, "{}"));
  ClientOptions o = fast();
  o.proxy = "127.0.0.1:" + std::to_string(proxy.port());
  Client client(o);
  auto r = client.send(post("https://api.example.invalid/v1"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("refused CONNECT"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("403"), std::string::npos);
}

TEST(HttpClient, HttpsToAPlainServerFailsTheHandshake) {
  FakeHttpServer server;
  server.push(FakeHttpServer::raw("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", true));
  ClientOptions o = fast();
  o.max_retries = 0;
  o.connect_timeout = 1s;
  Client client(o);
  auto r = client.send(post("https://127.0.0.1:" + std::to_string(server.port()) + "/"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("TLS handshake failed"), std::string::npos) << r.error().message;
}

// ---- Request::stop ------------------------------------------------------------------------

using Ms = std::chrono::duration<double, std::milli>;

// Sends `request` with a stop token that another thread fires once `in_flight` returned (it
// waits for the server to see the request); returns the result and how long the call went on
// after the stop request.
template <class Call, class InFlight>
std::pair<kernex::Result<kernex::http::Response>, Ms> cancel_in_flight(Request request, Call call,
                                                                       InFlight in_flight) {
  std::stop_source source;
  request.stop = source.get_token();
  std::atomic<std::chrono::steady_clock::time_point> stopped_at{};
  std::thread canceller([&] {
    in_flight();
    stopped_at = std::chrono::steady_clock::now();
    source.request_stop();
  });
  auto result = call(request);
  const auto returned = std::chrono::steady_clock::now();
  canceller.join();
  return {std::move(result), Ms(returned - stopped_at.load())};
}

TEST(HttpClientStop, AbortsAStalledRequestAtOnceWithoutRetrying) {
  FakeHttpServer server;
  server.push(FakeHttpServer::stall());
  Client client(fast());
  auto [result, after_stop] = cancel_in_flight(
      post(server.url("/v1")), [&](const Request& r) { return client.send(r); },
      [&] { ASSERT_TRUE(server.wait_for_requests(1)); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, kernex::ErrorCode::Cancelled) << result.error().message;
  EXPECT_LT(after_stop.count(), 50.0);
  std::printf("[ measured ] stalled plain request returned %.2f ms after the stop\n",
              after_stop.count());
  EXPECT_EQ(server.requests().size(), 1u);  // no retry after the stop
}

TEST(HttpClientStop, AbortsAStreamThatStalledMidBody) {
  FakeHttpServer server;
  auto reply = FakeHttpServer::sse({"data: {\"a\":1}\n\n"});
  reply.parts.pop_back();  // no terminating chunk: the stream stays open
  reply.stall = true;
  server.push(reply);
  Client client(fast());
  std::latch first_chunk(1);
  std::string got;
  auto [result, after_stop] = cancel_in_flight(
      post(server.url("/v1")),
      [&](const Request& r) {
        return client.stream(r, [&](std::string_view chunk) {
          got += chunk;
          first_chunk.count_down();
          return true;
        });
      },
      [&] { first_chunk.wait(); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, kernex::ErrorCode::Cancelled) << result.error().message;
  EXPECT_EQ(got, "data: {\"a\":1}\n\n");
  EXPECT_LT(after_stop.count(), 50.0);
  std::printf("[ measured ] stalled stream returned %.2f ms after the stop\n", after_stop.count());
}

TEST(HttpClientStop, AbortsATlsHandshakeThatNeverAnswers) {
  FakeHttpServer server;  // reads the ClientHello as a request head that never ends
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port()) + "/v1";
  auto options = fast();
  options.max_retries = 0;
  Client client(options);
  // The first HTTPS request reads the CA store (not interruptible, ~0.2 s under ASan); the test
  // measures the handshake wait, so a failed handshake loads it first.
  server.push(FakeHttpServer::raw("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", true));
  ASSERT_FALSE(client.send(post(url)));
  auto [result, after_stop] = cancel_in_flight(
      post(url), [&](const Request& r) { return client.send(r); },
      [&] {
        // The async (TLS) path: wait until the client connected, bounded.
        const auto limit = std::chrono::steady_clock::now() + 10s;
        while (server.connections() < 2 && std::chrono::steady_clock::now() < limit)
          std::this_thread::yield();
      });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, kernex::ErrorCode::Cancelled) << result.error().message;
  EXPECT_LT(after_stop.count(), 50.0);
  std::printf("[ measured ] TLS handshake returned %.2f ms after the stop\n", after_stop.count());
  EXPECT_EQ(server.connections(), 2u);
}

TEST(HttpClientStop, EndsTheBackoffWaitBetweenRetries) {
  FakeHttpServer server;
  server.push(FakeHttpServer::json(503, "{}"));
  auto options = fast();
  options.backoff_base = 10s;
  options.total_timeout = 60s;
  Client client(options);
  auto [result, after_stop] = cancel_in_flight(
      post(server.url("/v1")), [&](const Request& r) { return client.send(r); },
      [&] { ASSERT_TRUE(server.wait_for_requests(1)); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, kernex::ErrorCode::Cancelled);
  EXPECT_LT(after_stop.count(), 50.0);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(HttpClientStop, AStopRequestedBeforehandSendsNothing) {
  FakeHttpServer server;
  std::stop_source source;
  source.request_stop();
  Request request = post(server.url("/v1"));
  request.stop = source.get_token();
  Client client(fast());
  auto result = client.send(request);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, kernex::ErrorCode::Cancelled);
  EXPECT_EQ(server.connections(), 0u);
}

}  // namespace
