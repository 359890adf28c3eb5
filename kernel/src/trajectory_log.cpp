#include "trajectory_log.hpp"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <vector>

#include "random_bits.hpp"
#include "trajectory_segment_writer.hpp"

namespace kernex::detail {

TrajectoryLog& TrajectoryLog::instance() {
  static TrajectoryLog log;
  return log;
}

TrajectoryLog::TrajectoryLog() : thread_([this] { loop(); }) {}

TrajectoryLog::~TrajectoryLog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<TrajectoryLog::Ticket> TrajectoryLog::enqueue(const std::filesystem::path& root,
                                                              const std::string& day,
                                                              const std::string& run_id,
                                                              std::string line,
                                                              std::size_t segment_bytes) {
  auto ticket = std::make_shared<Ticket>();
  if (::getpid() != pid_) {
    // A fork without exec has no writer thread: the event is lost, the child does not hang.
    ticket->done = true;
    return ticket;
  }
  Item item{root.string() + '\0' + day, root / day, run_id, std::move(line), segment_bytes, ticket};
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
  }
  work_.notify_one();
  return ticket;
}

bool TrajectoryLog::wait(const Ticket& ticket) {
  if (::getpid() != pid_) return false;
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return ticket.done; });
  return ticket.ok;
}

void TrajectoryLog::prepare(const std::filesystem::path& root, const std::string& day,
                            std::size_t segment_bytes) {
  if (::getpid() != pid_) return;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Item{root.string() + '\0' + day, root / day, "", "", segment_bytes, nullptr});
  }
  work_.notify_one();
}

// Group commit: whatever the runs queued while the last batch was written goes in the next one.
void TrajectoryLog::loop() {
  SegmentWriter writer;
  std::vector<Item> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
    }
    writer.write_batch(batch);
    {
      std::lock_guard lock(mu_);
      for (auto& item : batch)
        if (item.ticket) item.ticket->done = true;
    }
    done_.notify_all();
    batch.clear();
  }
}

// Per second plus 24 random bits, drawn again when this process already gave the id out: runs
// share segment files, so two runs of one id would read back as one.
std::string TrajectoryLog::new_run_id() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::lock_guard lock(ids_mu_);
  if (ids_second_ != stamp) {
    ids_second_ = stamp;
    ids_.clear();
  }
  for (;;) {
    char suffix[8];
    std::snprintf(suffix, sizeof suffix, "%06x", static_cast<unsigned>(random_u64() & 0xffffffu));
    std::string id = std::string(stamp) + "-" + suffix;
    if (ids_.insert(id).second) return id;
  }
}

}  // namespace kernex::detail
