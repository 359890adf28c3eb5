// Rename detection: overlayfs records a renamed file as a whiteout plus a new file (or, for a
// directory with redirect_dir, a redirect), so a rename is recognised by content: a deleted and
// an added regular file with the same non-empty bytes.
#include <algorithm>
#include <unordered_map>

#include "beneath.hpp"
#include "layer_status.hpp"

namespace kernex::workspace::detail {

namespace {

// Comparisons tried per added file, so many files of one size cannot make this quadratic.
constexpr std::size_t kMaxCandidates = 8;

}  // namespace

Result<void> pair_renames(const Layers& layers, std::vector<Planned>& changes) {
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> deleted_by_size;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const Change& c = changes[i].change;
    if (c.kind != ChangeKind::Deleted || c.old_type != EntryType::File) continue;
    const auto it = layers.manifest->find(c.path);
    if (it == layers.manifest->end() || it->second.size == 0) continue;
    deleted_by_size[it->second.size].push_back(i);
  }
  if (deleted_by_size.empty()) return {};
  std::vector<bool> paired(changes.size(), false);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    Planned& added = changes[i];
    if (added.change.kind != ChangeKind::Added || added.change.new_type != EntryType::File)
      continue;
    const int root = added.next->from_lower ? layers.lower : layers.upper;
    const std::string where = added.next->from_lower ? layers.in_lower(added.next->source)
                                                     : layers.in_upper(added.next->source);
    auto size = lstat_beneath(root, added.next->source, where);
    if (!size || !*size || (*size)->st_size == 0) continue;
    const auto bucket = deleted_by_size.find(static_cast<std::uint64_t>((*size)->st_size));
    if (bucket == deleted_by_size.end()) continue;
    std::size_t tried = 0;
    for (const std::size_t d : bucket->second) {
      if (paired[d]) continue;
      if (tried++ == kMaxCandidates) break;
      KERNEX_ASSIGN_OR_RETURN(bool same,
                              same_file_content(layers, changes[d].change.path, *added.next));
      if (!same) continue;
      paired[d] = true;
      added.change.kind = ChangeKind::Renamed;
      added.change.from = changes[d].change.path;
      added.change.old_type = EntryType::File;
      added.change.old_mode = changes[d].change.old_mode;
      if (added.group.empty()) added.group = changes[d].group;
      break;
    }
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    if (paired[i]) continue;
    if (kept != i) changes[kept] = std::move(changes[i]);
    ++kept;
  }
  changes.resize(kept);
  return {};
}

}  // namespace kernex::workspace::detail
