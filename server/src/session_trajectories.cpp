#include "session_trajectories.hpp"

#include <string_view>
#include <system_error>

#include "kernex/trajectory_segments.hpp"
#include "kernex/trajectory_view.hpp"
#include "kernex/workspace/forget.hpp"
#include "session_id.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;

// Labels the run's run_start with its session; everything else passes through.
class SessionTrajectory final : public Trajectory {
 public:
  SessionTrajectory(std::shared_ptr<Trajectory> inner, std::string session)
      : inner_(std::move(inner)), session_(std::move(session)) {}
  const std::string& run_id() const override { return inner_->run_id(); }
  void record(std::string_view type, Json fields) override {
    inner_->record(type, labelled(type, std::move(fields)));
  }
  void record_soon(std::string_view type, Json fields) override {
    inner_->record_soon(type, labelled(type, std::move(fields)));
  }

 private:
  Json labelled(std::string_view type, Json fields) const {
    if (type == "run_start" && fields.is_object()) fields["session_id"] = session_;
    return fields;
  }

  std::shared_ptr<Trajectory> inner_;
  std::string session_;
};

Result<std::size_t> cut_session_runs(const fs::path& root, const std::string& session) {
  std::size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec) ||
        !is_trajectory_day_dir(it->path().filename().string()))
      continue;
    KERNEX_ASSIGN_OR_RETURN(auto cut, remove_day_runs(it->path(), [&](const Json& start) {
                              auto s = start.find("session_id");
                              return s != start.end() && *s == session;
                            }));
    removed += cut;
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return fail(ErrorCode::Io, "cannot list " + root.string() + ": " + ec.message());
  return removed;
}

// The folder an older data dir kept for the session. A session whose folder name is also a day's
// ("2026-11-29") shares it with the tenant's segments now: only what the old layout put there
// (its day folders and per-run files) goes, never a segment.
Result<void> remove_legacy_folder(const fs::path& root, const std::string& session) {
  const std::string name = session_dir_name(session);
  const fs::path folder = root / name;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(folder, ec))) return {};
  if (!is_trajectory_day_dir(name)) {
    if (auto r = workspace::empty_directory(folder); !r) return r;
    fs::remove(folder, ec);
    return {};
  }
  std::vector<fs::path> old;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    const bool segment = trajectory_segment_number(file).has_value();
    if (!segment && (it->is_directory(ec) || it->path().extension() == ".jsonl"))
      old.push_back(it->path());
  }
  for (const auto& path : old) {
    fs::remove_all(path, ec);
    if (ec) return fail(ErrorCode::Io, "cannot remove " + path.string() + ": " + ec.message());
  }
  return {};
}

}  // namespace

fs::path tenant_trajectories(const Config& config, const std::string& tenant) {
  return config.data_dir / "trajectories" / "serve" / tenant;
}

Result<std::shared_ptr<Trajectory>> open_session_trajectory(const Config& config,
                                                            const std::string& tenant,
                                                            const std::string& session) {
  KERNEX_ASSIGN_OR_RETURN(auto opened, open_trajectory(tenant_trajectories(config, tenant)));
  if (session.empty()) return opened;
  return std::shared_ptr<Trajectory>(std::make_shared<SessionTrajectory>(opened, session));
}

Result<std::size_t> forget_session_trajectories(const Config& config, const std::string& tenant,
                                                const std::string& session) {
  const fs::path root = tenant_trajectories(config, tenant);
  KERNEX_ASSIGN_OR_RETURN(auto removed, cut_session_runs(root, session));
  KERNEX_RETURN_IF_ERROR(remove_legacy_folder(root, session));
  return removed;
}

}  // namespace kernex::server
