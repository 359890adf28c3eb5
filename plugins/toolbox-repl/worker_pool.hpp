// Pre-started REPL workers, so that a new session's first call does not wait for the interpreter
// to start. Workers are kept per sandbox policy (the key names it: workspace and read grants, so
// different tenants never meet), handed out once and never taken back: a worker's state and files
// die with the one session that took it. One background thread refills what was taken, once the
// call that took it has returned (or kQuiet has passed): a start takes tens of milliseconds of CPU,
// which would otherwise be taken from that very call (its code and the tools it calls) wherever
// the CPUs are busy, and lands instead in the model's turn that follows.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/sandbox/policy.hpp"
#include "repl_session.hpp"

namespace kernex::repl {

class WorkerPool {
 public:
  using Clock = std::chrono::steady_clock;
  using Policy = std::shared_ptr<const sandbox::Policy>;
  // Warm workers are kept for this many keys, the most recently used ones.
  static constexpr std::size_t kMaxKeys = 4;
  // The longest a key's refill waits for the call that took its worker (done()).
  static constexpr std::chrono::milliseconds kQuiet{250};

  // `per_key` workers are kept ready for each key; 0 disables the pool (no thread, take() finds
  // nothing and take_or_start() always starts afresh).
  WorkerPool(std::size_t per_key, std::string python, std::chrono::milliseconds startup_timeout);
  // Stops the thread (a start in flight is cancelled) and kills every idle worker.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  using MakePolicy = std::function<Result<Policy>()>;

  // Starts keeping `key` warm, in the background (e.g. the default key when the toolbox is made):
  // its policy is made there too, by `make`, unless the key already has one.
  void prewarm(const std::string& key, MakePolicy make);
  // A live pre-started worker for `key`, now the caller's alone, or nullptr when none is ready
  // (workers that died while idle are discarded). Either way `key` becomes the most recently used
  // and is refilled in the background.
  std::unique_ptr<ReplSession> take(const std::string& key, Policy policy);
  // take(), or else a worker started now under `policy`.
  Result<std::unique_ptr<ReplSession>> take_or_start(const std::string& key, Policy policy);
  // The call that took a worker of `key` returned: its refill may start now.
  void done(const std::string& key);

  // Calls done(key) when it goes (no key: nothing was taken).
  class Taken {
   public:
    Taken(WorkerPool& pool, std::optional<std::string> key) : pool_(pool), key_(std::move(key)) {}
    ~Taken() {
      if (key_) pool_.done(*key_);
    }
    Taken(const Taken&) = delete;
    Taken& operator=(const Taken&) = delete;

   private:
    WorkerPool& pool_;
    std::optional<std::string> key_;
  };

  // What the pool has done, for tests and benchmarks.
  struct Stats {
    std::size_t started = 0;  // workers started in the background
    std::size_t failed = 0;   // background starts that failed
    std::size_t handed_out = 0;
    std::size_t discarded = 0;  // found dead when taken
  };
  Stats stats() const;
  std::size_t idle(const std::string& key) const;
  // Waits until `key` has `count` idle workers or `deadline` passes; true when it has them.
  bool wait_idle(const std::string& key, std::size_t count, Clock::time_point deadline);

 private:
  struct Entry {
    Policy policy;  // null until made by `make` (prewarm)
    MakePolicy make;
    std::deque<std::unique_ptr<ReplSession>> idle;  // oldest first
    bool starting = false;
    bool failing = false;  // the last start failed: not retried until the key is used again
    Clock::time_point quiet_until{};  // no refill before (a call that took a worker runs)
  };
  using Workers = std::vector<std::unique_ptr<ReplSession>>;

  // Makes `key` the most recently used, dropping the least recently used key past kMaxKeys (its
  // workers go to `doomed`, killed outside the lock).
  Entry& touch(const std::string& key, Workers& doomed);
  // The most recently used key short of workers and not quiet at `now`, or nullptr; `next`: the
  // earliest end of a quiet time that holds back a key short of workers (else unchanged).
  const std::string* wanting(Clock::time_point now, Clock::time_point& next) const;
  void refill(std::stop_token stop);
  // Starts one worker for `entry` (the lock is released meanwhile) and files it under `key`.
  void start_one(const std::string& key, Entry& entry, std::unique_lock<std::mutex>& lock,
                 std::stop_token stop);

  const std::size_t per_key_;
  const std::string python_;
  const std::chrono::milliseconds startup_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;  // a key wants workers, a worker is ready, or stop
  std::list<std::string> recent_;        // keys, most recently used first
  std::map<std::string, Entry> entries_;
  Stats stats_;
  std::jthread thread_;  // last: stopped and joined before the workers are killed
};

}  // namespace kernex::repl
