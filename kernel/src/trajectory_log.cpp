#include "trajectory_log.hpp"

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <utility>

#include "kernex/trajectory_segments.hpp"
#include "random_bits.hpp"
#include "trajectory_segment_writer.hpp"

namespace kernex::detail {
namespace {

// Set in the child of a fork() without exec, where the log's lock may be held by a thread that
// was not copied: the child writes nothing (lost, not hung). A flag set by pthread_atfork rather
// than getpid() compared on every call: each getpid is a system call, ~2 µs on this project's
// VMs and six a run. Children the handler does not see (vfork, posix_spawn, _Fork, a bare clone
// such as the sandbox's) only exec, and run none of this code.
std::atomic<bool> forked{false};

bool in_forked_child() { return forked.load(std::memory_order_relaxed); }

TrajectoryLog::Item item_of(const std::filesystem::path& root, const std::string& day,
                            const std::string& run_id, std::string line, std::size_t segment_bytes,
                            std::shared_ptr<TrajectoryLog::Ticket> ticket) {
  return {root.string() + '\0' + day, root / day, run_id, std::move(line), segment_bytes,
          std::move(ticket)};
}

}  // namespace

TrajectoryLog& TrajectoryLog::instance() {
  static TrajectoryLog log;
  return log;
}

TrajectoryLog::TrajectoryLog()
    : writer_(std::make_unique<SegmentWriter>()), thread_([this] { prepare_loop(); }) {
  ::pthread_atfork(nullptr, nullptr, [] { forked.store(true, std::memory_order_relaxed); });
}

TrajectoryLog::~TrajectoryLog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  prepare_work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<TrajectoryLog::Ticket> TrajectoryLog::enqueue(const std::filesystem::path& root,
                                                              const std::string& day,
                                                              const std::string& run_id,
                                                              std::string line,
                                                              std::size_t segment_bytes) {
  auto ticket = std::make_shared<Ticket>();
  if (in_forked_child()) {
    // A fork without exec: the lock may be held by a thread that is not there. Lost, not hung.
    ticket->done = true;
    return ticket;
  }
  Item item = item_of(root, day, run_id, std::move(line), segment_bytes, ticket);
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(item));
  ++queued_;
  return ticket;
}

// The log's thread is woken by the first line posted since its last batch: lines posted while it
// writes ride in its next one (a burst's run_starts in a few write(2)s, not one each).
void TrajectoryLog::post(const std::filesystem::path& root, const std::string& day,
                         const std::string& run_id, std::string line, std::size_t segment_bytes) {
  if (in_forked_child()) return;
  Item item = item_of(root, day, run_id, std::move(line), segment_bytes, nullptr);
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
    ++queued_;
    wake = !std::exchange(posted_, true);
  }
  if (wake) prepare_work_.notify_one();
}

// Takes the writer, writes what is queued (and any pending segment creations), gives it back.
// Called and returns with `lock` held.
void TrajectoryLog::write_queued(std::unique_lock<std::mutex>& lock) {
  writing_ = true;
  std::vector<Item> batch;
  batch.swap(prepares_);
  batch.insert(batch.end(), std::make_move_iterator(queue_.begin()),
               std::make_move_iterator(queue_.end()));
  queue_.clear();
  posted_ = false;  // every posted line is in this batch
  const std::uint64_t through = queued_;
  lock.unlock();
  writer_->write_batch(batch);
  lock.lock();
  written_ = through;  // batches are written one at a time, each taking all that was queued
  for (auto& item : batch)
    if (item.ticket) item.ticket->done = true;
  writing_ = false;
  done_.notify_all();
}

void TrajectoryLog::flush() {
  if (in_forked_child()) return;
  std::unique_lock lock(mu_);
  const std::uint64_t target = queued_;
  write_until(lock, [&] { return written_ >= target; });
}

bool TrajectoryLog::wait(const Ticket& ticket) {
  if (in_forked_child()) return ticket.ok;
  std::unique_lock lock(mu_);
  write_until(lock, [&] { return ticket.done; });
  return ticket.ok;
}

void TrajectoryLog::prepare(const std::filesystem::path& root, const std::string& day,
                            std::size_t segment_bytes) {
  if (in_forked_child()) return;
  {
    std::lock_guard lock(mu_);
    std::string key = root.string() + '\0' + day;
    if (day != prepared_day_) {
      prepared_.clear();
      prepared_day_ = day;
    }
    // A wake of the log's thread and four system calls a run, for a folder an earlier run made.
    if (!prepared_.insert(key).second) return;
    prepares_.push_back(Item{std::move(key), root / day, "", "", segment_bytes, nullptr});
  }
  prepare_work_.notify_one();
}

// Segment files are made here, off the runs' threads, so a run's first event finds its day's
// segment made (or rides in the batch that makes it); posted lines are written here too. At the
// end, what is still queued is written before the thread goes.
void TrajectoryLog::prepare_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    prepare_work_.wait(lock, [&] { return stop_ || !prepares_.empty() || posted_; });
    if (writing_) {
      done_.wait(lock);  // the batch being written takes the pending work, or the next does
      continue;
    }
    if (!prepares_.empty() || !queue_.empty()) {
      write_queued(lock);
      continue;  // what was posted meanwhile (at the end too: nothing queued is left behind)
    }
    if (stop_) return;
  }
}

// Per second plus 24 random bits, drawn again when this process already gave the id out: runs
// share segment files, so two runs of one id would read back as one.
std::string TrajectoryLog::new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::lock_guard lock(ids_mu_);
  if (ids_second_ != now) {
    ids_second_ = now;
    ids_.clear();
  }
  for (;;) {
    std::string id = format_run_id(now, static_cast<std::uint32_t>(random_u64()));
    if (ids_.insert(id).second) return id;
  }
}

}  // namespace kernex::detail

namespace kernex {

void flush_trajectories() { detail::TrajectoryLog::instance().flush(); }

}  // namespace kernex
