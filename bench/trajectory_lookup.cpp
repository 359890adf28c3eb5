// bench/trajectory_lookup: trajectories of N runs (default 10 000, 6 events each) written and
// looked up by id, in day segments (kernex/trajectory_segments.hpp) beside the baseline of one
// file per run, in the same run:
//   write   per-run files: O_EXCL create + an appending stream flushed per event (the writer this
//           replaces) | segments: open_trajectory + record(), one thread, then 8 threads
//   lookup  by id, the reader this replaces (it read and parsed every file to list the runs) on
//           per-run files | today's reader on per-run files | today's reader on segments
// Usage: trajectory_lookup [runs]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "bench_util.hpp"
#include "kernex/files.hpp"
#include "kernex/trajectory_segments.hpp"
#include "kernex/trajectory_view.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::Json;
using kernex::bench::Clock;
using kernex::bench::us_since;

constexpr int kEvents = 6;

Json event_fields(int i) {
  return Json{{"span", "0"},
              {"name", "read_file"},
              {"i", i},
              {"result", std::string(220, static_cast<char>('a' + i))}};
}

// The old writer: a file per run, claimed with O_EXCL, appended and flushed per event.
std::string old_run(const fs::path& dir, int n) {
  char id[32];
  std::snprintf(id, sizeof id, "20261129T000000Z-%06x", n);
  const fs::path path = dir / (std::string(id) + ".jsonl");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) kernex::bench::die("trajectory_lookup", "cannot create " + path.string());
  ::close(fd);
  std::ofstream out(path, std::ios::app);
  for (int i = 0; i < kEvents; ++i) {
    Json e = {{"seq", i}, {"ts_ms", 0}, {"type", "tool_call"}};
    e.update(event_fields(i));
    out << e.dump() << '\n';
    out.flush();
  }
  return id;
}

// The old reader's lookup: every file read and parsed (to list the runs), then the run's read.
std::size_t old_lookup(const fs::path& dir, const std::string& run) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  auto parse = [](const fs::path& p) {
    std::vector<Json> events;
    auto text = kernex::read_regular_file(p, "trajectory", std::size_t{1} << 30);
    std::size_t start = 0;
    while (text && start < text->size()) {
      auto nl = text->find('\n', start);
      if (nl == std::string::npos) nl = text->size();
      Json j = kernex::parse_untrusted(std::string_view(*text).substr(start, nl - start));
      if (j.is_object()) events.push_back(std::move(j));
      start = nl + 1;
    }
    return events;
  };
  fs::path found;
  for (const auto& f : files) {
    parse(f);
    if (f.stem() == run) found = f;
  }
  return parse(found).size();
}

template <class F>
double median_us(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(us_since(start));
  }
  return kernex::bench::median(t);
}

std::size_t file_count(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 10000;
  const fs::path root =
      fs::temp_directory_path() / ("kernex-bench-traj-" + std::to_string(::getpid()));
  const fs::path old_dir = root / "old", seg_dir = root / "seg", seg8_dir = root / "seg8";
  fs::create_directories(old_dir);

  std::vector<std::string> old_ids, seg_ids;
  auto start = Clock::now();
  for (int n = 0; n < runs; ++n) old_ids.push_back(old_run(old_dir, n));
  const double old_write = us_since(start);

  start = Clock::now();
  for (int n = 0; n < runs; ++n) {
    auto t = kernex::open_trajectory(seg_dir);
    if (!t) kernex::bench::die("trajectory_lookup", t.error().describe());
    for (int i = 0; i < kEvents; ++i) (*t)->record("tool_call", event_fields(i));
    seg_ids.push_back((*t)->run_id());
  }
  const double seg_write = us_since(start);

  std::atomic<int> next{0};
  start = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < 8; ++w) {
    threads.emplace_back([&] {
      while (next.fetch_add(1) < runs) {
        auto t = kernex::open_trajectory(seg8_dir);
        if (!t) return;
        for (int i = 0; i < kEvents; ++i) (*t)->record("tool_call", event_fields(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seg8_write = us_since(start);

  std::mt19937 rng(7);
  auto pick = [&](const std::vector<std::string>& ids) { return ids[rng() % ids.size()]; };
  auto check = [](const kernex::Result<std::vector<Json>>& r) {
    if (!r || r->size() != kEvents)
      kernex::bench::die("trajectory_lookup", r ? "wrong event count" : r.error().describe());
  };
  const double old_old = median_us(3, [&] {
    if (old_lookup(old_dir, pick(old_ids)) != kEvents)
      kernex::bench::die("trajectory_lookup", "old lookup: wrong event count");
  });
  const double new_old =
      median_us(21, [&] { check(kernex::read_trajectory(old_dir, pick(old_ids))); });
  const double new_seg =
      median_us(51, [&] { check(kernex::read_trajectory(seg_dir, pick(seg_ids))); });
  const double new_last = median_us(11, [&] { check(kernex::read_trajectory(seg_dir, "last")); });

  std::printf("trajectory_lookup: %d runs x %d events\n", runs, kEvents);
  std::printf("  files            per-run: %zu   segments: %zu (8 threads: %zu)\n",
              file_count(old_dir), file_count(seg_dir), file_count(seg8_dir));
  std::printf("  write, 1 thread  per-run files: %8.1f us/run   segments: %8.1f us/run\n",
              old_write / runs, seg_write / runs);
  std::printf("  write, 8 threads segments: %8.1f us/run (wall / runs)\n", seg8_write / runs);
  std::printf("  lookup by id     old reader, per-run files: %10.0f us (baseline)\n", old_old);
  std::printf("                   new reader, per-run files: %10.0f us\n", new_old);
  std::printf("                   new reader, segments:      %10.0f us\n", new_seg);
  std::printf("  lookup of last   new reader, segments:      %10.0f us\n", new_last);
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
