// The suspender of this thread, and wait_fd's reactor: one epoll thread for every fiber that
// waits on a descriptor, so 10 000 streaming runs wait on one thread instead of 10 000.
#include "kernex/suspend.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kernex/log.hpp"

namespace kernex {
namespace {

thread_local Suspender* g_current = nullptr;
thread_local BlockingObserver* g_observer = nullptr;
thread_local int g_blocking_depth = 0;

using Clock = std::chrono::steady_clock;

// One descriptor's wait, on the waiting fiber's stack: alive until its resume is called.
struct Waiter {
  int fd = -1;
  std::uint32_t events = 0;
  Suspender::Resume resume;
  int result = 0;  // > 0 ready, 0 timed out, < 0 -errno
  short revents = 0;
};

short poll_events(std::uint32_t e) {
  short out = 0;
  if (e & EPOLLIN) out |= POLLIN;
  if (e & EPOLLOUT) out |= POLLOUT;
  if (e & EPOLLERR) out |= POLLERR;
  if (e & EPOLLHUP) out |= POLLHUP;
  if (e & EPOLLPRI) out |= POLLPRI;
  return out;
}

class Reactor {
  using Timers = std::multimap<Clock::time_point, std::uint64_t>;
  // A pending wait and its deadline (timers_.end(): none).
  struct Watch {
    Waiter* waiter;
    Timers::iterator timer;
  };

 public:
  // Made on the first wait and never destroyed: its thread waits in epoll until the process ends.
  // Null when the system refused epoll or the thread: waits then block (poll()).
  static Reactor* get() {
    static Reactor* reactor = [] {
      auto* r = new Reactor();
      if (r->start()) return r;
      delete r;
      log(LogLevel::Warn, "wait_fd: no epoll thread; descriptor waits hold their thread");
      return static_cast<Reactor*>(nullptr);
    }();
    return reactor;
  }

  // Watches `w` (resume already set); an errno when epoll refuses the descriptor.
  int add(Waiter& w, int timeout_ms) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_++;
    epoll_event ev{};
    ev.events = w.events | EPOLLONESHOT;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, w.fd, &ev) != 0) return errno;
    Watch& watch = waiters_.emplace(id, Watch{&w, timers_.end()}).first->second;
    if (timeout_ms >= 0) {
      const auto at = Clock::now() + std::chrono::milliseconds(timeout_ms);
      const bool earliest = timers_.empty() || at < timers_.begin()->first;
      watch.timer = timers_.emplace(at, id);
      if (earliest) {  // the loop sleeps until the old earliest: wake it to sleep less
        const std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(wake_, &one, sizeof one);
      }
    }
    return 0;
  }

 private:
  bool start() {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_ < 0 || wake_ < 0) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;  // ids start at 1
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev) != 0) return false;
    try {
      std::thread([this] { loop(); }).detach();
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }

  int next_timeout() {
    std::lock_guard lock(mutex_);
    if (timers_.empty()) return -1;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(timers_.begin()->first - Clock::now());
    return static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
  }

  // Ends a wait (under the lock): its resume is taken, to be called once the lock is released
  // (the fiber may run, and its Waiter go, the moment it is called). Its deadline goes with it, so
  // the timers hold only waits still pending (a stream's reads, each with a long timeout, would
  // otherwise pile up until their deadlines passed).
  void finish(std::map<std::uint64_t, Watch>::iterator it, int result, short revents,
              std::vector<Suspender::Resume>& ready) {
    Waiter& w = *it->second.waiter;
    if (it->second.timer != timers_.end()) timers_.erase(it->second.timer);
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, w.fd, nullptr);
    w.result = result;
    w.revents = revents;
    ready.push_back(std::move(w.resume));
    waiters_.erase(it);
  }

  void loop() {
    epoll_event events[64];
    for (;;) {
      const int n = ::epoll_wait(epoll_, events, 64, next_timeout());
      std::vector<Suspender::Resume> ready;
      {
        std::lock_guard lock(mutex_);
        for (int i = 0; i < n; ++i) {
          const std::uint64_t id = events[i].data.u64;
          if (id == 0) {
            std::uint64_t drained;
            [[maybe_unused]] auto r = ::read(wake_, &drained, sizeof drained);
            continue;
          }
          if (auto it = waiters_.find(id); it != waiters_.end())
            finish(it, 1, poll_events(events[i].events), ready);
        }
        const auto now = Clock::now();
        while (!timers_.empty() && timers_.begin()->first <= now)
          finish(waiters_.find(timers_.begin()->second), 0, 0, ready);  // erases the timer
      }
      for (auto& resume : ready) resume();
    }
  }

  int epoll_ = -1;
  int wake_ = -1;
  std::mutex mutex_;
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, Watch> waiters_;
  Timers timers_;  // deadlines of the pending waits that have one
};

int blocking_wait(int fd, short events, int timeout_ms, short* revents) {
  pollfd p{fd, events, 0};
  std::optional<BlockingScope> waiting;
  if (timeout_ms != 0) waiting.emplace();
  const int n = ::poll(&p, 1, timeout_ms);
  if (n > 0 && revents != nullptr) *revents = p.revents;
  return n;
}

// Not inlined: errno's address is the thread's, and the caller may have moved to another one.
[[gnu::noinline]] void set_errno(int e) { errno = e; }

}  // namespace

Suspender* current_suspender() noexcept {
  Suspender* installed = g_current;
  // Inside a BlockingScope the thread is declared as waiting: its waits block here, so the scope
  // ends on the thread (and the pool) it began on.
  return installed != nullptr && installed->open_ > 0 && g_blocking_depth == 0 ? installed
                                                                               : nullptr;
}

Suspender* set_current_suspender(Suspender* s) noexcept { return std::exchange(g_current, s); }

BlockingObserver* set_blocking_observer(BlockingObserver* o) noexcept {
  return std::exchange(g_observer, o);
}

// The observer told is kept: a wait that began on one of a pool's threads ends on the same pool.
BlockingScope::BlockingScope() noexcept : told_(g_blocking_depth++ == 0 ? g_observer : nullptr) {
  if (told_ != nullptr) told_->blocking_begins();
}

BlockingScope::~BlockingScope() {
  --g_blocking_depth;
  if (told_ != nullptr) told_->blocking_ends();
}

SuspendPoint::SuspendPoint() noexcept : fiber_(g_current) {
  if (fiber_ != nullptr) ++fiber_->open_;
}

SuspendPoint::~SuspendPoint() {
  if (fiber_ != nullptr) --fiber_->open_;
}

int wait_fd(int fd, short events, int timeout_ms, short* revents) {
  Suspender* suspender = current_suspender();
  Reactor* reactor = suspender != nullptr ? Reactor::get() : nullptr;
  if (reactor == nullptr) return blocking_wait(fd, events, timeout_ms, revents);
  Waiter w;
  w.fd = fd;
  w.events = (events & POLLIN ? EPOLLIN : 0u) | (events & POLLOUT ? EPOLLOUT : 0u);
  suspender->suspend([&w, reactor, timeout_ms](Suspender::Resume resume) {
    w.resume = std::move(resume);
    if (const int refused = reactor->add(w, timeout_ms); refused != 0) {
      // EPERM: a descriptor epoll cannot watch (a regular file), which poll() calls ready.
      w.result = refused == EPERM ? 1 : -refused;
      w.revents = refused == EPERM ? poll_events(w.events) : 0;
      Suspender::Resume go = std::move(w.resume);  // w may be gone once it is called
      go();
    }
  });
  if (w.result < 0) {
    set_errno(-w.result);
    return -1;
  }
  if (w.result > 0 && revents != nullptr) *revents = w.revents;
  return w.result;
}

}  // namespace kernex
