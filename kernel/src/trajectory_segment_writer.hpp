// The writer thread's side of the trajectory log: the open segment of each (directory, day), the
// rollover at the size limit, and one write(2) of the lines and one of the index per segment per
// batch. Used by one thread only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "trajectory_log.hpp"

namespace kernex::detail {

class SegmentWriter {
 public:
  SegmentWriter() = default;
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;
  ~SegmentWriter();

  // Writes the batch and sets every ticket's `ok` (not `done`: the caller publishes that).
  void write_batch(std::vector<TrajectoryLog::Item>& batch);

  // Open segments kept at most (the rest are reopened for append when written again).
  static constexpr std::size_t kMaxOpen = 64;

 private:
  struct Segment {
    std::filesystem::path dir;
    std::uint64_t number = 0;                // 0: none claimed yet
    int fd = -1, idx_fd = -1, lock_fd = -1;  // lock_fd: the day's kTrajectoryDayLock
    std::uint64_t size = 0;
    std::list<std::string>::iterator lru;
    bool in_lru = false;
    bool reusable = false;  // ours, whole: may be reopened for append
  };
  bool lock_day(Segment& seg);
  void unlock_day(Segment& seg);
  bool ready(Segment& seg, std::size_t incoming, std::size_t limit);
  bool claim(Segment& seg);
  bool reopen(Segment& seg);
  void close(Segment& seg);    // its segment and index; the day's lock stays
  void release(Segment& seg);  // and the lock
  void touch(const std::string& key, Segment& seg);
  void write_group(Segment& seg, std::vector<TrajectoryLog::Item*>& items);

  std::map<std::string, Segment> segments_;
  std::list<std::string> lru_;  // most recent first
  std::size_t open_ = 0;
};

}  // namespace kernex::detail
