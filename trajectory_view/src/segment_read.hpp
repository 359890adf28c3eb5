// Reading the segment layout back (kernex/trajectory_segments.hpp) next to the older file per run.
// Segments and their indexes are data a sandboxed process might have reached: every line is
// checked (a JSON object naming the run and carrying an event), every index line is only a hint
// bounded by the segment's size, and a torn or foreign line is skipped, never shown for a run.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::detail {

// Where one run's events are: its file (older layout), or the segments of its day folder that
// hold lines of it, by segment number.
struct RunPlace {
  std::filesystem::path file;
  std::vector<std::filesystem::path> segments;
};

// Every run under `dir` (at any depth: kernex serve keeps a folder per tenant and session) whose id
// starts with `prefix` ("" for all). With a dated prefix, other days' folders are not read.
// `any` tells whether any trajectory is there at all. `latest_day`: of the segments, only the
// latest day's (where the last run is).
Result<std::map<std::string, RunPlace>> find_runs(const std::filesystem::path& dir,
                                                  std::string_view prefix, bool& any,
                                                  bool latest_day = false);

// The events of run `id` from its segments, in the order they were written.
Result<std::vector<Json>> read_segment_run(const std::vector<std::filesystem::path>& segments,
                                           const std::string& id);

// Every run of one segment with its events in order (for listing).
Result<std::map<std::string, std::vector<Json>>> read_segment(const std::filesystem::path& path);

// The segment files of a day folder, by number.
std::vector<std::filesystem::path> day_segments(const std::filesystem::path& day_dir);

}  // namespace kernex::detail
