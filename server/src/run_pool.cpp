#include "run_pool.hpp"

#include <openssl/crypto.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

#include "kernex/log.hpp"
#include "kernex/suspend.hpp"

namespace kernex::server {

// Shared with every thread: a thread that is leaving may outlive the RunPool object by a few
// instructions, so what it touches last is not the pool's.
// Told by its threads' BlockingScopes (kernex/suspend.hpp): a thread that waits lends its place.
struct RunPool::State final : BlockingObserver {
  Options options;
  std::mutex mutex;
  std::condition_variable work;   // a task was queued, or the pool stops
  std::condition_variable gone;   // a thread left
  std::condition_variable watch;  // the stall watcher: tasks queued, or the pool stops
  std::deque<std::function<void()>> queue;
  std::size_t ahead = 0;  // tasks at the queue's front that were submitted ahead
  std::size_t threads = 0;
  std::size_t idle = 0;
  std::size_t created = 0;
  std::size_t waiting = 0;    // threads inside a BlockingScope
  std::uint64_t taken = 0;    // tasks taken from the queue since the start
  bool watcher = false;       // the stall watcher's thread is alive
  bool watcher_idle = false;  // it waits without a deadline: a task queued wakes it
  bool stopping = false;
  std::weak_ptr<State> self;

  void blocking_begins() noexcept override {
    bool make = false;
    {
      std::lock_guard lock(mutex);
      ++waiting;
      make = reserve_thread_locked(*this, false);
    }
    if (make) start_reserved(self.lock());
  }
  void blocking_ends() noexcept override {
    std::lock_guard lock(mutex);
    --waiting;
  }
};

namespace {

std::atomic<std::size_t> g_refuse_threads{0};  // fail_thread_creation_for_testing

void worker_loop(const std::shared_ptr<RunPool::State>& s);

struct Start {
  std::shared_ptr<RunPool::State> state;
};

void* worker_main(void* arg) {
  std::unique_ptr<Start> start(static_cast<Start*>(arg));
  set_blocking_observer(start->state.get());
  worker_loop(start->state);
  set_blocking_observer(nullptr);
  return nullptr;
}

void worker_loop(const std::shared_ptr<RunPool::State>& s) {
  std::unique_lock lock(s->mutex);
  for (;;) {
    if (s->queue.empty()) {
      if (s->stopping) break;
      ++s->idle;
      const bool woke = s->work.wait_for(lock, s->options.idle_exit,
                                         [&] { return !s->queue.empty() || s->stopping; });
      --s->idle;
      // Idle beyond the warm few (at least one: the queue always has a thread to wait for):
      // leave, and a later burst makes a thread again.
      if (!woke && s->threads > std::max<std::size_t>(s->options.warm, 1)) break;
      continue;
    }
    std::function<void()> task = std::move(s->queue.front());
    s->queue.pop_front();
    if (s->ahead > 0) --s->ahead;
    ++s->taken;
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      log(LogLevel::Error, std::string("serve: a run's task threw: ") + e.what());
    }
    task = nullptr;  // what the task held goes before the thread counts as free
    lock.lock();
  }
  // Runs' TLS (the HTTP client, on their fibers) leaves OpenSSL state in the thread (error queue,
  // random generators): freed now, not by the thread's exit, which a process that ends right
  // after the pool is destroyed would not wait for (a detached thread; OpenSSL's atexit cleanup
  // would race it).
  lock.unlock();
  OPENSSL_thread_stop();
  lock.lock();
  --s->threads;
  s->gone.notify_all();
}

// A detached thread with a small stack; false when the system refuses one.
bool spawn(const std::shared_ptr<RunPool::State>& s) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  std::size_t stack = std::max<std::size_t>(s->options.stack_bytes, 64u << 10);
#if defined(__SANITIZE_ADDRESS__)
  stack *= 4;  // ASan's redzones make every frame several times larger
#endif
  pthread_attr_setstacksize(&attr, stack);
  auto* start = new Start{s};
  pthread_t id;
  std::size_t refuse = g_refuse_threads.load();
  while (refuse > 0 && !g_refuse_threads.compare_exchange_weak(refuse, refuse - 1)) {
  }
  const int rc = refuse > 0 ? EAGAIN : pthread_create(&id, &attr, worker_main, start);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete start;
    log(LogLevel::Warn, std::string("serve: cannot start a run thread: ") + std::strerror(rc));
    return false;
  }
  return true;
}

}  // namespace

RunPool::RunPool(Options options) : state_(std::make_shared<State>()) {
  if (options.max_threads == 0) options.max_threads = 1;
  options.warm = std::min(options.warm, options.max_threads);
  if (options.compute == 0) options.compute = default_compute();
  state_->options = options;
  state_->self = state_;
  bool make = false;
  {
    std::lock_guard lock(state_->mutex);
    make = reserve_thread_locked(*state_, true);
  }
  if (make) start_reserved(state_);
  try {
    std::thread([state = state_] { watch_for_stalls(state); }).detach();
    std::lock_guard lock(state_->mutex);
    state_->watcher = true;  // before it can clear it: it takes this mutex first
  } catch (const std::system_error& e) {
    log(LogLevel::Warn, std::string("serve: no stall watcher for the run pool: ") + e.what() +
                            "; a wait nobody declared holds its queue until it ends");
  }
}

RunPool::~RunPool() {
  std::unique_lock lock(state_->mutex);
  state_->stopping = true;
  state_->work.notify_all();
  state_->watch.notify_all();
  state_->gone.wait(lock, [&] { return state_->threads == 0 && !state_->watcher; });
}

namespace {

// Queued tasks no idle thread will take (each idle thread takes one), and room for a thread.
bool short_of_threads(const RunPool::State& s) {
  return !s.stopping && s.threads < s.options.max_threads && s.queue.size() > s.idle;
}

}  // namespace

// The state is held for the whole call: once the task is queued it may run and end, and its end
// may let the pool's owner destroy the pool while this submitter (a fiber's resume, on another
// thread) is still here. One lock for the queueing and the decision to make a thread (a second
// one, taken just after the wake-up, was what the woken thread met first: a futex round trip a
// run); notified after the unlock, so the woken thread does not wait for it.
void RunPool::submit(std::function<void()> task, bool ahead) {
  const std::shared_ptr<State> state = state_;
  bool make = false, watch = false;
  {
    std::lock_guard lock(state->mutex);
    if (ahead) {
      state->queue.insert(state->queue.begin() + static_cast<std::ptrdiff_t>(state->ahead),
                          std::move(task));
      ++state->ahead;
    } else {
      state->queue.push_back(std::move(task));
    }
    make = reserve_thread_locked(*state, false);
    watch = state->watcher_idle && short_of_threads(*state);
  }
  state->work.notify_one();
  if (watch) state->watch.notify_one();
  if (make) start_reserved(state);
}

// A thread is made for the first one, or when none is free to take what is queued and fewer than
// `compute` threads run tasks without waiting (a reserved thread, not started yet, counts as one).
bool RunPool::reserve_thread_locked(State& s, bool first) {
  const std::size_t running = s.threads - s.idle - s.waiting;
  const bool need =
      s.threads == 0 ? !s.stopping : !first && short_of_threads(s) && running < s.options.compute;
  if (!need) return false;
  ++s.threads;
  ++s.created;
  return true;
}

// A wait nobody declared (a hook, a plugin's own blocking call, a long computation) would hold the
// queue behind `compute` threads until it ends: when `stall` passes with tasks queued and none
// taken, one more thread is made, and one each `stall` after while that lasts. Idle otherwise.
void RunPool::watch_for_stalls(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock lock(s.mutex);
  while (!s.stopping) {
    if (!short_of_threads(s)) {
      s.watcher_idle = true;
      s.watch.wait(lock);
      s.watcher_idle = false;
      continue;
    }
    const std::uint64_t taken = s.taken;
    s.watch.wait_for(lock, s.options.stall, [&] { return s.stopping; });
    if (s.taken != taken || !short_of_threads(s)) continue;
    ++s.threads;
    ++s.created;
    lock.unlock();
    const bool made = start_reserved(state);
    lock.lock();
    // A system that refuses threads is asked again in a second, not every stall (each refusal
    // is logged); a submit still asks at once.
    if (!made) s.watch.wait_for(lock, std::chrono::seconds(1), [&] { return s.stopping; });
  }
  s.watcher = false;
  s.gone.notify_all();
}

// One the system refuses leaves the queue to the threads there are: never run here, where the
// caller may hold a lock the task takes.
bool RunPool::start_reserved(const std::shared_ptr<State>& state) {
  State& s = *state;
  if (spawn(state)) return true;
  std::unique_lock lock(s.mutex);
  --s.threads;
  --s.created;
  if (s.threads == 0 && !s.queue.empty())
    log(LogLevel::Error, "serve: no run thread could be made; " + std::to_string(s.queue.size()) +
                             " runs wait for the next one");
  return false;
}

void RunPool::fail_thread_creation_for_testing(std::size_t n) { g_refuse_threads = n; }

RunPool::Stats RunPool::stats() const {
  std::lock_guard lock(state_->mutex);
  return {state_->threads, state_->threads - state_->idle, state_->queue.size(), state_->created};
}

std::size_t RunPool::default_warm() {
  return std::max<std::size_t>(4, 4 * std::max(1u, std::thread::hardware_concurrency()));
}

std::size_t RunPool::default_compute() {
  return std::max<std::size_t>(2, 2 * std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace kernex::server
