// The threads runs execute on: a bounded pool, first come first served, instead of a thread made
// for every run. Each run is a fiber (run_fiber.hpp) whose slices run here: a run waiting on its
// model (Provider::start, or the HTTP client's socket waits, http:// or https://) holds no thread,
// and its next slice is submitted when the answer comes. What still blocks (the sandbox's process
// waits, a synchronous-only provider, a hook, memory, DNS) holds its thread, so the bound is sized
// for blocking work (serve.run_threads). Threads are made as the work needs them, reused after,
// and retired once idle for a while beyond a warm few:
// - at once, while fewer than `compute` threads are running tasks and not waiting: more threads
//   than that only share the CPUs, each paying its own start, stacks and switches (a burst of
//   1 000 new runs on 2 CPUs made ~60 of them);
// - at once, when a running thread begins a wait it declares (kernex::BlockingScope: a commit, a
//   child process, a blocking poll) and tasks are queued: it lends its place;
// - after `stall` without a task taken from a queue that has some: a wait nobody declared.
// A run that waits on a person holds none either: it is parked and submitted again on the
// decision (run_manager.cpp).
// Fibers and threads get small stacks (serve.run_stack_kib): 10 000 runs at once stay in memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace kernex::server {

class RunPool {
 public:
  struct Options {
    std::size_t max_threads = 8;  // the most tasks running at once; further ones queue
    std::size_t warm = 4;         // threads kept however long they idle
    std::size_t compute = 0;      // threads running and not waiting, made at once (0: default)
    std::chrono::milliseconds stall{5};  // no task taken for this long: one more thread
    std::size_t stack_bytes = 512u << 10;
    std::chrono::milliseconds idle_exit{30'000};  // idle threads beyond `warm` exit after this
  };
  // Makes one thread at once, kept however long it idles: a task submitted when no further thread
  // can be made waits for it rather than running on the submitter's stack (whose caller may hold
  // locks the task takes: RunManager submits under its mutex).
  explicit RunPool(Options options);
  // Runs what is queued, then waits until every thread has left (no task of this pool runs on).
  ~RunPool();
  RunPool(const RunPool&) = delete;
  RunPool& operator=(const RunPool&) = delete;

  // Queued behind every task submitted before it (`ahead`: behind only the tasks submitted ahead
  // before it); runs on the first free thread, never on the caller's. A thread the system refuses
  // is asked for again at the next submit (with no thread at all, the queue waits for one).
  void submit(std::function<void()> task, bool ahead = false);

  struct Stats {
    std::size_t threads = 0;  // alive now
    std::size_t busy = 0;     // running a task
    std::size_t queued = 0;   // waiting for a thread
    std::size_t created = 0;  // threads made since the start
  };
  Stats stats() const;

  // serve.run_threads 0: max(4, 4 x CPUs) ... see ServeConfig::run_threads.
  static std::size_t default_warm();
  // max(2, 2 x CPUs): a thread for each CPU, and one more each for one that stalls briefly (a page
  // fault, a mutex) without declaring it.
  static std::size_t default_compute();

  // Tests: the next `n` thread creations fail as if the system refused them (EAGAIN).
  static void fail_thread_creation_for_testing(std::size_t n);

  struct State;  // shared with the threads (run_pool.cpp)

 private:
  // Whether a thread is to be made (counted already, under the state's mutex), and its making.
  static bool reserve_thread_locked(State& s, bool first);
  static bool start_reserved(const std::shared_ptr<State>& state);
  static void watch_for_stalls(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
};

}  // namespace kernex::server
