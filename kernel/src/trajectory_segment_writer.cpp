#include "trajectory_segment_writer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <unordered_map>

#include "kernex/file_write.hpp"
#include "kernex/log.hpp"
#include "kernex/trajectory_segments.hpp"

namespace kernex::detail {
namespace {

namespace fs = std::filesystem;

fs::path segment_path(const fs::path& dir, std::uint64_t n, const char* ext) {
  return dir / ("seg-" + std::to_string(n) + ext);
}

// The segment numbers already in `dir` (other processes', earlier runs of this one, planted ones),
// by the readers' rule of what a segment is.
std::set<std::uint64_t> taken_segments(const fs::path& dir) {
  std::set<std::uint64_t> taken;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto n = trajectory_segment_number(it->path().filename().string())) taken.insert(*n);
  }
  return taken;
}

// The first number to try for a new segment after `ours` (0: none yet): past every number in use,
// or, when that is past the last one readers list (a planted seg-999999999999), the first free one
// past ours. Ours only ever grow, so a run's segments read back in order. 0: none left.
std::uint64_t next_free(const std::set<std::uint64_t>& taken, std::uint64_t ours) {
  std::uint64_t n = std::max(ours, taken.empty() ? 0 : *taken.rbegin());
  if (n < kMaxTrajectorySegment) return n + 1;
  for (n = ours + 1; n <= kMaxTrajectorySegment && taken.contains(n); ++n) {
  }
  return n <= kMaxTrajectorySegment ? n : 0;
}

}  // namespace

// The day's lock, shared for the batch (a rewrite holds it exclusive). Opened once and kept; opened
// again when the folder or the lock file was removed under us (a forgotten session).
bool SegmentWriter::lock_day(Segment& seg) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (seg.lock_fd < 0) {
      std::error_code ec;
      fs::create_directories(seg.dir, ec);
      seg.lock_fd = ::open((seg.dir / kTrajectoryDayLock).c_str(),
                           O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
      if (seg.lock_fd < 0) break;
    }
    int r;
    while ((r = ::flock(seg.lock_fd, LOCK_SH)) != 0 && errno == EINTR) {
    }
    struct stat st {};
    if (r == 0 && ::fstat(seg.lock_fd, &st) == 0 && st.st_nlink > 0) return true;
    ::close(seg.lock_fd);  // unlocks
    seg.lock_fd = -1;
  }
  log(LogLevel::Warn, "trajectory folder " + seg.dir.string() + ": cannot lock " +
                          std::string(kTrajectoryDayLock) + ": " + std::strerror(errno));
  return false;
}

void SegmentWriter::unlock_day(Segment& seg) {
  if (seg.lock_fd >= 0) ::flock(seg.lock_fd, LOCK_UN);
}

SegmentWriter::~SegmentWriter() {
  for (auto& [key, seg] : segments_) release(seg);
}

void SegmentWriter::close(Segment& seg) {
  if (seg.fd >= 0) {
    ::close(seg.fd);
    --open_;
  }
  if (seg.idx_fd >= 0) ::close(seg.idx_fd);
  seg.fd = seg.idx_fd = -1;
  if (seg.in_lru) lru_.erase(seg.lru);
  seg.in_lru = false;
}

void SegmentWriter::release(Segment& seg) {
  close(seg);
  if (seg.lock_fd >= 0) ::close(seg.lock_fd);
  seg.lock_fd = -1;
}

// A segment is this process's alone (created with O_EXCL), so its index can trust its offsets.
bool SegmentWriter::claim(Segment& seg) {
  close(seg);
  std::error_code ec;
  fs::create_directories(seg.dir, ec);
  if (ec) {
    log(LogLevel::Warn, "trajectory folder " + seg.dir.string() + ": " + ec.message());
    return false;
  }
  std::uint64_t n = next_free(taken_segments(seg.dir), seg.number);
  for (int attempt = 0; attempt < 64 && n != 0 && n <= kMaxTrajectorySegment; ++attempt, ++n) {
    const fs::path path = segment_path(seg.dir, n, ".jsonl");
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) break;
    const fs::path idx = segment_path(seg.dir, n, ".idx");
    const int idx_fd =
        ::open(idx.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (idx_fd < 0) {
      ::close(fd);
      break;
    }
    seg.fd = fd;
    seg.idx_fd = idx_fd;
    seg.number = n;
    seg.size = 0;
    seg.reusable = true;
    ++open_;
    return true;
  }
  log(LogLevel::Warn,
      "trajectory segment in " + seg.dir.string() + ": cannot create: " +
          (n == 0 || n > kMaxTrajectorySegment ? "no segment number left" : std::strerror(errno)));
  return false;
}

// Our own segment again, closed to bound the open files: an open, never a creation.
bool SegmentWriter::reopen(Segment& seg) {
  const int fd = ::open(segment_path(seg.dir, seg.number, ".jsonl").c_str(),
                        O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const int idx_fd = ::open(segment_path(seg.dir, seg.number, ".idx").c_str(),
                            O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  struct stat st {};
  if (idx_fd < 0 || ::fstat(fd, &st) != 0) {
    ::close(fd);
    if (idx_fd >= 0) ::close(idx_fd);
    return false;
  }
  seg.fd = fd;
  seg.idx_fd = idx_fd;
  seg.size = static_cast<std::uint64_t>(st.st_size);
  ++open_;
  return true;
}

void SegmentWriter::touch(const std::string& key, Segment& seg) {
  if (seg.in_lru) lru_.erase(seg.lru);
  lru_.push_front(key);
  seg.lru = lru_.begin();
  seg.in_lru = true;
}

// An open segment with room for `incoming` bytes: reopened, or a new one claimed when the last is
// full or was removed under us (a forgotten session empties its folder).
bool SegmentWriter::ready(Segment& seg, std::size_t incoming, std::size_t limit) {
  if (seg.reusable && seg.fd < 0 && !reopen(seg)) seg.reusable = false;
  if (seg.fd >= 0) {
    struct stat st {};
    const bool removed = ::fstat(seg.fd, &st) != 0 || st.st_nlink == 0;
    const bool full = seg.size > 0 && seg.size + incoming > limit;
    if (!removed && !full) return true;
  }
  return claim(seg);
}

void SegmentWriter::write_group(Segment& seg, std::vector<TrajectoryLog::Item*>& items) {
  // Lines of one run together, in their order, so one index line covers each run's share.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const std::string*>> by_run;
  std::size_t bytes = 0;
  for (auto* item : items) {
    if (item->run_id.empty()) continue;
    auto& lines = by_run[item->run_id];
    if (lines.empty()) order.push_back(item->run_id);
    lines.push_back(&item->line);
    bytes += item->line.size() + 1;
  }
  const bool locked = lock_day(seg);
  bool ok = locked && ready(seg, bytes, items.front()->segment_bytes);
  if (ok && bytes > 0) {
    std::string data, index;
    data.reserve(bytes);
    for (const auto& id : order) {
      const std::uint64_t offset = seg.size + data.size();
      for (const auto* line : by_run[id]) (data += *line) += '\n';
      index += id + ' ' + std::to_string(offset) + ' ' +
               std::to_string(seg.size + data.size() - offset) + '\n';
    }
    auto written = write_all(seg.fd, data, "trajectory segment in " + seg.dir.string());
    ok = written.has_value();
    if (ok) {
      seg.size += data.size();
      // The index is a hint: a reader checks every line and reads past the index's last line, so
      // a lost index line costs a scan, never an event, as long as it is the last: a segment whose
      // index write failed takes no more lines.
      if (!write_all(seg.idx_fd, index, "trajectory index")) {
        close(seg);
        seg.reusable = false;
      }
    } else {
      // A torn write: the next batch starts a segment of its own rather than glue onto it.
      log(LogLevel::Warn, written.error().describe());
      close(seg);
      seg.reusable = false;
    }
  }
  if (locked) unlock_day(seg);
  for (auto* item : items)
    if (item->ticket) item->ticket->ok = ok;
}

void SegmentWriter::write_batch(std::vector<TrajectoryLog::Item>& batch) {
  std::vector<std::string> keys;
  std::unordered_map<std::string, std::vector<TrajectoryLog::Item*>> groups;
  for (auto& item : batch) {
    auto& group = groups[item.key];
    if (group.empty()) keys.push_back(item.key);
    group.push_back(&item);
  }
  for (const auto& key : keys) {
    auto& items = groups[key];
    auto [it, fresh] = segments_.try_emplace(key);
    if (fresh) it->second.dir = items.front()->dir;
    write_group(it->second, items);
    if (it->second.fd >= 0) touch(key, it->second);
  }
  while (open_ > kMaxOpen && !lru_.empty()) release(segments_.at(lru_.back()));
}

}  // namespace kernex::detail
