// Where trajectories live on disk: the events of every run a process records under one directory
// go to per-day segment files, appended in batches by one writer thread, with an index beside
// each segment, instead of one file per run.
//
//   <dir>/YYYY-MM-DD/seg-N.jsonl   one line per event: {"r": "<run id>", "e": {<event>}}
//   <dir>/YYYY-MM-DD/seg-N.idx     one line per batch and run: "<run id> <offset> <length>\n"
//   <dir>/YYYY-MM-DD/.lock         flock(2)ed shared by a writer while it appends to the day's
//                                  segments, exclusive by whoever rewrites them (forget), so a
//                                  rewrite never drops a line appended while it ran
//
// N is 1 to kMaxTrajectorySegment, without leading zeros: a file named otherwise (a planted
// seg-0000001.jsonl, seg-<13 digits>.jsonl) is no segment to the writer nor to the readers.
//
// The day is the run's start day (from its id), so all of a run is in one day's folder and a
// lookup by id reads that folder's index only. A segment belongs to the process that created it
// (O_EXCL) and rolls over at a size limit. The index is a hint: readers check every line's run
// id, and read a segment's bytes past the index's end (a batch whose index line a kill -9 lost).
// Older data dirs keep `<dir>/<run id>.jsonl`, one file per run; readers accept both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/trajectory.hpp"

namespace kernex {

inline constexpr std::size_t kTrajectorySegmentBytes = std::size_t{64} << 20;
inline constexpr std::uint64_t kMaxTrajectorySegment = 999'999'999'999;  // 12 digits
inline constexpr std::string_view kTrajectoryDayLock = ".lock";

// Returns once every trajectory line this process queued before the call (a run_start posted with
// record_soon included) is written: for whoever is about to read or rewrite the segments and must
// find all of them (a forget cutting a session's runs out).
void flush_trajectories();

// open_trajectory with a segment size limit of its own (tests and benches roll over early).
Result<std::shared_ptr<Trajectory>> open_trajectory_segmented(const std::filesystem::path& dir,
                                                              std::size_t field_cap,
                                                              std::size_t segment_bytes);

// "YYYY-MM-DD" for a run id "YYYYMMDDTHHMMSSZ-xxxxxx" (or a prefix of at least 8 characters);
// nullopt when it does not start with a date.
std::optional<std::string> trajectory_day(std::string_view run_id);

// True for a folder name "YYYY-MM-DD" and a file name "seg-N.jsonl" / "seg-N.idx".
bool is_trajectory_day_dir(std::string_view name);
// N of "seg-N.jsonl" (or "seg-N.idx"); nullopt for any other name (N out of range included).
std::optional<std::uint64_t> trajectory_segment_number(std::string_view file_name);

// A run id for a run started at `when` (UTC, to the second) with `random` (its low 24 bits) to
// tell runs of one second apart: "YYYYMMDDTHHMMSSZ-xxxxxx". Trajectories and topology runs use it.
std::string format_run_id(std::time_t when, std::uint32_t random);

// A run id as format_run_id makes them: 16 characters of time, '-', 6 hex digits. Anything else
// in a segment line or an index line is not a run id.
bool is_trajectory_run_id(std::string_view id);

}  // namespace kernex
