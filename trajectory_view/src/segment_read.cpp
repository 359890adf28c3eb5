#include "segment_read.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>

#include "kernex/file_lock.hpp"
#include "kernex/file_write.hpp"
#include "kernex/files.hpp"
#include "kernex/trajectory_segments.hpp"
#include "kernex/trajectory_view.hpp"

namespace kernex::detail {
namespace {

namespace fs = std::filesystem;

// Far above what the writer makes (kTrajectorySegmentBytes), still bounded.
constexpr std::uint64_t kMaxSegmentBytes = std::uint64_t{1} << 30;
constexpr std::size_t kMaxIndexBytes = std::size_t{256} << 20;

struct IndexEntry {
  std::string id;
  std::uint64_t offset = 0, length = 0;
};

// One segment opened for reading: its size at open, its index's entries (checked against that
// size) and how far they reach; bytes past `covered` are read line by line.
struct SegmentView {
  RegularFile file;
  std::string index_text;
  std::vector<IndexEntry> entries;
  std::uint64_t covered = 0;
};

bool number(std::string_view text, std::uint64_t& out) {
  if (text.empty() || text.size() > 15) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// "<run id> <offset> <length>", the range inside the segment; nullopt for anything else.
std::optional<IndexEntry> parse_entry(std::string_view line, std::uint64_t size) {
  const auto a = line.find(' ');
  const auto b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  const std::string_view id = line.substr(0, a);
  IndexEntry e{"", 0, 0};
  if (!is_trajectory_run_id(id) || !number(line.substr(a + 1, b - a - 1), e.offset) ||
      !number(line.substr(b + 1), e.length) || e.length == 0 || e.offset > size ||
      e.length > size - e.offset)
    return std::nullopt;
  e.id = id;
  return e;
}

// The entries of runs whose id starts with `prefix` (a lookup by id compares each line's first
// bytes, nothing more). The writer appends in offset order, so the last good line tells how far
// the index reaches; a lying one can only hide bytes, never show another run's.
void parse_index(SegmentView& seg, std::string_view prefix) {
  std::string_view text = seg.index_text;
  const auto end = text.rfind('\n');
  if (end == std::string_view::npos) return;
  text = text.substr(0, end + 1);  // without a torn last line
  for (std::string_view rest = text; !rest.empty();) {
    const auto nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    if (!line.starts_with(prefix)) continue;
    if (auto e = parse_entry(line, seg.file.size())) seg.entries.push_back(std::move(*e));
  }
  for (std::size_t stop = text.size() - 1; stop > 0;) {
    const auto start = text.rfind('\n', stop - 1);
    const std::size_t from = start == std::string_view::npos ? 0 : start + 1;
    if (auto e = parse_entry(text.substr(from, stop - from), seg.file.size())) {
      seg.covered = e->offset + e->length;
      break;
    }
    if (from == 0) break;
    stop = from - 1;
  }
}

Result<SegmentView> open_segment(const fs::path& path, std::string_view prefix) {
  KERNEX_ASSIGN_OR_RETURN(auto file, open_regular_file(path, "trajectory segment"));
  if (file.size() > kMaxSegmentBytes)
    return fail(ErrorCode::Limit, "trajectory segment " + path.string() + ": larger than 1 GiB");
  SegmentView seg{std::move(file), {}, {}, 0};
  fs::path idx = path;
  idx.replace_extension(".idx");
  // A missing, unreadable or oversized index only means reading the whole segment.
  if (auto text = read_regular_file(idx, "trajectory index", kMaxIndexBytes)) {
    seg.index_text = std::move(*text);
    parse_index(seg, prefix);
  }
  return seg;
}

Result<std::string> read_range(const SegmentView& seg, std::uint64_t offset, std::uint64_t length) {
  std::string out(length, '\0');
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n =
        ::pread(seg.file.fd(), out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorCode::Io, std::string("trajectory segment: ") + std::strerror(errno));
    if (n == 0) break;  // shrank since the fstat
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

// Each complete-or-not line of `text` that is {"r": <run id>, "e": {event}}: `visit(id, event)`.
template <class Visit>
void each_event(std::string_view text, Visit&& visit) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty()) continue;
    Json j = parse_untrusted(line);
    if (!j.is_object()) continue;
    auto r = j.find("r");
    auto e = j.find("e");
    if (r == j.end() || e == j.end() || !r->is_string() || !e->is_object()) continue;
    const auto& id = r->get_ref<const std::string&>();
    if (!is_trajectory_run_id(id)) continue;
    visit(id, std::move(*e));
  }
}

// The byte ranges that may hold lines of `id`: its index entries, merged, and the unindexed tail.
std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges_of(const SegmentView& seg,
                                                               std::string_view id) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& e : seg.entries)
    if (e.id == id) ranges.emplace_back(e.offset, e.offset + e.length);
  if (seg.covered < seg.file.size()) ranges.emplace_back(seg.covered, seg.file.size());
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

void collect_day(const fs::path& day_dir, std::string_view prefix,
                 std::map<std::string, RunPlace>& out) {
  auto note = [&](std::string_view id, const fs::path& seg) {
    if (!id.starts_with(prefix)) return;
    auto& place = out[std::string(id)];
    if (place.segments.empty() || place.segments.back() != seg) place.segments.push_back(seg);
  };
  for (const auto& path : day_segments(day_dir)) {
    auto seg = open_segment(path, prefix);
    if (!seg) continue;  // not a regular file, or unreadable: nothing of it is shown
    for (const auto& e : seg->entries) note(e.id, path);
    if (seg->covered < seg->file.size()) {
      auto tail = read_range(*seg, seg->covered, seg->file.size() - seg->covered);
      if (tail) each_event(*tail, [&](const std::string& id, Json&&) { note(id, path); });
    }
  }
}

}  // namespace

std::vector<fs::path> day_segments(const fs::path& day_dir) {
  std::vector<std::pair<std::uint64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(day_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // A link is not the writer's (it creates segments with O_EXCL): never followed.
    if (!name.ends_with(".jsonl") || it->is_symlink(ec) || ec) continue;
    if (auto n = trajectory_segment_number(name)) found.emplace_back(*n, it->path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

Result<std::map<std::string, RunPlace>> find_runs(const fs::path& dir, std::string_view prefix,
                                                  bool& any, bool latest_day) {
  std::map<std::string, RunPlace> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  std::optional<std::string> day = trajectory_day(prefix);
  std::vector<fs::path> days;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return fail(ErrorCode::Io, "cannot list " + dir.string() + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return fail(ErrorCode::Io, "cannot list " + dir.string() + ": " + ec.message());
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      // Not skipped after: a serve session's folder could be named like a day.
      if (is_trajectory_day_dir(name) && !day_segments(path).empty()) days.push_back(path);
      continue;
    }
    if (path.extension() != ".jsonl") continue;
    // A segment, read with its day; or named like one but not one (seg-0001, seg-<13 digits>):
    // no writer makes it, so neither a segment nor a run's own file.
    if (is_trajectory_day_dir(path.parent_path().filename().string()) && name.starts_with("seg-"))
      continue;
    any = true;
    const std::string stem = path.stem().string();
    if (stem.starts_with(prefix)) out[stem].file = path;
  }
  any = any || !days.empty();
  // Ids start with their day: the latest run is in the latest day's folders.
  if (latest_day && !days.empty()) {
    day = days.front().filename().string();
    for (const auto& d : days) day = std::max(*day, d.filename().string());
  }
  for (const auto& d : days)
    if (!day || *day == d.filename().string()) collect_day(d, prefix, out);
  return out;
}

Result<std::vector<Json>> read_segment_run(const std::vector<fs::path>& segments,
                                           const std::string& id) {
  std::vector<Json> events;
  for (const auto& path : segments) {
    KERNEX_ASSIGN_OR_RETURN(auto seg, open_segment(path, id));
    for (const auto& [begin, end] : ranges_of(seg, id)) {
      KERNEX_ASSIGN_OR_RETURN(auto text, read_range(seg, begin, end - begin));
      each_event(text, [&](const std::string& line_id, Json&& event) {
        if (line_id == id) events.push_back(std::move(event));
      });
    }
  }
  return events;
}

Result<std::map<std::string, std::vector<Json>>> read_segment(const fs::path& path) {
  KERNEX_ASSIGN_OR_RETURN(auto seg, open_segment(path, "\x01"));  // the whole file, no index
  KERNEX_ASSIGN_OR_RETURN(auto text, read_range(seg, 0, seg.file.size()));
  std::map<std::string, std::vector<Json>> runs;
  each_event(text,
             [&](const std::string& id, Json&& event) { runs[id].push_back(std::move(event)); });
  return runs;
}

}  // namespace kernex::detail

namespace kernex::detail {
namespace {

namespace fs = std::filesystem;

bool write_file(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  const bool ok = write_all(fd, text, path.string()) && ::fsync(fd) == 0;
  return ::close(fd) == 0 && ok;
}

// `path` again without the lines of `runs` (nor lines that are no event at all), and its index
// made anew for what is kept. Written beside it and renamed over it.
Result<void> rewrite_segment(const fs::path& path, const std::set<std::string>& runs) {
  KERNEX_ASSIGN_OR_RETURN(auto seg, open_segment(path, "\x01"));
  KERNEX_ASSIGN_OR_RETURN(auto text, read_range(seg, 0, seg.file.size()));
  std::string kept, index;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    if (nl == std::string_view::npos) break;  // a torn tail: nobody's
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    std::string id;
    each_event(line, [&](const std::string& line_id, Json&&) { id = line_id; });
    if (id.empty() || runs.contains(id)) continue;
    index += id + ' ' + std::to_string(kept.size()) + ' ' + std::to_string(line.size() + 1) + '\n';
    (kept += line) += '\n';
  }
  fs::path idx = path;
  idx.replace_extension(".idx");
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  const fs::path idx_tmp = path.parent_path() / ("." + idx.filename().string() + ".tmp");
  std::error_code ec;
  if (kept.empty()) {  // nothing of anyone else: the segment goes
    fs::remove(path, ec);
    if (!ec) fs::remove(idx, ec);
    if (ec) return fail(ErrorCode::Io, "cannot remove " + path.string() + ": " + ec.message());
    return {};
  }
  if (!write_file(tmp, kept) || !write_file(idx_tmp, index)) {
    fs::remove(tmp, ec);
    fs::remove(idx_tmp, ec);
    return fail(ErrorCode::Io, "cannot rewrite " + path.string());
  }
  fs::rename(tmp, path, ec);
  if (!ec) fs::rename(idx_tmp, idx, ec);
  if (ec) return fail(ErrorCode::Io, "cannot rewrite " + path.string() + ": " + ec.message());
  return {};
}

}  // namespace

}  // namespace kernex::detail

namespace kernex {

Result<std::size_t> remove_day_runs(const std::filesystem::path& day_dir,
                                    const std::function<bool(const Json&)>& match) {
  // This process's queued lines first: a run's run_start is posted, not waited for, and a run the
  // match names must be found by it (an ended run's line, written after the cut, would outlive
  // its forget).
  flush_trajectories();
  // A live writer (kernex serve) appends under the shared lock: none appends between the read of a
  // segment and the rename of its rewrite over it.
  KERNEX_ASSIGN_OR_RETURN(auto locked, FileLock::take(day_dir / kTrajectoryDayLock));
  const auto segments = detail::day_segments(day_dir);
  std::set<std::string> runs;
  for (const auto& path : segments) {
    KERNEX_ASSIGN_OR_RETURN(auto all, detail::read_segment(path));
    for (const auto& [id, events] : all) {
      for (const auto& e : events) {
        auto type = e.find("type");
        if (type != e.end() && *type == "run_start" && match(e)) runs.insert(id);
      }
    }
  }
  if (runs.empty()) return std::size_t{0};
  // A run's later lines may be in a later segment (rollover): every segment is checked.
  for (const auto& path : segments) {
    KERNEX_ASSIGN_OR_RETURN(auto all, detail::read_segment(path));
    bool has = false;
    for (const auto& id : runs) has = has || all.contains(id);
    if (has) KERNEX_RETURN_IF_ERROR(detail::rewrite_segment(path, runs));
  }
  return runs.size();
}

}  // namespace kernex
