// The run pool when the system refuses a thread: a task never runs on the submitter's stack (the
// run manager submits under its mutex, which the task takes: run there, it locked it twice), it
// waits for a thread the pool has, or for the one the next submit makes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "run_pool.hpp"

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

}  // namespace
