#include <atomic>
#include <chrono>
#include <mutex>

#include "kernex/log.hpp"
#include "kernex/redact.hpp"
#include "kernex/trajectory.hpp"
#include "kernex/trajectory_segments.hpp"
#include "trajectory_log.hpp"

namespace kernex {
namespace {

std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Caps every string in an event, recursively, so one huge tool output can't bloat the file.
void cap_strings(Json& j, std::size_t cap) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.size() > cap) j = cap_field(s, cap);
  } else if (j.is_structured()) {
    for (auto& v : j) cap_strings(v, cap);
  }
}

// One run's events, appended through the process's trajectory log into the segment of the run's
// start day. record() returns once its line was written, as the per-run file's flush did.
class SegmentTrajectory final : public Trajectory {
 public:
  SegmentTrajectory(std::string run_id, std::filesystem::path root, std::string day,
                    std::size_t cap, std::size_t segment_bytes)
      : run_id_(std::move(run_id)),
        root_(std::move(root)),
        day_(std::move(day)),
        cap_(cap),
        segment_bytes_(segment_bytes) {}

  const std::string& run_id() const override { return run_id_; }

  void record(std::string_view type, Json fields) override {
    try {
      std::shared_ptr<detail::TrajectoryLog::Ticket> ticket;
      {
        // Queued under the lock: a run's events reach the file in seq order.
        std::lock_guard lock(mu_);
        ticket = detail::TrajectoryLog::instance().enqueue(
            root_, day_, run_id_, line_of(type, std::move(fields)), segment_bytes_);
      }
      if (!detail::TrajectoryLog::instance().wait(*ticket) && !warned_.exchange(true)) {
        log(LogLevel::Warn, "trajectory " + run_id_ + " under " + root_.string() +
                                ": write failed; events are lost");
      }
    } catch (const std::exception& e) {
      log(LogLevel::Warn, std::string("trajectory: could not record an event: ") + e.what());
    }
  }

  // Nothing waits for a posted line: a failed write of it is logged by the writer, not reported
  // to the run.
  void record_soon(std::string_view type, Json fields) override {
    try {
      std::lock_guard lock(mu_);
      detail::TrajectoryLog::instance().post(root_, day_, run_id_, line_of(type, std::move(fields)),
                                             segment_bytes_);
    } catch (const std::exception& e) {
      log(LogLevel::Warn, std::string("trajectory: could not record an event: ") + e.what());
    }
  }

 private:
  // The event's line, its seq the run's next (called under mu_).
  std::string line_of(std::string_view type, Json fields) {
    if (!fields.is_object()) fields = Json{{"value", std::move(fields)}};
    cap_strings(fields, cap_);
    // The recorder's own fields win over a caller's of the same name (the event in place: no
    // copy of its fields, which may hold a whole answer).
    fields["seq"] = seq_++;
    fields["ts_ms"] = now_ms();
    fields["type"] = type;
    // Redacted last, after capping and JSON encoding, so no cut or escape hides a key piece;
    // field names, ids and event types keep their shape (the readers parse them).
    return "{\"r\":\"" + run_id_ + "\",\"e\":" +
           redact_secrets_in_json(fields.dump(-1, ' ', false, Json::error_handler_t::replace),
                                  kSecretPieceMin) +
           "}";
  }

  std::string run_id_;
  std::filesystem::path root_;
  std::string day_;
  std::size_t cap_;
  std::size_t segment_bytes_;
  std::mutex mu_;
  std::uint64_t seq_ = 0;
  std::atomic<bool> warned_ = false;
};

}  // namespace

std::string cap_field(std::string_view text, std::size_t cap) {
  if (text.size() <= cap) return std::string(text);
  std::size_t cut = cap;
  // Step back over UTF-8 continuation bytes so the kept part stays valid.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "…[truncated " + std::to_string(text.size() - cut) +
         " bytes]";
}

Result<std::shared_ptr<Trajectory>> open_trajectory(const std::filesystem::path& dir,
                                                    std::size_t field_cap) {
  return open_trajectory_segmented(dir, field_cap, kTrajectorySegmentBytes);
}

// No file is made here: the run's day segment is prepared by the writer thread while the run
// sets up, and it is shared with every other run of the day under `dir`.
Result<std::shared_ptr<Trajectory>> open_trajectory_segmented(const std::filesystem::path& dir,
                                                              std::size_t field_cap,
                                                              std::size_t segment_bytes) {
  if (dir.empty()) return fail(ErrorCode::Io, "trajectory dir: empty path");
  auto& writer = detail::TrajectoryLog::instance();
  std::string id = writer.new_run_id();
  std::string day = *trajectory_day(id);
  writer.prepare(dir, day, segment_bytes);
  return std::make_shared<SegmentTrajectory>(std::move(id), dir, std::move(day), field_cap,
                                             segment_bytes);
}

}  // namespace kernex
