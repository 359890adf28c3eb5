// Reading the upper layer as overlayfs wrote it and comparing the merged view with the real tree.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/workspace/overlay.hpp"
#include "beneath.hpp"
#include "manifest.hpp"

namespace kernex::workspace::detail {

// Both trees of one overlay, open.
struct Layers {
  int lower = -1;
  int upper = -1;
  std::string lower_path;
  std::string upper_path;
  XattrNamespace xattr = XattrNamespace::Trusted;
  const OverlayLimits* limits = nullptr;
  const Manifest* manifest = nullptr;
  // Reads of either tree in path order reuse the directory just opened.
  mutable DirCache lower_dirs;
  mutable DirCache upper_dirs;

  std::string attr(std::string_view name) const;  // "trusted.overlay.<name>"
  std::string in_lower(std::string_view rel) const { return label("real tree", lower_path, rel); }
  std::string in_upper(std::string_view rel) const { return label("upper layer", upper_path, rel); }
};

// What the merged view holds at a path the upper layer defines.
struct NewEntry {
  EntryType type = EntryType::None;
  std::uint32_t mode = 0;
  bool from_lower = false;  // the content is the real tree's at `source` (a redirected directory)
  std::string source;       // where the content is: a path in upper/ (or the real tree)
  std::string group;        // the redirected directory it came through: accepted all together
};

struct LayerView {
  std::map<std::string, NewEntry> entries;              // every path the upper layer defines
  std::set<std::string> whiteouts;                      // upper paths that are whiteouts
  std::set<std::string> hidden_roots;                   // the real tree below these is not merged
  std::set<std::string> hiding_dirs;                    // upper dirs that are opaque or redirected
  std::map<std::string, std::string> redirect_origins;  // real dir -> the directory merging it
};

// One change with what accept and diff need beyond the public fields.
struct Planned {
  Change change;
  std::optional<NewEntry> next;  // the new entry (none for Deleted)
  std::string group;             // non-empty: part of a redirected directory's rename
};

Result<LayerView> read_layer(const Layers& layers);

// Every change, sorted by path, renames paired (see renames.cpp).
Result<std::vector<Planned>> plan_changes(const Layers& layers, const LayerView& view);

// Whether the real tree's regular file `lower_rel` holds the same bytes as `next`'s source.
Result<bool> same_file_content(const Layers& layers, const std::string& lower_rel,
                               const NewEntry& next);

// Opens the regular file holding `next`'s content (upper/ or the real tree).
Result<Fd> open_source(const Layers& layers, const NewEntry& next, struct stat* st);

// The target of a symlink of the view.
Result<std::string> new_link_target(const Layers& layers, const NewEntry& next);

// Finds deleted and added regular files with the same bytes and makes each pair one Renamed
// change (bounded: a few candidates of the same size per added file).
Result<void> pair_renames(const Layers& layers, std::vector<Planned>& changes);

}  // namespace kernex::workspace::detail
