// Runs on fibers (server/src/run_fiber.hpp) over the run pool: a run waiting on its model
// (Provider::start) or on a socket (kernex::wait_fd) holds no pool thread, whichever order the
// answer and the suspension come in; a stop request ends a suspended wait; a provider that throws
// or supports only complete() works as before; outside a fiber, or outside the loop's model call
// on one, nothing suspends.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include "agent_loop.hpp"
#include "kernex/suspend.hpp"
#include "run_fiber.hpp"
#include "run_pool.hpp"

namespace {

using namespace kernex;
using server::RunFiber;
using server::RunPool;
using std::chrono::milliseconds;

// Where a test's fibers run their slices: `pool`, as the run manager's submit does.
RunFiber::Submit submit_to(RunPool& pool) {
  return
      [&pool](std::function<void()> slice, bool resume) { pool.submit(std::move(slice), resume); };
}

constexpr auto kGenerous = std::chrono::seconds(60);  // a deadlock fails, nothing else waits it out

Response answer(const std::string& text) {
  Response r;
  r.text = text;
  r.stop_reason = "end_turn";
  return r;
}

// Counts, and lets a test wait until a count is reached.
class Counter {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    ++n_;
    changed_.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kGenerous, [&] { return n_ >= n; });
  }
  std::size_t value() {
    std::lock_guard lock(mutex_);
    return n_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t n_ = 0;
};

// Asynchronous: keeps every `done` until the test answers them all.
class HeldProvider : public Provider {
 public:
  std::string name() const override { return "held"; }
  Result<Response> complete(const Context&, const std::vector<ToolSpec>&,
                            const StreamSink&) override {
    ++sync_calls;
    return answer("sync");
  }
  bool start(const Context& context, const std::vector<ToolSpec>&, const StreamSink& sink,
             Done done) override {
    std::lock_guard lock(mutex);
    held.push_back({context.current_message, &sink, std::move(done)});
    started.add();
    return true;
  }
  // Streams a delta from this (another) thread, then answers.
  void answer_all() {
    std::vector<Held> all;
    {
      std::lock_guard lock(mutex);
      all.swap(held);
    }
    for (auto& h : all) {
      (*h.sink)(StreamEvent{StreamEvent::Kind::TextDelta, "re: ", {}, {}, {}, {}});
      h.done(answer("re: " + h.message));
    }
  }
  struct Held {
    std::string message;
    const StreamSink* sink;
    Done done;
  };
  std::mutex mutex;
  std::vector<Held> held;
  Counter started;
  std::atomic<int> sync_calls{0};
};

// One loop run, as the executor would make it, with what it streamed.
struct LoopRun {
  Context context;
  ToolRouter router;
  LoopDeps deps;
  std::string streamed;
  std::optional<Result<RunResult>> result;
  std::thread::id started_on, ended_on;

  LoopRun(Provider& provider, std::string message, std::stop_token stop = {}) {
    context.current_message = std::move(message);
    context.stop = stop;
    deps.provider = &provider;
    deps.provider_name = provider.name();
    deps.tools = &router;
    deps.sink = [this](const StreamEvent& e) { streamed += e.text; };
  }
  void run() {
    started_on = std::this_thread::get_id();
    result = run_agent_loop(context, deps, Limits{});
    ended_on = std::this_thread::get_id();
  }
};

RunPool::Options pool_of(std::size_t threads) {
  RunPool::Options o;
  o.max_threads = threads;
  o.warm = threads;
  return o;
}

// Starts `run` on a fiber of `pool`; `ended` counts its end.
void on_fiber(RunPool& pool, LoopRun& run, Counter& ended) {
  const bool started = RunFiber::start(
      [&run, &ended] {
        run.run();
        ended.add();
      },
      256u << 10, submit_to(pool));
  ASSERT_TRUE(started);
}

// Runs `body` on a fiber of a one-thread pool and returns once it ended (and the pool is gone).
void run_one_fiber(const std::function<void()>& body) {
  Counter ended;
  RunPool pool(pool_of(1));
  ASSERT_TRUE(RunFiber::start(
      [&] {
        body();
        ended.add();
      },
      128u << 10, submit_to(pool)));
  ASSERT_TRUE(ended.wait_for(1));
}

TEST(ServeRunFiber, FiftyRunsWaitingOnTheirModelHoldNoneOfTwoThreads) {
  HeldProvider provider;
  Counter ended;
  std::vector<std::unique_ptr<LoopRun>> runs;
  {
    RunPool pool(pool_of(2));
    for (int i = 0; i < 50; ++i) {
      runs.push_back(std::make_unique<LoopRun>(provider, "m" + std::to_string(i)));
      on_fiber(pool, *runs.back(), ended);
    }
    // Every run asked its model while two threads exist: none holds one as it waits.
    ASSERT_TRUE(provider.started.wait_for(50)) << provider.started.value() << " of 50 started";
    EXPECT_EQ(ended.value(), 0u);
    EXPECT_LE(pool.stats().created, 2u);
    provider.answer_all();
    ASSERT_TRUE(ended.wait_for(50));
  }
  for (int i = 0; i < 50; ++i) {
    const LoopRun& run = *runs[static_cast<std::size_t>(i)];
    ASSERT_TRUE(run.result && *run.result) << i;
    EXPECT_EQ((*run.result)->text, "re: m" + std::to_string(i));
    EXPECT_EQ((*run.result)->outcome, Outcome::EndTurn);
    EXPECT_EQ(run.streamed, "re: ") << "the sink was called from the provider's thread";
  }
  EXPECT_EQ(provider.sync_calls.load(), 0);
}

// `done` from the provider's own thread, finished before start even returns.
class EagerProvider : public Provider {
 public:
  std::string name() const override { return "eager"; }
  Result<Response> complete(const Context&, const std::vector<ToolSpec>&,
                            const StreamSink&) override {
    return answer("sync");
  }
  bool start(const Context& context, const std::vector<ToolSpec>&, const StreamSink&,
             Done done) override {
    std::thread([&, done = std::move(done)] {
      done(answer("eager " + context.current_message));
    }).join();
    ++starts;
    return true;
  }
  std::atomic<int> starts{0};
};

TEST(ServeRunFiber, AnAnswerBeforeStartReturnsContinuesTheRun) {
  EagerProvider provider;
  Counter ended;
  std::vector<std::unique_ptr<LoopRun>> runs;
  {
    RunPool pool(pool_of(2));
    for (int i = 0; i < 20; ++i) {
      runs.push_back(std::make_unique<LoopRun>(provider, "m" + std::to_string(i)));
      on_fiber(pool, *runs.back(), ended);
    }
    ASSERT_TRUE(ended.wait_for(20));
  }
  for (int i = 0; i < 20; ++i) {
    const auto& result = *runs[static_cast<std::size_t>(i)]->result;
    ASSERT_TRUE(result) << result.error().describe();
    EXPECT_EQ(result->text, "eager m" + std::to_string(i));
  }
  EXPECT_EQ(provider.starts.load(), 20);
}

// Honours the stop token: done(Cancelled) from the thread that asks to stop.
class StoppableProvider : public HeldProvider {
 public:
  bool start(const Context& context, const std::vector<ToolSpec>&, const StreamSink& sink,
             Done done) override {
    sink(StreamEvent{StreamEvent::Kind::TextDelta, "half an ans", {}, {}, {}, {}});
    auto shared = std::make_shared<Done>(std::move(done));
    on_stop.emplace(context.stop, [shared] { (*shared)(fail(ErrorCode::Cancelled, "stopped")); });
    started.add();
    return true;
  }
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
};

TEST(ServeRunFiber, ACancelEndsASuspendedRunWithWhatItSaid) {
  StoppableProvider provider;
  std::stop_source stop;
  Counter ended;
  LoopRun run(provider, "m", stop.get_token());
  {
    RunPool pool(pool_of(1));
    on_fiber(pool, run, ended);
    ASSERT_TRUE(provider.started.wait_for(1));
    EXPECT_EQ(ended.value(), 0u);
    stop.request_stop();
    ASSERT_TRUE(ended.wait_for(1));
  }
  provider.on_stop.reset();
  ASSERT_TRUE(run.result && *run.result);
  EXPECT_EQ((*run.result)->outcome, Outcome::Cancelled);
  EXPECT_EQ((*run.result)->text, "half an ans");
}

class ThrowingProvider : public HeldProvider {
 public:
  bool start(const Context&, const std::vector<ToolSpec>&, const StreamSink&, Done) override {
    throw std::runtime_error("no async today");
  }
};

TEST(ServeRunFiber, AProviderThatThrowsFailsTheRunNotTheFiber) {
  ThrowingProvider provider;
  Counter ended;
  LoopRun run(provider, "m");
  {
    RunPool pool(pool_of(1));
    on_fiber(pool, run, ended);
    ASSERT_TRUE(ended.wait_for(1));
  }
  ASSERT_TRUE(run.result);
  ASSERT_FALSE(*run.result);
  EXPECT_NE(run.result->error().describe().find("no async today"), std::string::npos)
      << run.result->error().describe();
}

// Only complete(): on a fiber and off one it is called as before.
class SyncProvider : public Provider {
 public:
  std::string name() const override { return "sync"; }
  Result<Response> complete(const Context& context, const std::vector<ToolSpec>&,
                            const StreamSink&) override {
    return answer("sync " + context.current_message);
  }
};

TEST(ServeRunFiber, ASyncOnlyProviderAndRunsOffFibersWorkUnchanged) {
  SyncProvider sync;
  HeldProvider async;
  Counter ended;
  LoopRun on(sync, "on");
  {
    RunPool pool(pool_of(1));
    on_fiber(pool, on, ended);
    ASSERT_TRUE(ended.wait_for(1));
  }
  ASSERT_TRUE(on.result && *on.result);
  EXPECT_EQ((*on.result)->text, "sync on");

  // No fiber: the provider's start is never tried, complete() answers on this thread.
  LoopRun off(async, "off");
  EXPECT_EQ(current_suspender(), nullptr);
  off.run();
  ASSERT_TRUE(off.result && *off.result);
  EXPECT_EQ((*off.result)->text, "sync");
  EXPECT_EQ(async.started.value(), 0u);
}

// Only inside a SuspendPoint (the loop's model call) may a fiber suspend: a tool, a hook or a
// memory call may hold locks that a suspension would carry to another thread.
TEST(ServeRunFiber, AFiberSuspendsOnlyInsideASuspendPoint) {
  bool outside = true, inside = false, after = true;
  run_one_fiber([&] {
    outside = current_suspender() != nullptr;
    {
      const SuspendPoint here;
      inside = current_suspender() != nullptr;
    }
    after = current_suspender() != nullptr;
  });
  EXPECT_FALSE(outside);
  EXPECT_TRUE(inside);
  EXPECT_FALSE(after);
  const SuspendPoint off_fiber;
  EXPECT_EQ(current_suspender(), nullptr);
}

// A declared wait (kernex::BlockingScope) holds its thread, even inside a SuspendPoint: it must
// end on the thread, and the pool, it began on.
TEST(ServeRunFiber, NothingSuspendsInsideABlockingScope) {
  bool declared = true, after = false;
  run_one_fiber([&] {
    const SuspendPoint here;
    {
      const kernex::BlockingScope waiting;
      declared = current_suspender() != nullptr;
    }
    after = current_suspender() != nullptr;
  });
  EXPECT_FALSE(declared);
  EXPECT_TRUE(after);
}

// Twenty fibers wait on their sockets with one pool thread; each wakes when its peer writes.
TEST(ServeRunFiber, SocketWaitsHoldNoThreadAndTimeOut) {
  constexpr int kFibers = 20;
  std::vector<std::array<int, 2>> pairs(kFibers);
  for (auto& p : pairs) ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, p.data()), 0);
  Counter waiting, ended;
  std::vector<int> results(kFibers, -2), timed(kFibers, -2);
  {
    RunPool pool(pool_of(1));
    for (int i = 0; i < kFibers; ++i) {
      ASSERT_TRUE(RunFiber::start(
          [&, i] {
            const SuspendPoint may_suspend;
            const int fd = pairs[static_cast<std::size_t>(i)][0];
            timed[static_cast<std::size_t>(i)] = wait_fd(fd, POLLIN, 1);  // nothing comes: 0
            waiting.add();
            short revents = 0;
            results[static_cast<std::size_t>(i)] = wait_fd(fd, POLLIN, -1, &revents);
            if (!(revents & POLLIN)) results[static_cast<std::size_t>(i)] = -3;
            ended.add();
          },
          128u << 10, submit_to(pool)));
    }
    ASSERT_TRUE(waiting.wait_for(kFibers)) << "one thread: a waiting fiber would hold it";
    for (auto& p : pairs) ASSERT_EQ(::write(p[1], "x", 1), 1);
    ASSERT_TRUE(ended.wait_for(kFibers));
  }
  for (int i = 0; i < kFibers; ++i) {
    EXPECT_EQ(timed[static_cast<std::size_t>(i)], 0) << i;
    EXPECT_EQ(results[static_cast<std::size_t>(i)], 1) << i;
  }
  for (auto& p : pairs) {
    ::close(p[0]);
    ::close(p[1]);
  }
}

// A descriptor epoll cannot watch (a regular file) is ready, as poll() says, not an error.
TEST(ServeRunFiber, AWaitOnARegularFileIsReadyAsWithPoll) {
  char path[] = "/tmp/kernex-fiber-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  int ready = -2;
  short revents = 0;
  run_one_fiber([&] {
    const SuspendPoint may_suspend;
    ready = wait_fd(fd, POLLIN, 1000, &revents);
  });
  ::close(fd);
  EXPECT_EQ(ready, 1);
  EXPECT_TRUE(revents & POLLIN);
}

// A size no other case uses: the stack cache is the process's.
constexpr std::size_t kReservedKib = 200;

TEST(ServeRunFiber, ReservedStacksServeTheFirstRunsAndAreKeptAfter) {
  constexpr std::size_t kRuns = 100;  // more than the 64 kept without a reserve
  ASSERT_EQ(RunFiber::reserve(kRuns, kReservedKib << 10), kRuns);
  EXPECT_EQ(RunFiber::kept(kReservedKib << 10), kRuns);
  EXPECT_EQ(RunFiber::reserve(kRuns, kReservedKib << 10), kRuns) << "a second reserve adds none";
  EXPECT_EQ(RunFiber::kept((kReservedKib + 4) << 10), 0u) << "another size is not served";

  HeldProvider provider;
  Counter ended;
  std::vector<std::unique_ptr<LoopRun>> runs;
  {
    RunPool pool(pool_of(2));
    for (std::size_t i = 0; i < kRuns; ++i) {
      runs.push_back(std::make_unique<LoopRun>(provider, "r" + std::to_string(i)));
      LoopRun* run = runs.back().get();
      ASSERT_TRUE(RunFiber::start(
          [run, &ended] {
            run->run();
            ended.add();
          },
          kReservedKib << 10, submit_to(pool)));
    }
    ASSERT_TRUE(provider.started.wait_for(kRuns));
    // Every run waits on its model on a stack of the reserve: none is left, none was mapped anew.
    EXPECT_EQ(RunFiber::kept(kReservedKib << 10), 0u);
    provider.answer_all();
    ASSERT_TRUE(ended.wait_for(kRuns));
  }  // the pool's threads joined: every fiber has given its stack back
  EXPECT_EQ(RunFiber::kept(kReservedKib << 10), kRuns) << "kept as many as were reserved";
  for (std::size_t i = 0; i < kRuns; ++i) {
    ASSERT_TRUE(runs[i]->result && *runs[i]->result) << i;
    EXPECT_EQ((*runs[i]->result)->text, "re: r" + std::to_string(i));
  }
}

// A reused stack is a whole stack again: a run deep in its stack, then runs on the same stacks.
TEST(ServeRunFiber, AReservedStackIsWholeForEachRun) {
  ASSERT_GE(RunFiber::reserve(2, kReservedKib << 10), 2u);
  for (int round = 0; round < 3; ++round) {
    Counter ended;
    RunPool pool(pool_of(1));
    std::atomic<std::size_t> sum{0};
    ASSERT_TRUE(RunFiber::start(
        [&] {
          // ~100 KiB of the 200 KiB stack, written and read back.
          std::array<unsigned char, 100u << 10> deep{};
          for (std::size_t i = 0; i < deep.size(); ++i)
            deep[i] = static_cast<unsigned char>(i + round);
          std::size_t s = 0;
          for (unsigned char b : deep) s += b;
          sum = s;
          ended.add();
        },
        kReservedKib << 10, submit_to(pool)));
    ASSERT_TRUE(ended.wait_for(1));
    std::size_t want = 0;
    for (std::size_t i = 0; i < (100u << 10); ++i)
      want += static_cast<unsigned char>(i + static_cast<std::size_t>(round));
    EXPECT_EQ(sum.load(), want) << round;
  }
}

}  // namespace
