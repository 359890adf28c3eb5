// The provider HTTP client over TLS and its connect, against loopback servers: a TLS front
// (tls_front.hpp) with certificates from a CA made for the test and trusted through
// SSL_CERT_FILE. The server is verified (chain and name) and a refusal is final; a handshake that
// stalls halfway, a connect whose SYN goes unanswered and a TLS read that waits all end at their
// deadline or at once on a stop request.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stop_token>
#include <thread>

#include "fake_http_server.hpp"
#include "kernex/http/client.hpp"
#include "loopback_socket.hpp"
#include "temp_dir.hpp"
#include "test_ca.hpp"
#include "tls_front.hpp"

namespace {

using kernex::ErrorCode;
using kernex::http::Client;
using kernex::http::ClientOptions;
using kernex::http::Request;
using kernex::test::FakeHttpServer;
using kernex::test::TestCa;
using kernex::test::TlsFront;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::duration<double, std::milli>;
using namespace std::chrono_literals;

ClientOptions fast() {
  ClientOptions o;
  o.backoff_base = 1ms;
  o.connect_timeout = 5s;
  o.read_timeout = 10s;
  o.total_timeout = 20s;
  return o;
}

Request post(const std::string& url, std::string body = R"({"q":1})") {
  return Request{"POST", url, {{"Content-Type", "application/json"}}, std::move(body), {}};
}

// A CA the process trusts (the client reads SSL_CERT_FILE on its first HTTPS connection).
class HttpTls : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("SSL_CERT_FILE", ca.write_pem((dir / "ca.pem").string()).c_str(), 1);
  }
  kernex::testing::TempDir dir;
  TestCa ca;
};

// Fails the test unless `r` is a refused handshake (final: one attempt), and says why.
void expect_refused(const kernex::Result<kernex::http::Response>& r, const TlsFront& front) {
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("TLS handshake failed"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(front.connections(), 1u) << "a certificate that does not verify is not retried";
  EXPECT_EQ(front.handshakes(), 0u);
}

TEST_F(HttpTls, VerifiesTheServerAndReusesTheConnection) {
  FakeHttpServer backend;
  backend.push(FakeHttpServer::json(200, R"({"n":1})"));
  backend.push(FakeHttpServer::json(200, R"({"n":2})"));
  TlsFront front(ca.issue("IP:127.0.0.1"), backend.port());
  Client client(fast());
  auto first = client.send(post(front.url("/v1/chat"), R"({"a":1})"));
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, R"({"n":1})");
  auto second = client.send(post(front.url("/v1/chat"), R"({"a":2})"));
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->body, R"({"n":2})");
  EXPECT_EQ(front.connections(), 1u) << "kept alive";
  ASSERT_EQ(backend.requests().size(), 2u);
  EXPECT_EQ(backend.requests()[1].body, R"({"a":2})");
  EXPECT_EQ(backend.requests()[1].target, "/v1/chat");
}

// "localhost" is a name: sent as SNI and checked against the certificate's DNS name. It may
// resolve to ::1 first, where nothing listens: the connect goes on to 127.0.0.1.
TEST_F(HttpTls, StreamsFromAServerNamedByItsHostName) {
  FakeHttpServer backend;
  backend.push(FakeHttpServer::sse({"data: {\"a\":1}\n\n", "data: [DONE]\n\n"}));
  TlsFront front(ca.issue("DNS:localhost"), backend.port());
  Client client(fast());
  std::string got;
  auto r = client.stream(post("https://localhost:" + std::to_string(front.port()) + "/v1"),
                         [&](std::string_view chunk) {
                           got += chunk;
                           return true;
                         });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(got, "data: {\"a\":1}\n\ndata: [DONE]\n\n");
}

TEST_F(HttpTls, RefusesACertificateFromAnUntrustedCa) {
  FakeHttpServer backend;
  TestCa stranger("another CA");
  TlsFront front(stranger.issue("IP:127.0.0.1"), backend.port());
  Client client(fast());
  expect_refused(client.send(post(front.url("/v1"))), front);
  EXPECT_EQ(backend.requests().size(), 0u);
}

TEST_F(HttpTls, RefusesACertificateForAnotherHost) {
  FakeHttpServer backend;
  TlsFront front(ca.issue("DNS:other.example,IP:127.0.0.2"), backend.port());
  Client client(fast());
  expect_refused(client.send(post(front.url("/v1"))), front);
  EXPECT_EQ(backend.requests().size(), 0u);
}

// The server sends half of its first flight and then nothing: the handshake ends at the connect
// timeout with a typed error, once (a timeout is retried, so no retries here).
TEST_F(HttpTls, AHandshakeThatStallsHalfwayTimesOut) {
  TlsFront front(ca.issue("IP:127.0.0.1"), 0, TlsFront::Mode::stall_mid_handshake);
  auto options = fast();
  options.connect_timeout = 300ms;
  options.max_retries = 0;
  Client client(options);
  const auto start = Clock::now();
  auto r = client.send(post(front.url("/v1")));
  const Ms took = Clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_NE(r.error().message.find("TLS handshake failed: timed out"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(front.wait_stalled(1, 0ms)) << "the client got half a flight, not nothing";
  EXPECT_GE(took.count(), 290.0);
  EXPECT_LT(took.count(), 5000.0);
}

TEST_F(HttpTls, AStopEndsAWaitingTlsReadAtOnce) {
  FakeHttpServer backend;
  backend.push(FakeHttpServer::stall());
  TlsFront front(ca.issue("IP:127.0.0.1"), backend.port());
  Client client(fast());
  std::stop_source source;
  Request request = post(front.url("/v1"));
  request.stop = source.get_token();
  std::atomic<Clock::time_point> stopped_at{};
  std::thread canceller([&] {
    EXPECT_TRUE(backend.wait_for_requests(1));
    stopped_at = Clock::now();
    source.request_stop();
  });
  auto r = client.send(request);
  const Ms after_stop = Clock::now() - stopped_at.load();
  canceller.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Cancelled) << r.error().message;
  EXPECT_LT(after_stop.count(), 1000.0) << "not the 10 s read timeout";
  EXPECT_EQ(backend.requests().size(), 1u) << "not retried after the stop";
}

// A listener whose accept queue is full drops further SYNs: the connect waits for an answer that
// never comes, until its deadline or a stop.
class FullListener {
 public:
  FullListener() {
    const auto listener = kernex::test::listen_loopback(0);
    fd_ = listener.fd;
    port_ = listener.port;
    filler_ = kernex::test::connect_loopback(port_);  // queued, never accepted: the queue is full
    if (filler_ < 0) throw std::runtime_error("cannot fill the accept queue");
  }
  ~FullListener() {
    ::close(filler_);
    ::close(fd_);
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_) + "/v1"; }

 private:
  int fd_ = -1;
  int filler_ = -1;
  int port_ = 0;
};

TEST_F(HttpTls, AConnectWithoutAnswerEndsAtItsDeadlineOrAtOnceOnAStop) {
  FullListener listener;
  auto options = fast();
  options.connect_timeout = 300ms;
  options.max_retries = 0;
  Client client(options);
  const auto start = Clock::now();
  auto timed_out = client.send(post(listener.url()));
  const Ms took = Clock::now() - start;
  ASSERT_FALSE(timed_out);
  EXPECT_NE(timed_out.error().message.find("cannot connect: timed out"), std::string::npos)
      << timed_out.error().message;
  EXPECT_GE(took.count(), 290.0);
  EXPECT_LT(took.count(), 5000.0);

  options.connect_timeout = 10s;
  Client patient(options);
  std::stop_source source;
  Request request = post(listener.url());
  request.stop = source.get_token();
  std::thread canceller([&] {
    std::this_thread::sleep_for(
        200ms);  // no event says "the SYN went unanswered"; any time will do
    source.request_stop();
  });
  const auto asked = Clock::now();
  auto cancelled = patient.send(request);
  const Ms waited = Clock::now() - asked;
  canceller.join();
  ASSERT_FALSE(cancelled);
  EXPECT_EQ(cancelled.error().code, ErrorCode::Cancelled) << cancelled.error().message;
  EXPECT_LT(waited.count(), 5000.0) << "not the 10 s connect timeout";
}

}  // namespace
