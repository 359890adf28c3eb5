// The HTTP client's TCP connect on a fiber (providers/http/src/tcp_connect.hpp): a peer on this
// host has answered the handshake by the time connect() returns, so the connect completes (or is
// refused) without a suspension; a peer that has not answered yet is waited for through the
// fiber's suspender, by the deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <vector>

#include "kernex/suspend.hpp"
#include "tcp_connect.hpp"

namespace {

using kernex::http::detail::Clock;
using kernex::http::detail::tcp_connect;

// Counts suspensions; each one blocks this thread until its resume is called (by the epoll
// thread of wait_fd), as a fiber's would be continued elsewhere.
class CountingSuspender final : public kernex::Suspender {
 public:
  void suspend(const std::function<void(Resume)>& arm) override {
    ++suspends;
    std::mutex m;
    std::condition_variable cv;
    bool resumed = false;
    arm([&] {
      std::lock_guard lock(m);
      resumed = true;
      cv.notify_all();
    });
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return resumed; });
  }
  int suspends = 0;
};

// Installs the suspender on this thread and opens a SuspendPoint, as a run's model call does.
class OnAFiber {
 public:
  OnAFiber() : outer_(kernex::set_current_suspender(&suspender)) {}
  ~OnAFiber() {
    point_.reset();
    kernex::set_current_suspender(outer_);
  }
  void open() { point_.emplace(); }
  CountingSuspender suspender;

 private:
  kernex::Suspender* outer_;
  std::optional<kernex::SuspendPoint> point_;
};

struct Listener {
  int fd = -1;
  sockaddr_in address{};
  explicit Listener(int backlog) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        ::listen(fd, backlog) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
      ADD_FAILURE() << "no loopback listener: " << errno;
  }
  ~Listener() { ::close(fd); }
  const sockaddr* at() const { return reinterpret_cast<const sockaddr*>(&address); }
};

TEST(HttpTcpConnect, ALoopbackPeerIsConnectedWithoutASuspension) {
  Listener peer(16);
  OnAFiber fiber;
  fiber.open();
  // A busy machine may defer the handshake to ksoftirqd: one of five connects answered at once.
  kernex::http::detail::Connected made;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int before = fiber.suspender.suspends;
    made = tcp_connect(peer.at(), sizeof peer.address, Clock::now() + std::chrono::seconds(10), {});
    ASSERT_GE(made.fd, 0) << made.error;
    if (fiber.suspender.suspends == before) break;
    ::close(made.fd);
    made.fd = -1;
    const int taken = ::accept4(peer.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (taken >= 0) ::close(taken);
  }
  ASSERT_GE(made.fd, 0) << "every one of five loopback connects suspended";
  const int accepted = ::accept4(peer.fd, nullptr, nullptr, SOCK_CLOEXEC);
  EXPECT_GE(accepted, 0) << "the connection is the listener's";
  const char byte = 'x';
  EXPECT_EQ(::send(made.fd, &byte, 1, MSG_NOSIGNAL), 1);
  char got = 0;
  EXPECT_EQ(::recv(accepted, &got, 1, 0), 1);
  EXPECT_EQ(got, 'x');
  ::close(accepted);
  ::close(made.fd);
}

TEST(HttpTcpConnect, ALoopbackRefusalIsReportedWithoutASuspension) {
  sockaddr_in closed{};
  {
    Listener gone(1);
    closed = gone.address;
  }  // its port has no listener now
  OnAFiber fiber;
  fiber.open();
  const auto made = tcp_connect(reinterpret_cast<const sockaddr*>(&closed), sizeof closed,
                                Clock::now() + std::chrono::seconds(10), {});
  EXPECT_EQ(made.fd, -1);
  EXPECT_EQ(made.error, ECONNREFUSED);
  EXPECT_EQ(fiber.suspender.suspends, 0);
}

// A listener whose accept queue is full drops further handshakes: a connect to it is pending
// when connect() returns, so it waits through the suspender until its deadline.
TEST(HttpTcpConnect, AnUnansweredConnectWaitsThroughTheSuspenderUntilItsDeadline) {
  Listener full(0);
  std::vector<int> queued;
  for (int i = 0; i < 4; ++i) {  // fills the queue (backlog 0 holds one); the rest are pending
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    [[maybe_unused]] int r = ::connect(fd, full.at(), sizeof full.address);
    queued.push_back(fd);
  }
  OnAFiber fiber;
  fiber.open();
  const auto started = Clock::now();
  const auto made =
      tcp_connect(full.at(), sizeof full.address, started + std::chrono::milliseconds(300), {});
  for (int fd : queued) ::close(fd);
  if (made.fd >= 0) {
    ::close(made.fd);
    GTEST_SKIP() << "this kernel answered a handshake beyond a full accept queue";
  }
  EXPECT_EQ(made.error, ETIMEDOUT);
  EXPECT_GE(fiber.suspender.suspends, 1) << "the wait went through the fiber's suspender";
  EXPECT_GE(Clock::now() - started, std::chrono::milliseconds(300));
}

// Off a fiber (no SuspendPoint open), a connect not answered at once blocks its thread until its
// deadline and never suspends.
TEST(HttpTcpConnect, OffAFiberAPendingConnectBlocksWithoutSuspending) {
  Listener full(0);
  std::vector<int> queued;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    [[maybe_unused]] int r = ::connect(fd, full.at(), sizeof full.address);
    queued.push_back(fd);
  }
  OnAFiber fiber;  // installed, but no SuspendPoint open
  const auto made = tcp_connect(full.at(), sizeof full.address,
                                Clock::now() + std::chrono::milliseconds(150), {});
  for (int fd : queued) ::close(fd);
  if (made.fd >= 0) {
    ::close(made.fd);
    GTEST_SKIP() << "this kernel answered a handshake beyond a full accept queue";
  }
  EXPECT_EQ(made.error, ETIMEDOUT);
  EXPECT_EQ(fiber.suspender.suspends, 0);
}

}  // namespace
