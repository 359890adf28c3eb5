#include "kernex/workspace/forget.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "beneath.hpp"
#include "overlay_state.hpp"

namespace kernex::workspace {

namespace {

// Every entry of `dir` that `select` picks goes, each as a hostile tree.
template <typename Select>
Result<void> remove_entries(const std::filesystem::path& dir, Select select) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) return {};
  KERNEX_ASSIGN_OR_RETURN(detail::Fd fd, detail::open_root(dir.string(), "directory"));
  std::size_t budget = 1'000'000;
  const std::string where = dir.string();
  KERNEX_ASSIGN_OR_RETURN(auto entries, detail::list_dir(fd.get(), where, &budget));
  for (const detail::DirEntry& e : entries) {
    if (!select(e.name)) continue;
    KERNEX_RETURN_IF_ERROR(detail::remove_tree(fd.get(), e.name, where + "/" + e.name));
  }
  return {};
}

}  // namespace

Result<void> remove_session_layers(const std::filesystem::path& overlays,
                                   const std::string& session) {
  if (session.empty() || session.find('/') != std::string::npos || session == "." ||
      session == "..")
    return fail(ErrorCode::Usage, "session id \"" + session + "\" is not a plain name");
  return remove_entries(overlays, [&](const std::string& name) {
    return name == session || name.starts_with(session + "~");
  });
}

Result<void> empty_directory(const std::filesystem::path& dir) {
  return remove_entries(dir, [](const std::string&) { return true; });
}

}  // namespace kernex::workspace
