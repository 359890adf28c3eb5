// HTTPS calls on run fibers (server/src/run_fiber.hpp) hold no pool thread while they wait: the
// connect, the TLS handshake, the request and the wait for the answer all park the fiber
// (kernex::wait_fd). Many calls on a pool of two threads all reach a server that answers none
// before it has them all; a stop ends a suspended TLS read at once; handshakes stalled halfway
// wait together and each ends at its deadline with a typed error; name resolution parks the fiber
// the same way.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "dns_responder.hpp"
#include "kernex/http/client.hpp"
#include "kernex/suspend.hpp"
#include "loopback_socket.hpp"
#include "run_fiber.hpp"
#include "run_pool.hpp"
#include "temp_dir.hpp"
#include "test_ca.hpp"
#include "tls_front.hpp"

namespace {

using kernex::ErrorCode;
using kernex::SuspendPoint;
using kernex::http::Client;
using kernex::http::ClientOptions;
using kernex::http::Request;
using kernex::http::Response;
using kernex::server::RunFiber;
using kernex::server::RunPool;
using kernex::test::DnsResponder;
using kernex::test::TestCa;
using kernex::test::TlsFront;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kGenerous = std::chrono::seconds(60);  // a deadlock fails, nothing else waits it out

// An HTTP server that reads each request and answers none until release(): every caller it
// counts is waiting at once. Answers echo the request body.
class HeldServer {
 public:
  HeldServer() {
    const auto listener = kernex::test::listen_loopback();
    fd_ = listener.fd;
    port_ = listener.port;
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~HeldServer() {
    release();
    ::shutdown(fd_, SHUT_RDWR);
    acceptor_.join();
    for (auto& t : workers_) t.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  bool wait_holding(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kGenerous, [&] { return holding_ >= n; });
  }
  std::size_t holding() {
    std::lock_guard lock(mutex_);
    return holding_;
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  void accept_loop() {
    while (true) {
      const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;  // shut down
      workers_.emplace_back([this, fd] {
        serve(fd);
        ::close(fd);
      });
    }
  }
  // One request (head and a Content-Length body), held, then answered.
  void serve(int fd) {
    std::string in;
    char buf[4096];
    std::size_t head_end;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos ||
           in.size() < head_end + 4 + content_length(in)) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<std::size_t>(n));
    }
    const std::string body = in.substr(head_end + 4);
    {
      std::unique_lock lock(mutex_);
      ++holding_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return released_; });
    }
    const std::string out =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  }
  static std::size_t content_length(const std::string& in) {
    const auto at = in.find("Content-Length: ");
    return at == std::string::npos ? 0 : std::stoul(in.substr(at + 16));
  }

  int fd_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t holding_ = 0;
  bool released_ = false;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

// Releases the server's held calls when a test ends early: declared after the pool, it goes
// first, so the pool's end does not wait on calls that would be held forever.
struct Releases {
  HeldServer& server;
  ~Releases() { server.release(); }
};

RunPool::Options pool_of(std::size_t threads) {
  RunPool::Options o;
  o.max_threads = threads;
  o.warm = threads;
  return o;
}

ClientOptions options() {
  ClientOptions o;
  o.backoff_base = 1ms;
  o.connect_timeout = 30s;
  o.read_timeout = 60s;
  o.total_timeout = 60s;
  o.max_retries = 0;
  return o;
}

// `calls` HTTPS POSTs, each on its own fiber of a pool of `threads`, inside a SuspendPoint as the
// kernel's model call is. results[i] is call i's outcome once `ended` reached calls.
struct FiberCalls {
  std::vector<std::optional<kernex::Result<Response>>> results;
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t ended = 0;

  void start(RunPool& pool, const std::string& url, std::size_t calls, ClientOptions o,
             std::stop_token stop = {}) {
    results.resize(calls);
    for (std::size_t i = 0; i < calls; ++i) {
      const bool started = RunFiber::start(
          [this, i, url, o, stop] {
            Client client(o);
            Request r{"POST", url, {}, "call " + std::to_string(i), stop};
            auto result = [&] {
              const SuspendPoint may_suspend;
              return client.send(r);
            }();
            std::lock_guard lock(mutex);
            results[i] = std::move(result);
            ++ended;
            changed.notify_all();
          },
          256u << 10,
          [&pool](std::function<void()> slice, bool resume) {
            pool.submit(std::move(slice), resume);
          });
      ASSERT_TRUE(started);
    }
  }
  bool wait_ended(std::size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, kGenerous, [&] { return ended >= n; });
  }
};

class ServeFiberHttps : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("SSL_CERT_FILE", ca.write_pem((dir / "ca.pem").string()).c_str(), 1);
  }
  kernex::testing::TempDir dir;
  TestCa ca;
};

// Two threads, 30 calls: a call holding its thread through the handshake or the wait for the
// answer would leave at most two at the server, which answers none before it has all 30.
TEST_F(ServeFiberHttps, ThirtyCallsWaitingOnTheirServerHoldNoneOfTwoThreads) {
  constexpr std::size_t kCalls = 30;
  HeldServer backend;
  TlsFront front(ca.issue("IP:127.0.0.1"), backend.port());
  FiberCalls calls;
  {
    RunPool pool(pool_of(2));
    const Releases on_failure{backend};  // or the pool would wait for held calls forever
    calls.start(pool, front.url("/v1/chat"), kCalls, options());
    ASSERT_TRUE(backend.wait_holding(kCalls)) << backend.holding() << " of 30 calls at once";
    backend.release();
    ASSERT_TRUE(calls.wait_ended(kCalls));
  }
  EXPECT_EQ(front.handshakes(), kCalls);
  for (std::size_t i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(calls.results[i].has_value());
    const auto& r = *calls.results[i];
    ASSERT_TRUE(r) << i << ": " << r.error().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "call " + std::to_string(i));
  }
}

// One thread, its fiber suspended in a TLS read: the stop shuts the socket down, which wakes it.
TEST_F(ServeFiberHttps, AStopEndsASuspendedTlsReadAtOnce) {
  HeldServer backend;
  TlsFront front(ca.issue("IP:127.0.0.1"), backend.port());
  std::stop_source source;
  FiberCalls calls;
  {
    RunPool pool(pool_of(1));
    const Releases on_failure{backend};
    calls.start(pool, front.url("/v1"), 1, options(), source.get_token());
    ASSERT_TRUE(backend.wait_holding(1));
    const auto stopped = Clock::now();
    source.request_stop();
    ASSERT_TRUE(calls.wait_ended(1));
    EXPECT_LT(Clock::now() - stopped, 2s) << "not the 60 s read timeout";
  }
  const auto& r = *calls.results[0];
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Cancelled) << r.error().message;
}

// Ten handshakes stalled halfway on one thread: all wait at once (none holds the thread), then
// each ends at its connect timeout.
TEST_F(ServeFiberHttps, HandshakesStalledHalfwayWaitTogetherAndTimeOut) {
  constexpr std::size_t kCalls = 10;
  TlsFront front(ca.issue("IP:127.0.0.1"), 0, TlsFront::Mode::stall_mid_handshake);
  auto o = options();
  o.connect_timeout = 3s;  // time for all ten to begin, on a busy machine
  FiberCalls calls;
  {
    RunPool pool(pool_of(1));
    calls.start(pool, front.url("/v1"), kCalls, o);
    EXPECT_TRUE(front.wait_stalled(kCalls, kGenerous)) << front.most_stalled() << " at once";
    ASSERT_TRUE(calls.wait_ended(kCalls));
  }
  for (std::size_t i = 0; i < kCalls; ++i) {
    const auto& r = *calls.results[i];
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::Provider);
    EXPECT_NE(r.error().message.find("TLS handshake failed: timed out"), std::string::npos)
        << r.error().message;
  }
}

// One thread, twenty calls to a host name: the DNS server answers none before queries came from all
// twenty clients' sockets, so a resolution that held the thread would leave it at one.
TEST_F(ServeFiberHttps, TwentyResolutionsWaitingOnTheirDnsServerHoldNoneOfOneThread) {
  constexpr std::size_t kCalls = 20;
  HeldServer backend;
  backend.release();  // answers at once: the wait under test is the DNS one
  DnsResponder dns;
  dns.add("model.kernex.test", "127.0.0.1");
  dns.hold_until_sources(kCalls);
  auto o = options();
  o.dns_servers = dns.server();
  o.proxy = "";
  FiberCalls calls;
  {
    RunPool pool(pool_of(1));
    calls.start(pool, "http://model.kernex.test:" + std::to_string(backend.port()) + "/v1", kCalls,
                o);
    EXPECT_TRUE(dns.wait_sources(kCalls, kGenerous)) << dns.sources() << " of 20 at once";
    ASSERT_TRUE(calls.wait_ended(kCalls));
  }
  for (std::size_t i = 0; i < kCalls; ++i) {
    const auto& r = *calls.results[i];
    ASSERT_TRUE(r) << i << ": " << r.error().message;
    EXPECT_EQ(r->body, "call " + std::to_string(i));
  }
}

}  // namespace
