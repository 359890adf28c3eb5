// Reading trajectories back: the list under a directory, one run's events, and the text and
// HTML renderings behind `kernex logs`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex {

struct TrajectorySummary {
  std::string run_id;
  std::filesystem::path path;
  std::string kind;      // "run" | "rlm"
  std::string question;  // first line, capped
  std::string outcome;   // empty while a run is unfinished (or died)
  std::string error;
  std::uint64_t input_tokens = 0;
  std::uint64_t output_tokens = 0;
  double cost_usd = 0.0;
  std::size_t events = 0;
  std::int64_t started_ms = 0;
};

// Every run under `dir` (any depth), oldest first: each run of the day segments
// (kernex/trajectory_segments.hpp) and each older `<run id>.jsonl`. A missing dir is an empty
// list; an unreadable file is listed with its error.
Result<std::vector<TrajectorySummary>> list_trajectories(const std::filesystem::path& dir);

// One run's events in the order they were written. `run` is a run id, a unique prefix of one, or
// "last". A dated id or prefix reads only its day's segment indexes. Lines that are not events
// of the run are skipped (a run killed mid-write leaves a torn last line).
Result<std::vector<Json>> read_trajectory(const std::filesystem::path& dir, const std::string& run);

// Rewrites the segments of the day folder `day_dir` without every line of the runs whose
// run_start event `match` accepts (gone from the disk, not hidden); how many runs that was.
// (`kernex memory forget`: a run in a shared segment has no file of its own to remove.)
Result<std::size_t> remove_day_runs(const std::filesystem::path& day_dir,
                                    const std::function<bool(const Json&)>& match);

Json to_json(const TrajectorySummary& summary);
std::string render_trajectory_text(const std::vector<Json>& events);
// One self-contained page (no network, no scripts): the span waterfall (waterfall.hpp), summary,
// sub-call tree, timeline with code and outputs, and bar charts of tokens and cost per step.
// Every value is escaped; malformed events never throw.
std::string render_trajectory_html(const std::vector<Json>& events);

}  // namespace kernex
