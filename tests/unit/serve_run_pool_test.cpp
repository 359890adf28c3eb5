// The run pool when the system refuses a thread: a task never runs on the submitter's stack (the
// run manager submits under its mutex, which the task takes: run there, it locked it twice), it
// waits for a thread the pool has, or for the one the next submit makes. And how many threads it
// makes: no more than `compute` for tasks that run, one more for each that declares a wait, one
// more after a stall for a wait nobody declared.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kernex/suspend.hpp"
#include "run_pool.hpp"
#include "run_state.hpp"

namespace {

using kernex::server::RunPool;
using namespace std::chrono_literals;

// Tasks that take the "manager's" mutex, as RunManager's do, and note where they ran.
struct Manager {
  std::mutex mutex;  // held by the submitter around submit(), as RunManager::launch does
  std::mutex done_mutex;
  std::condition_variable done_cv;
  std::vector<std::thread::id> ran_on;

  std::function<void()> task() {
    return [this] {
      std::lock_guard lock(mutex);
      std::lock_guard done(done_mutex);
      ran_on.push_back(std::this_thread::get_id());
      done_cv.notify_all();
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(done_mutex);
    return done_cv.wait_for(lock, 30s, [&] { return ran_on.size() >= n; });
  }
  std::size_t ran() {
    std::lock_guard lock(done_mutex);
    return ran_on.size();
  }
};

struct RefuseThreads {
  explicit RefuseThreads(std::size_t n) { RunPool::fail_thread_creation_for_testing(n); }
  ~RefuseThreads() { RunPool::fail_thread_creation_for_testing(0); }
};

RunPool::Options options(std::size_t max_threads) {
  RunPool::Options o;
  o.max_threads = max_threads;
  o.warm = 1;
  o.stack_bytes = 256u << 10;
  return o;
}

TEST(ServeRunPool, WithNoThreadATaskWaitsForTheNextOneInsteadOfRunningInTheSubmitter) {
  Manager m;
  RefuseThreads refuse(1000);
  RunPool pool(options(4));
  EXPECT_EQ(pool.stats().threads, 0u);
  {
    // Run here, the task would take the mutex this thread holds: a deadlock, or worse.
    std::unique_lock lock(m.mutex, std::try_to_lock);
    ASSERT_TRUE(lock.owns_lock());
    pool.submit(m.task());
  }
  EXPECT_EQ(m.ran(), 0u) << "no thread could be made: the task waits";
  EXPECT_EQ(pool.stats().queued, 1u);
  RunPool::fail_thread_creation_for_testing(0);
  {
    std::lock_guard lock(m.mutex);
    pool.submit(m.task());  // makes a thread, which runs both
  }
  ASSERT_TRUE(m.wait_for(2));
  for (const auto& id : m.ran_on) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(ServeRunPool, ARefusedThreadLeavesTheTasksToTheThreadsThereAre) {
  Manager m;
  RunPool pool(options(8));
  ASSERT_EQ(pool.stats().threads, 1u) << "one thread is made with the pool";
  RefuseThreads refuse(1000);
  {
    // Five tasks while the "manager" holds its mutex: each would want a thread of its own.
    std::lock_guard lock(m.mutex);
    for (int i = 0; i < 5; ++i) pool.submit(m.task());
    EXPECT_EQ(m.ran(), 0u);
  }
  ASSERT_TRUE(m.wait_for(5)) << "the pool's one thread ran them all";
  for (const auto& id : m.ran_on) EXPECT_NE(id, std::this_thread::get_id());
  EXPECT_EQ(pool.stats().created, 1u);
}

// A gate tasks wait at (without declaring it, or inside a BlockingScope) until it opens.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  int waiting = 0, passed = 0;
  void wait(bool declared) {
    std::optional<kernex::BlockingScope> scope;
    if (declared) scope.emplace();
    std::unique_lock lock(mutex);
    ++waiting;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    ++passed;
    cv.notify_all();
  }
  void release() {
    std::lock_guard lock(mutex);
    open = true;
    cv.notify_all();
  }
  bool wait_passed(int n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 30s, [&] { return passed >= n; });
  }
  bool wait_open() {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 30s, [&] { return open; });
  }
  bool wait_waiting(int n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 30s, [&] { return waiting >= n; });
  }
};

RunPool::Options bounded(std::size_t compute, std::chrono::milliseconds stall) {
  RunPool::Options o = options(64);
  o.compute = compute;
  o.stall = stall;
  return o;
}

TEST(ServeRunPool, TasksThatRunGetNoMoreThreadsThanComputeAllows) {
  Gate gate;
  RunPool pool(bounded(2, 1h));  // no stall is ever seen: only `compute` decides
  for (int i = 0; i < 20; ++i) pool.submit([&] { gate.wait(false); });
  // A thread notified but not yet woken still counts as idle, so one more can be made than
  // `compute` while the first tasks are taken; never one for each task.
  EXPECT_LE(pool.stats().created, 3u);
  gate.release();
  ASSERT_TRUE(gate.wait_passed(20));
  EXPECT_LE(pool.stats().created, 3u);
}

TEST(ServeRunPool, AThreadThatDeclaresAWaitLendsItsPlace) {
  Gate gate;
  RunPool pool(bounded(1, 1h));
  // The first task waits, declared, until the second has run: with one thread that computes and
  // no stall watcher in time, only the declaration gets the second a thread. It is submitted once
  // the first waits, so no thread is idle then (one notified but not yet woken would take it).
  pool.submit([&] { gate.wait(true); });
  ASSERT_TRUE(gate.wait_waiting(1));
  pool.submit([&] { gate.release(); });
  ASSERT_TRUE(gate.wait_passed(1)) << "the second task never got a thread";
  EXPECT_GE(pool.stats().created, 2u);
}

TEST(ServeRunPool, AWaitDeclaredWhileTasksAreQueuedStartsAThreadForThem) {
  Gate queued, gate;
  RunPool pool(bounded(1, 1h));
  // The first task runs (undeclared) until the second is queued behind it, then declares its
  // wait: the declaration itself, not a submit, must make the thread the second one needs.
  pool.submit([&] {
    queued.wait(false);
    gate.wait(true);
  });
  ASSERT_TRUE(queued.wait_waiting(1));
  pool.submit([&] { gate.release(); });
  EXPECT_EQ(pool.stats().queued, 1u) << "one thread computes: the second task waits";
  queued.release();
  ASSERT_TRUE(gate.wait_passed(1)) << "the declared wait made no thread";
  EXPECT_GE(pool.stats().created, 2u);
}

TEST(ServeRunPool, TasksSubmittedAheadRunBeforeTheQueueInTheirOwnOrder) {
  Gate gate;
  std::mutex mutex;
  std::vector<int> order;
  auto note = [&](int n) {
    return [&, n] {
      std::lock_guard lock(mutex);
      order.push_back(n);
    };
  };
  RunPool pool(bounded(1, 1h));
  pool.submit([&] { gate.wait(false); });  // holds the one thread while the queue fills
  ASSERT_TRUE(gate.wait_waiting(1));
  pool.submit(note(1));
  pool.submit(note(2));
  // Resumed runs whose model has produced nothing yet (run_manager.cpp).
  pool.submit(note(3), true);
  pool.submit(note(4), true);
  pool.submit(note(5));
  Gate done;
  pool.submit([&] { done.release(); });  // the one thread runs them in the queue's order
  gate.release();
  ASSERT_TRUE(done.wait_open());
  std::lock_guard lock(mutex);
  EXPECT_EQ(order, (std::vector<int>{3, 4, 1, 2, 5}));
}

// What puts a run's slices ahead (RunState::produced): nothing but the model's first output, text
// or a tool call. A run looping on tool calls without text goes back in line after its first call.
TEST(ServeRunPool, ARunGoesAheadOnlyUntilItsModelsFirstOutput) {
  using kernex::server::RunState;
  for (const char* first : {"text_delta", "tool_call"}) {
    RunState run("run_1", "acme", "chat-1", "2026-01-01 00:00:00");
    run.append("run_start", {{"run_id", run.id}});
    EXPECT_FALSE(run.produced()) << "the run's own start is no output of its model";
    run.append(first, {{"run_id", run.id}, {"n", 1}});
    EXPECT_TRUE(run.produced()) << first;
  }
}

// A client waiting for a non-streaming reply (RunState::wait_ended) is woken once, at the end,
// not at each event; a dropped wait (unwait) is never called.
TEST(ServeRunPool, AnEndWaiterIsWokenByTheEndAloneAndOnce) {
  using kernex::Json;
  using kernex::server::RunState;
  using kernex::server::RunStatus;
  RunState run("run_1", "acme", "chat-1", "2026-01-01 00:00:00");
  int woken = 0, dropped = 0;
  ASSERT_TRUE(run.wait_ended([&] { ++woken; }));
  const auto ticket = run.wait_ended([&] { ++dropped; });
  ASSERT_TRUE(ticket);
  run.unwait(*ticket);
  run.append("run_start", {{"run_id", run.id}});
  run.append("text_delta", {{"run_id", run.id}, {"text", "hi"}});
  EXPECT_EQ(woken, 0) << "woken by an event";
  run.end("run_end", RunStatus::Done, Json{{"text", "hi"}});
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(dropped, 0);
  EXPECT_FALSE(run.wait_ended([&] { ++woken; })) << "an ended run has nothing to wait for";
  run.append("late", Json::object());
  EXPECT_EQ(woken, 1);
}

TEST(ServeRunPool, AWaitNobodyDeclaredGetsAThreadAfterAStall) {
  Gate gate;
  RunPool pool(bounded(1, 20ms));
  pool.submit([&] { gate.wait(false); });
  ASSERT_TRUE(gate.wait_waiting(1));
  pool.submit([&] { gate.release(); });
  ASSERT_TRUE(gate.wait_passed(1)) << "the stall watcher made no thread";
  EXPECT_GE(pool.stats().created, 2u);
}

}  // namespace
