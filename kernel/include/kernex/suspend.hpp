// Waiting without a thread. A host that runs work on fibers (kernex serve runs each run on its
// own small stack, server/src/run_fiber.hpp) installs a Suspender on the thread while a fiber
// runs there. Inside a SuspendPoint (the kernel opens one around its model calls), the provider
// call (Provider::start) and socket waits (wait_fd, the HTTP client's) then give the thread back
// while they wait, and the fiber continues on whichever thread the host picks. Anywhere else (the
// CLI, a thread a plugin made, a tool, a hook, a memory call: code that may hold locks a
// suspension would carry to another thread) they block as before.
//
// Code inside a SuspendPoint holds no mutex and no thread_local's address across these calls:
// it may continue on another thread.
#pragma once

#include <functional>

namespace kernex {

class Suspender {
 public:
  using Resume = std::function<void()>;
  virtual ~Suspender() = default;
  // Leaves the calling thread. `arm` runs once the fiber is off it (on that thread, not on the
  // fiber's stack) and gets `resume`; calling resume, exactly once and from any thread (arm's
  // own included), continues the fiber, and suspend returns there.
  virtual void suspend(const std::function<void(Resume)>& arm) = 0;

 private:
  friend class SuspendPoint;
  friend Suspender* current_suspender() noexcept;
  int open_ = 0;  // SuspendPoints open on this fiber (the fiber's, not a thread's: it moves)
};

// The suspender of the fiber running on this thread when a SuspendPoint is open on it; null
// where waits block the thread (no SuspendPoint open, or inside a BlockingScope).
Suspender* current_suspender() noexcept;
// Installs `s` for this thread (null: none) and returns the one it replaces. For hosts.
Suspender* set_current_suspender(Suspender* s) noexcept;

// While one lives, the fiber running here (if any) may suspend. Made and destroyed by the same
// fiber, possibly on two threads.
class SuspendPoint {
 public:
  SuspendPoint() noexcept;
  ~SuspendPoint();
  SuspendPoint(const SuspendPoint&) = delete;
  SuspendPoint& operator=(const SuspendPoint&) = delete;

 private:
  Suspender* fiber_;
};

// A wait that holds its thread: a commit's turn, a child process, a poll() off a fiber. A host
// that runs work on a bounded pool (kernex serve's, server/src/run_pool.hpp) installs an observer
// on its threads and is told while one of them waits: it may lend another thread to what is
// queued, so it sizes itself by the threads that compute, not by those that wait. Without an
// observer (the CLI, a thread a plugin made) it does nothing. Scopes nest; the outermost tells.
// A scope is made and destroyed on one thread: nothing inside it suspends (current_suspender() is
// null there, so wait_fd and Provider::start block).
class BlockingObserver {
 public:
  virtual ~BlockingObserver() = default;
  virtual void blocking_begins() noexcept = 0;
  virtual void blocking_ends() noexcept = 0;
};
// Installs `o` for this thread (null: none) and returns the one it replaces. For hosts.
BlockingObserver* set_blocking_observer(BlockingObserver* o) noexcept;

class BlockingScope {
 public:
  BlockingScope() noexcept;
  ~BlockingScope();
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;

 private:
  BlockingObserver* told_;  // the observer told it began (null: none, or an outer scope did)
};

// poll() of one descriptor for `events` (POLLIN, POLLOUT): > 0 ready (`*revents` says how),
// 0 timed out, < 0 failed (errno). timeout_ms < 0 waits without limit. On a fiber the wait
// holds no thread: one shared epoll thread continues the fiber when the descriptor is ready.
// The descriptor stays open for the wait (shutdown() it to end a wait early: that wakes it).
int wait_fd(int fd, short events, int timeout_ms, short* revents = nullptr);

}  // namespace kernex
