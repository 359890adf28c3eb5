#include "worker_pool.hpp"

#include <algorithm>
#include <utility>

#include "kernex/log.hpp"

namespace kernex::repl {

WorkerPool::WorkerPool(std::size_t per_key, std::string python,
                       std::chrono::milliseconds startup_timeout)
    : per_key_(per_key), python_(std::move(python)), startup_timeout_(startup_timeout) {
  if (per_key_ > 0) thread_ = std::jthread([this](std::stop_token stop) { refill(stop); });
}

WorkerPool::~WorkerPool() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  // entries_ goes next: each idle worker's process group is killed and reaped.
}

WorkerPool::Entry& WorkerPool::touch(const std::string& key, Workers& doomed) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    recent_.remove(key);
  } else {
    while (recent_.size() >= kMaxKeys) {
      for (auto& w : entries_.at(recent_.back()).idle) doomed.push_back(std::move(w));
      // A start in flight for it finds the entry gone and kills its worker.
      entries_.erase(recent_.back());
      recent_.pop_back();
    }
    it = entries_.emplace(key, Entry{}).first;
  }
  recent_.push_front(key);
  it->second.failing = false;
  return it->second;
}

void WorkerPool::prewarm(const std::string& key, MakePolicy make) {
  if (per_key_ == 0) return;
  Workers doomed;
  {
    std::lock_guard lock(mutex_);
    Entry& entry = touch(key, doomed);
    if (!entry.policy) entry.make = std::move(make);
  }
  changed_.notify_all();
}

std::unique_ptr<ReplSession> WorkerPool::take(const std::string& key, Policy policy) {
  if (per_key_ == 0) return nullptr;
  Workers doomed;  // killed (and reaped) after the lock is released
  std::unique_ptr<ReplSession> worker;
  {
    std::lock_guard lock(mutex_);
    Entry& entry = touch(key, doomed);
    entry.policy = std::move(policy);
    while (!worker && !entry.idle.empty()) {
      auto candidate = std::move(entry.idle.front());
      entry.idle.pop_front();
      // A cheap check (a poll of the worker's pidfd): one that died while idle is never handed out.
      if (candidate->alive()) {
        worker = std::move(candidate);
        ++stats_.handed_out;
        entry.quiet_until = Clock::now() + kQuiet;
      } else {
        ++stats_.discarded;
        doomed.push_back(std::move(candidate));
      }
    }
  }
  changed_.notify_all();
  return worker;
}

void WorkerPool::done(const std::string& key) {
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    it->second.quiet_until = {};
  }
  changed_.notify_all();
}

Result<std::unique_ptr<ReplSession>> WorkerPool::take_or_start(const std::string& key,
                                                               Policy policy) {
  if (auto warm = take(key, policy)) return warm;
  return ReplSession::start(*policy, python_, startup_timeout_);
}

WorkerPool::Stats WorkerPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::size_t WorkerPool::idle(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.idle.size();
}

bool WorkerPool::wait_idle(const std::string& key, std::size_t count, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] {
    auto it = entries_.find(key);
    return it != entries_.end() && it->second.idle.size() >= count;
  });
}

const std::string* WorkerPool::wanting(Clock::time_point now, Clock::time_point& next) const {
  for (const auto& key : recent_) {
    const Entry& entry = entries_.at(key);
    if (entry.starting || entry.failing || entry.idle.size() >= per_key_) continue;
    if (entry.quiet_until <= now) return &key;
    next = std::min(next, entry.quiet_until);
  }
  return nullptr;
}

// The pool's one thread: starts a worker for the most recently used key short of them, one at a
// time (a start takes tens of milliseconds of CPU, which the callers' own work shares).
void WorkerPool::refill(std::stop_token stop) {
  constexpr Clock::time_point kNever = Clock::time_point::max();
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    Clock::time_point next = kNever;
    const std::string* wanted = wanting(Clock::now(), next);
    if (wanted == nullptr) {
      // Until a key wants a worker now, or one is held back to an earlier time than `next` (a
      // take); a key's quiet time ending is a wake-up of its own.
      auto changed = [&] {
        Clock::time_point earliest = kNever;
        return wanting(Clock::now(), earliest) != nullptr || earliest < next;
      };
      if (next == kNever) {
        changed_.wait(lock, stop, changed);
      } else {
        changed_.wait_until(lock, stop, next, changed);
      }
      continue;  // the stop is asked on its own: wait() answers the predicate even once stopped
    }
    const std::string key = *wanted;
    start_one(key, entries_.at(key), lock, stop);
  }
}

void WorkerPool::start_one(const std::string& key, Entry& entry, std::unique_lock<std::mutex>& lock,
                           std::stop_token stop) {
  entry.starting = true;
  Policy policy = entry.policy;
  const MakePolicy make = policy ? MakePolicy{} : entry.make;
  lock.unlock();  // `entry` may be dropped from here on (touch): looked up again below
  Result<std::unique_ptr<ReplSession>> started =
      fail(ErrorCode::Sandbox, "no policy to start under");
  if (!policy && make) {
    auto made = make();
    if (made)
      policy = *made;
    else
      started = std::unexpected(made.error());
  }
  if (policy) started = ReplSession::start(*policy, python_, startup_timeout_, stop);
  lock.lock();
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.starting = false;
    if (!it->second.policy) it->second.policy = policy;
  }
  if (!started) {
    if (stop.stop_requested()) return;
    ++stats_.failed;
    if (it != entries_.end()) it->second.failing = true;
    // The session that wants one starts it itself and reports why that failed.
    log(LogLevel::Debug,
        "toolbox-repl: a pool worker did not start: " + started.error().describe());
    return;
  }
  ++stats_.started;
  if (it == entries_.end()) {
    // The key was dropped while its worker started: killed here, outside the lock.
    lock.unlock();
    started->reset();
    lock.lock();
    return;
  }
  it->second.idle.push_back(std::move(*started));
  changed_.notify_all();
}

}  // namespace kernex::repl
