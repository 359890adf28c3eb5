#include "kernex/group_commit.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "kernex/suspend.hpp"

namespace kernex {
namespace {
thread_local const GroupCommit* running = nullptr;  // the writer whose batch this thread runs

// One item's work; what it throws is its error.
Result<void> run_work(const GroupCommit::Work& work) {
  try {
    return work();
  } catch (const std::exception& e) {
    return fail(ErrorCode::Internal, std::string("group commit: a write threw: ") + e.what());
  } catch (...) {
    return fail(ErrorCode::Internal, "group commit: a write threw a non-standard exception");
  }
}

// The batch's first try, without a savepoint per item: items nearly always succeed, and a
// SAVEPOINT and its RELEASE per item cost a turn's write two more statements and, with FTS5
// tables in the transaction, a flush of the full-text index per savepoint. True when the batch is
// settled (committed, or failed as a whole before any item ran, or its only item failed); false
// when an item failed among others: everything was rolled back and the batch runs again with
// savepoints, so that item fails alone. Items may run more than once (group_commit.hpp).
template <class Items>
bool whole_batch(BatchTarget& target, Items& batch, std::vector<Result<void>>& results,
                 bool durable) {
  const auto all = [&](const Result<void>& r) {
    for (auto& slot : results) slot = r;
  };
  if (auto begun = target.begin(durable); !begun) {
    all(begun);
    return true;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Result<void> r = run_work(batch[i].work);
    if (r && target.open()) continue;
    target.rollback();
    if (batch.size() > 1) return false;
    results[0] = r ? fail(ErrorCode::Internal, "group commit: an item ended the batch") : r;
    return true;
  }
  if (auto committed = target.commit(); !committed) {
    target.rollback();
    all(committed);
    return true;
  }
  for (auto& slot : results) slot = {};
  return true;
}
}  // namespace

bool GroupCommit::on_writer_thread() const { return running == this; }

bool GroupCommit::direct_from_env() {
  const char* v = std::getenv("KERNEX_GROUP_COMMIT");
  return v != nullptr && std::string_view(v) == "off";
}

namespace {
// `name`'s microseconds (0 to 1 s), else `fallback`.
std::chrono::microseconds micros_from_env(const char* name, std::chrono::microseconds fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || us < 0 || us > 1'000'000) return fallback;
  return std::chrono::microseconds(us);
}
}  // namespace

std::chrono::microseconds GroupCommit::commit_delay_from_env() {
  return micros_from_env("KERNEX_COMMIT_DELAY_US", std::chrono::microseconds(0));  // the header
}

std::chrono::microseconds GroupCommit::busy_delay_from_env() {
  return micros_from_env("KERNEX_BUSY_DELAY_US", std::chrono::microseconds(300));  // the header
}

GroupCommit::GroupCommit(std::unique_ptr<BatchTarget> target, Options options)
    : target_(std::move(target)), options_(options) {
  options_.max_batch = std::max<std::size_t>(1, options_.max_batch);
  if (!options_.direct) thread_ = std::thread([this] { loop(); });
}

GroupCommit::~GroupCommit() {
  if (options_.direct) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  filled_.notify_all();
  thread_.join();
}

void GroupCommit::enqueue(Item item) {
  if (options_.direct) {
    std::vector<Item> one;
    one.push_back(std::move(item));
    std::lock_guard lock(direct_mutex_);
    auto results = run_batch(one);
    running = this;  // a write from the callback is refused too
    if (one[0].done) one[0].done(results[0]);
    running = nullptr;
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      const bool first = queue_.empty(), lazy = item.lazy;
      if (lazy && first) lazy_since_ = std::chrono::steady_clock::now();
      if (!lazy) ++eager_;
      queue_.push_back(std::move(item));
      // A lazy item behind others wakes nobody: whoever put the first of them there already woke
      // the writer (or leads a batch that takes them). Nor does the first while the writer is in
      // a timed wait (loop()): it wakes before that item's delay is up. A wake here was a futex
      // call and a thread switch per run for a writer that only went back to sleep.
      if (lazy) lazy_seen_ = true;
      if (!lazy || (first && !polling_)) {
        ++stats_.writer_wakes;
        wake_.notify_one();
      }
      if (delaying_ && delay_can_end()) filled_.notify_one();
      return;
    }
  }
  if (item.done) item.done(fail(ErrorCode::Internal, "group commit: the writer has stopped"));
}

Result<void> GroupCommit::write(Work work, bool durable) {
  if (on_writer_thread())
    return fail(ErrorCode::Internal,
                "group commit: a write from inside a batch would wait on itself");
  if (options_.direct) return submit(std::move(work), durable).get();
  Waiter waiter;
  // Waiting on the batch, or leading it (its fsync): a pool may lend another thread meanwhile.
  const BlockingScope waiting;
  std::unique_lock lock(mutex_);
  if (stopping_) return fail(ErrorCode::Internal, "group commit: the writer has stopped");
  queue_.push_back(Item{std::move(work), {}, durable, false, &waiter});
  ++eager_;
  if (delaying_ && delay_can_end()) filled_.notify_one();
  while (!waiter.done) {
    if (committing_) {
      waiter.settled.wait(lock);
    } else {
      commit_front(lock, true);
    }
  }
  return std::move(waiter.result);
}

std::future<Result<void>> GroupCommit::submit(Work work, bool durable) {
  auto promise = std::make_shared<std::promise<Result<void>>>();
  auto future = promise->get_future();
  submit(std::move(work), durable, [promise](const Result<void>& r) { promise->set_value(r); });
  return future;
}

void GroupCommit::submit(Work work, bool durable, Done done) {
  enqueue(Item{std::move(work), std::move(done), durable, false});
}

void GroupCommit::submit_lazy(Work work, Done done) {
  enqueue(Item{std::move(work), std::move(done), false, true});
}

GroupCommit::Stats GroupCommit::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void GroupCommit::loop() {
  std::unique_lock lock(mutex_);
  const auto ready = [&] { return !committing_ && (stopping_ || !queue_.empty()); };
  for (;;) {
    if (lazy_seen_) {
      // Lazy items came since the last wait: the writer polls every half lazy_delay while they
      // keep coming, so they need not wake it (each run queues one, and its own write leads the
      // batch that takes it). Quiet for a whole period, it sleeps until woken again.
      lazy_seen_ = false;
      polling_ = true;
      wake_.wait_for(lock, options_.lazy_delay / 2, ready);
      polling_ = false;
      if (!ready()) continue;
    } else {
      wake_.wait(lock, ready);
    }
    if (queue_.empty()) return;  // stopping, everything committed
    // Only lazy items: they wait for a write someone waits on, or for their delay. A lazy item
    // queued meanwhile (the first again once a write's batch took these) wakes nobody either: this
    // wait ends no later than that item's delay. It woke the writer once a run, for nothing (a
    // futex call and two thread switches, and the mutex taken against the run's own thread).
    if (eager_ == 0 && !stopping_) {
      polling_ = true;
      wake_.wait_until(lock, lazy_since_ + options_.lazy_delay,
                       [&] { return stopping_ || eager_ > 0; });
      polling_ = false;
      if (committing_ || queue_.empty()) continue;
    }
    commit_front(lock, false);
  }
}

// commit_delay for a durable batch while durable writers are busy, busy_delay for any batch with
// an eager item while callers are busy: the leader holds the batch open that long for more items,
// or until it is full. A busy_delay also ends once as many eager items are queued as the last
// batch had: the company it waits for is there (two clients then wait for each other, not 300 µs).
void GroupCommit::delay(std::unique_lock<std::mutex>& lock) {
  auto wait = std::chrono::microseconds::zero();
  if (last_eager_items_ > 1 && eager_ > 0) wait = options_.busy_delay;
  if (last_durable_items_ > 1 &&
      std::any_of(queue_.begin(), queue_.end(), [](const Item& i) { return i.durable; }))
    wait = std::max(wait, options_.commit_delay);
  if (wait.count() <= 0) return;
  delaying_ = true;
  company_ends_delay_ = wait == options_.busy_delay;
  filled_.wait_for(lock, wait, [&] { return stopping_ || delay_can_end(); });
  delaying_ = false;
}

bool GroupCommit::delay_can_end() const {
  return queue_.size() >= options_.max_batch ||
         (company_ends_delay_ && eager_ >= last_eager_items_);
}

void GroupCommit::commit_front(std::unique_lock<std::mutex>& lock, bool leader) {
  committing_ = true;
  delay(lock);
  std::vector<Item> batch;
  while (!queue_.empty() && batch.size() < options_.max_batch) {
    if (!queue_.front().lazy) --eager_;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  // Items left over keep the time lazy_since_ has (no later than the arrival of any of them): their
  // delay runs from when they came. Set to now here, a steady stream of more than max_batch lazy
  // items a delay waited longer and longer (max_batch committed per delay).
  lock.unlock();
  auto results = run_batch(batch);
  settle(batch, results);
  const auto durable = static_cast<std::size_t>(
      std::count_if(batch.begin(), batch.end(), [](const Item& i) { return i.durable; }));
  const auto eager = static_cast<std::size_t>(
      std::count_if(batch.begin(), batch.end(), [](const Item& i) { return !i.lazy; }));
  lock.lock();
  if (durable > 0) last_durable_items_ = durable;
  if (eager > 0) last_eager_items_ = eager;
  committing_ = false;
  // The writer goes on with the rest (or stops). With nothing left it has nothing to do: woken, it
  // would only take mutex_ and sleep again, a futex round trip on every lone write.
  if (leader && (stopping_ || !queue_.empty())) {
    ++stats_.writer_wakes;
    wake_.notify_one();
  }
}

// In the items' order, as their writes were: a write() that returns has seen the callbacks of
// the items queued before it run (a store's bookkeeping in them is done).
void GroupCommit::settle(std::vector<Item>& batch, std::vector<Result<void>>& results) {
  running = this;  // a write from a callback is refused too
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (Waiter* w = batch[i].waiter) {
      std::lock_guard lock(mutex_);
      w->result = std::move(results[i]);
      w->done = true;
      w->settled.notify_one();
    } else if (batch[i].done) {
      batch[i].done(results[i]);
    }
  }
  running = nullptr;
}

std::vector<Result<void>> GroupCommit::run_batch(std::vector<Item>& batch) {
  std::vector<Result<void>> results(batch.size());
  std::vector<bool> settled(batch.size(), false);
  const bool durable = std::any_of(batch.begin(), batch.end(), [](auto& i) { return i.durable; });
  running = this;
  if (!whole_batch(*target_, batch, results, durable)) {
    // Each failed attempt settles one more item (the one that lost the transaction): bounded.
    for (std::size_t tries = 0; tries <= batch.size(); ++tries) {
      if (attempt(batch, results, settled, durable)) break;
    }
  }
  running = nullptr;
  const auto failed = static_cast<std::uint64_t>(
      std::count_if(results.begin(), results.end(), [](const auto& r) { return !r; }));
  // Counted before anyone is told: a caller that reads them after its write sees its batch.
  std::lock_guard lock(mutex_);
  ++stats_.batches;
  stats_.items += batch.size();
  stats_.failed_items += failed;
  if (durable) ++stats_.durable_batches;
  return results;
}

bool GroupCommit::attempt(std::vector<Item>& batch, std::vector<Result<void>>& results,
                          std::vector<bool>& settled, bool durable) {
  if (auto begun = target_->begin(durable); !begun) {
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (!settled[i]) results[i] = begun;
    return true;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (settled[i]) continue;
    Result<void> r = target_->mark();
    if (r) {
      r = run_work(batch[i].work);
      if (r) r = target_->release();
    }
    results[i] = r;
    if (!r) {
      target_->undo();
      settled[i] = true;
    }
    if (!target_->open()) {
      // The database dropped the transaction: this item is to blame, the others run again.
      if (r) results[i] = fail(ErrorCode::Internal, "group commit: an item ended the batch");
      settled[i] = true;
      target_->rollback();
      return false;
    }
  }
  if (auto committed = target_->commit(); !committed) {
    target_->rollback();
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (!settled[i]) results[i] = committed;
  }
  return true;
}

}  // namespace kernex
