// The process's one trajectory log: every run's events, from every thread, appended in batches
// (group commit: one write(2) per segment per batch) into per-day segment files with an index
// (kernex/trajectory_segments.hpp has the layout).
#pragma once

#include <condition_variable>
#include <ctime>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kernex::detail {

class SegmentWriter;

class TrajectoryLog {
 public:
  // What a caller waits on: done once the batch it rode in was handed to the kernel.
  struct Ticket {
    bool done = false;
    bool ok = false;
  };
  struct Item {
    std::string key;  // root + '\0' + day
    std::filesystem::path dir;
    std::string run_id;  // empty: make the segment exist, nothing to write
    std::string line;
    std::size_t segment_bytes = 0;
    std::shared_ptr<Ticket> ticket;
  };

  static TrajectoryLog& instance();
  ~TrajectoryLog();

  // Queues one event line (no newline) of `run_id` for `<root>/<day>/`. Calls from one run are
  // written in the order they were queued.
  std::shared_ptr<Ticket> enqueue(const std::filesystem::path& root, const std::string& day,
                                  const std::string& run_id, std::string line,
                                  std::size_t segment_bytes);
  // Returns once the ticket's batch is written: an event survives a kill -9 of the process once
  // record() returned, as with the per-run file it replaces. The caller that finds no batch being
  // written writes everything queued so far (its own and other runs' events); the others wait for
  // it and ride along. False when the write failed.
  bool wait(const Ticket& ticket);
  // Queues one event line like enqueue, with no ticket: the log's own thread writes it (with
  // whatever else is queued by then) unless a waiter's batch takes it first. Does not wait.
  void post(const std::filesystem::path& root, const std::string& day, const std::string& run_id,
            std::string line, std::size_t segment_bytes);
  // Returns once every line queued before the call is written (kernex::flush_trajectories).
  void flush();
  // Makes `<root>/<day>/`'s segment exist ahead of the run's first event, on the log's own
  // thread; does not wait. Once per folder and day: later runs find it made (a write makes a
  // segment anyway when there is none, a removed folder included).
  void prepare(const std::filesystem::path& root, const std::string& day,
               std::size_t segment_bytes);
  // A run id ("YYYYMMDDTHHMMSSZ-xxxxxx") no other run of this process has.
  std::string new_run_id();

 private:
  TrajectoryLog();
  void write_queued(std::unique_lock<std::mutex>& lock);
  void prepare_loop();
  // Until `done()`: waits for the batch being written, or writes what is queued itself. Called
  // and returns with `lock` held.
  template <class Done>
  void write_until(std::unique_lock<std::mutex>& lock, Done done) {
    while (!done()) {
      if (writing_) {
        done_.wait(lock);
      } else {
        write_queued(lock);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable done_, prepare_work_;
  std::vector<Item> queue_;
  std::vector<Item> prepares_;
  std::string prepared_day_;        // the day of prepared_'s folders
  std::set<std::string> prepared_;  // folders (root '\0' day) prepared that day
  bool writing_ = false;            // a thread holds the writer and is writing a batch
  bool posted_ = false;             // queue_ holds a posted line no waiter will write
  std::uint64_t queued_ = 0;        // lines queued since the start
  std::uint64_t written_ = 0;       // of them, the first this many are written (batches in order)
  bool stop_ = false;
  std::unique_ptr<SegmentWriter> writer_;
  std::mutex ids_mu_;
  std::time_t ids_second_ = 0;
  std::set<std::string> ids_;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace kernex::detail
