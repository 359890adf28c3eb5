// Finding a session's layer directory; the most recent by the created_ms of its meta file.
#include "kernex/workspace/sessions.hpp"

#include <sys/stat.h>

#include "overlay_state.hpp"

namespace kernex::workspace {

namespace fs = std::filesystem;

fs::path overlays_dir(const fs::path& data_dir) { return data_dir / "overlays"; }

Result<fs::path> find_layer_dir(const fs::path& data_dir, const std::string& session) {
  const fs::path dir = overlays_dir(data_dir);
  const std::string where = detail::label("overlays directory", dir.string(), "");
  if (!session.empty()) {
    std::vector<std::string_view> parts;
    if (!detail::split_relative(session, parts) || parts.size() != 1)
      return fail(ErrorCode::Usage,
                  "session id " +
                      Json(session).dump(-1, ' ', false, Json::error_handler_t::replace) +
                      " is not a plain name");
    struct stat st {};
    const fs::path layer = dir / session;
    if (::lstat(layer.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail(ErrorCode::Usage, "session \"" + session + "\" has no overlay in " + where);
    return layer;
  }
  KERNEX_ASSIGN_OR_RETURN(detail::Fd fd, detail::open_root(dir.string(), "overlays directory"));
  std::size_t budget = 100'000;
  KERNEX_ASSIGN_OR_RETURN(auto entries, detail::list_dir(fd.get(), where, &budget));
  std::optional<std::pair<std::int64_t, fs::path>> newest;
  for (const detail::DirEntry& e : entries) {
    if (!S_ISDIR(e.st.st_mode)) continue;
    Overlay::State state;
    state.layer = dir / e.name;
    auto layer_fd = detail::open_root(state.layer.string(), "layer directory");
    if (!layer_fd || !detail::read_meta(state, layer_fd->get())) continue;  // not an overlay
    if (!newest || state.created_ms > newest->first) newest.emplace(state.created_ms, state.layer);
  }
  if (!newest) return fail(ErrorCode::Usage, "no session has an overlay in " + where);
  return newest->second;
}

}  // namespace kernex::workspace
