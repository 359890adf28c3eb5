// After accept: what landed leaves the upper layer, so status shrinks and a later mount shows
// the same workspace over the new real tree.
#include <fcntl.h>

#include <algorithm>

#include "overlay_state.hpp"
#include "trash.hpp"

namespace kernex::workspace::detail {

namespace {

// Whether any path in `sorted` is `path` or lies below it.
bool touches(const std::vector<std::string>& sorted, const std::string& path) {
  if (path.empty()) return !sorted.empty();
  if (std::binary_search(sorted.begin(), sorted.end(), path)) return true;
  const std::string below = path + "/";
  const auto it = std::lower_bound(sorted.begin(), sorted.end(), below);
  return it != sorted.end() && it->starts_with(below);
}

Result<void> clean_dir(const Layers& layers, const LayerView& view,
                       const std::vector<std::string>& changed, Trash& trash, int dir,
                       const std::string& rel) {
  std::size_t budget = layers.limits->max_entries;
  KERNEX_ASSIGN_OR_RETURN(auto entries, list_dir(dir, layers.in_upper(rel), &budget));
  for (const DirEntry& e : entries) {
    const std::string path = join(rel, e.name);
    if (!touches(changed, path)) {
      if (!trash.take(dir, e.name))
        KERNEX_RETURN_IF_ERROR(remove_tree(dir, e.name, layers.in_upper(path)));
      continue;
    }
    if (!S_ISDIR(e.st.st_mode) || view.hiding_dirs.contains(path)) continue;
    const Fd child(::openat(dir, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (child.get() < 0)
      return fail(ErrorCode::Io, layers.in_upper(path) + ": cannot open: " + errno_text(errno));
    KERNEX_RETURN_IF_ERROR(clean_dir(layers, view, changed, trash, child.get(), path));
  }
  return {};
}

}  // namespace

Result<void> clean_upper(const Layers& layers, const LayerView& view,
                         const std::vector<Planned>& left, Trash& trash, int dir,
                         const std::string& rel) {
  std::vector<std::string> changed;
  for (const Planned& p : left) {
    changed.push_back(p.change.path);
    if (p.change.kind == ChangeKind::Renamed) changed.push_back(p.change.from);
    // A change sourced from a redirected directory needs that directory kept.
    if (!p.group.empty()) changed.push_back(p.group);
  }
  std::sort(changed.begin(), changed.end());
  return clean_dir(layers, view, changed, trash, dir, rel);
}

}  // namespace kernex::workspace::detail
