// Where trajectories live on disk: the events of every run a process records under one directory
// go to per-day segment files, appended in batches by one writer thread, with an index beside
// each segment, instead of one file per run.
//
//   <dir>/YYYY-MM-DD/seg-N.jsonl   one line per event: {"r": "<run id>", "e": {<event>}}
//   <dir>/YYYY-MM-DD/seg-N.idx     one line per batch and run: "<run id> <offset> <length>\n"
//
// The day is the run's start day (from its id), so all of a run is in one day's folder and a
// lookup by id reads that folder's index only. A segment belongs to the process that created it
// (O_EXCL) and rolls over at a size limit. The index is a hint: readers check every line's run
// id, and read a segment's bytes past the index's end (a batch whose index line a kill -9 lost).
// Older data dirs keep `<dir>/<run id>.jsonl`, one file per run; readers accept both.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/trajectory.hpp"

namespace kernex {

inline constexpr std::size_t kTrajectorySegmentBytes = std::size_t{64} << 20;

// open_trajectory with a segment size limit of its own (tests and benches roll over early).
Result<std::shared_ptr<Trajectory>> open_trajectory_segmented(const std::filesystem::path& dir,
                                                              std::size_t field_cap,
                                                              std::size_t segment_bytes);

// "YYYY-MM-DD" for a run id "YYYYMMDDTHHMMSSZ-xxxxxx" (or a prefix of at least 8 characters);
// nullopt when it does not start with a date.
std::optional<std::string> trajectory_day(std::string_view run_id);

// True for a folder name "YYYY-MM-DD" and a file name "seg-N.jsonl" / "seg-N.idx".
bool is_trajectory_day_dir(std::string_view name);
// N of "seg-N.jsonl" (or "seg-N.idx"); nullopt for any other name.
std::optional<std::uint64_t> trajectory_segment_number(std::string_view file_name);

// A run id as the recorder makes them: 16 characters of time, '-', 6 hex digits. Anything else
// in a segment line or an index line is not a run id.
bool is_trajectory_run_id(std::string_view id);

}  // namespace kernex
