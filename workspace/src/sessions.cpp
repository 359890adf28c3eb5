// Finding a session's layer directory (the newest by the created_ms of its meta file), and the
// layer a run works in.
#include "kernex/workspace/sessions.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "overlay_state.hpp"

namespace kernex::workspace {

namespace fs = std::filesystem;

namespace {

Result<void> check_session_id(const std::string& session) {
  std::vector<std::string_view> parts;
  if (!detail::split_relative(session, parts) || parts.size() != 1)
    return fail(ErrorCode::Usage,
                "session id " + Json(session).dump(-1, ' ', false, Json::error_handler_t::replace) +
                    " is not a plain name");
  return {};
}

// The newest layer under `dir` of `session` (every session's when empty): a directory named
// `session` or `session~...` whose meta file names that session.
Result<std::optional<fs::path>> newest_layer(const fs::path& dir, const std::string& session) {
  const std::string where = detail::label("overlays directory", dir.string(), "");
  struct stat st {};
  if (!session.empty() && ::lstat(dir.c_str(), &st) != 0) return std::nullopt;
  KERNEX_ASSIGN_OR_RETURN(detail::Fd fd, detail::open_root(dir.string(), "overlays directory"));
  std::size_t budget = 100'000;
  KERNEX_ASSIGN_OR_RETURN(auto entries, detail::list_dir(fd.get(), where, &budget));
  std::optional<std::pair<std::int64_t, fs::path>> newest;
  for (const detail::DirEntry& e : entries) {
    if (!S_ISDIR(e.st.st_mode)) continue;
    const bool named = e.name == session || e.name.starts_with(session + "~");
    if (!session.empty() && !named) continue;
    Overlay::State state;
    state.layer = dir / e.name;
    auto layer_fd = detail::open_root(state.layer.string(), "layer directory");
    if (!layer_fd || !detail::read_meta(state, layer_fd->get())) continue;  // not an overlay
    if (!session.empty() && e.name != session && state.session != session) continue;
    if (!newest || state.created_ms > newest->first) newest.emplace(state.created_ms, state.layer);
  }
  if (!newest) return std::nullopt;
  return newest->second;
}

// `session~<ms>-<random>`: a path no earlier layer had.
std::string new_layer_name(const std::string& session) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "~%llx-%08x", static_cast<unsigned long long>(ms),
                static_cast<unsigned>(std::random_device{}()));
  return session + suffix;
}

}  // namespace

fs::path overlays_dir(const fs::path& data_dir) { return data_dir / "overlays"; }

Result<fs::path> find_layer_in(const fs::path& dir, const std::string& session) {
  if (!session.empty()) KERNEX_RETURN_IF_ERROR(check_session_id(session));
  KERNEX_ASSIGN_OR_RETURN(auto found, newest_layer(dir, session));
  const std::string where = detail::label("overlays directory", dir.string(), "");
  if (found) return *found;
  if (!session.empty())
    return fail(ErrorCode::Usage, "session \"" + session + "\" has no overlay in " + where);
  return fail(ErrorCode::Usage, "no session has an overlay in " + where);
}

Result<fs::path> find_layer_dir(const fs::path& data_dir, const std::string& session) {
  return find_layer_in(overlays_dir(data_dir), session);
}

Result<Overlay> session_overlay(const fs::path& overlays, const std::string& session,
                                const fs::path& lower) {
  KERNEX_RETURN_IF_ERROR(check_session_id(session));
  KERNEX_ASSIGN_OR_RETURN(auto found, newest_layer(overlays, session));
  if (!found) {
    CreateOptions options;
    options.session_id = session;
    return Overlay::create(lower, overlays / new_layer_name(session), options);
  }
  KERNEX_ASSIGN_OR_RETURN(auto overlay, Overlay::open(*found));
  std::error_code ec;
  const fs::path real = fs::canonical(lower, ec);
  if (ec || real != overlay.lower())
    return fail(ErrorCode::Usage, "session \"" + session + "\" has an overlay over '" +
                                      overlay.lower().string() + "', not '" + lower.string() +
                                      "': accept or reject it first (kernex workspace)");
  return overlay;
}

Result<AcceptOutcome> accept_and_retire(Overlay& overlay, const std::vector<std::string>& paths,
                                        bool force, const KernelGuard& guard) {
  AcceptOutcome out;
  KERNEX_ASSIGN_OR_RETURN(out.result, overlay.accept(paths, force, guard));
  KERNEX_ASSIGN_OR_RETURN(auto left, overlay.status());
  if (left.changes.empty()) {
    KERNEX_RETURN_IF_ERROR(overlay.reject());
    out.dropped = true;
  }
  return out;
}

}  // namespace kernex::workspace
