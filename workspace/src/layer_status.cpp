// The upper layer walked without following anything, read as overlayfs records changes, and the
// resulting view compared with the manifest of the real tree.
#include "layer_status.hpp"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "beneath.hpp"

namespace kernex::workspace::detail {

std::string Layers::attr(std::string_view name) const {
  return std::string(xattr == XattrNamespace::Trusted ? "trusted" : "user") + ".overlay." +
         std::string(name);
}

namespace {

// Calls fn(path, entry) for each direct child of `dir` in the manifest ("" = the root).
template <class Fn>
void for_each_child(const Manifest& manifest, const std::string& dir, Fn fn) {
  auto it = dir.empty() ? manifest.begin() : manifest.lower_bound(dir + "/");
  for (; it != manifest.end() && at_or_below(it->first, dir); ++it) {
    if (it->first == dir) continue;
    const std::string_view rest =
        std::string_view(it->first).substr(dir.empty() ? 0 : dir.size() + 1);
    if (rest.find('/') == std::string_view::npos) fn(it->first, it->second);
  }
}

struct Walk {
  const Layers& layers;
  LayerView view;
  std::size_t budget = 0;
};

bool is_whiteout(const Walk& w, int dir, const DirEntry& e) {
  if (S_ISCHR(e.st.st_mode) && e.st.st_rdev == makedev(0, 0)) return true;
  return S_ISREG(e.st.st_mode) && e.st.st_size == 0 &&
         xattr_at(dir, e.name, w.layers.attr("whiteout")).has_value();
}

// The lower directory a redirected directory merges, or an error for a malformed value. A target
// the real tree lacks merges nothing (as overlayfs does).
Result<std::optional<std::string>> redirect_target(const Walk& w, const std::string& value,
                                                   const std::optional<std::string>& parent_lower,
                                                   const std::string& path) {
  std::string target;
  std::vector<std::string_view> parts;
  if (value.starts_with('/')) {
    target = value.substr(1);
  } else if (value.find('/') == std::string::npos && parent_lower) {
    target = join(*parent_lower, value);
  } else if (value.find('/') == std::string::npos) {
    return std::optional<std::string>();
  }
  if (!split_relative(target, parts))
    return fail(ErrorCode::Parse,
                w.layers.in_upper(path) + ": redirect xattr \"" +
                    Json(value).dump(-1, ' ', false, Json::error_handler_t::replace) +
                    "\" is not a path inside the tree");
  const auto it = w.layers.manifest->find(target);
  if (it == w.layers.manifest->end() || it->second.type != EntryType::Dir)
    return std::optional<std::string>();
  return std::optional<std::string>(target);
}

// The real tree's entries below `lower` appear at `path` (a redirected directory's children).
void expand_from_lower(Walk& w, const std::string& lower, const std::string& path,
                       const std::string& group) {
  const Manifest& m = *w.layers.manifest;
  for (auto it = m.lower_bound(lower); it != m.end() && at_or_below(it->first, lower); ++it) {
    const std::string at = path + it->first.substr(lower.size());
    w.view.entries.emplace(at, NewEntry{it->second.type, it->second.mode, true, it->first, group});
  }
}

Result<void> walk_dir(Walk& w, int dir, const std::string& rel,
                      const std::optional<std::string>& lower_dir, const std::string& group,
                      std::size_t depth);

Result<void> walk_subdir(Walk& w, int dir, const DirEntry& e, const std::string& path,
                         const std::optional<std::string>& lower_dir, const std::string& group,
                         std::size_t depth) {
  const Fd fd(::openat(dir, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0)
    return fail(ErrorCode::Io, w.layers.in_upper(path) + ": cannot open: " + errno_text(errno));
  const bool opaque = xattr_fd(fd.get(), w.layers.attr("opaque")) == "y";
  const auto redirect = xattr_fd(fd.get(), w.layers.attr("redirect"));
  std::optional<std::string> child_lower;
  std::string child_group = group;
  if (opaque) {
    w.view.hiding_dirs.insert(path);
  } else if (redirect) {
    KERNEX_ASSIGN_OR_RETURN(child_lower, redirect_target(w, *redirect, lower_dir, path));
    w.view.hiding_dirs.insert(path);
    child_group = path;
    if (child_lower) w.view.redirect_origins.emplace(*child_lower, path);
  } else if (lower_dir) {
    const auto it = w.layers.manifest->find(join(*lower_dir, e.name));
    if (it != w.layers.manifest->end() && it->second.type == EntryType::Dir)
      child_lower = it->first;
  }
  if (child_lower != path) w.view.hidden_roots.insert(path);
  w.view.entries.insert_or_assign(
      path, NewEntry{EntryType::Dir, static_cast<std::uint32_t>(e.st.st_mode & 07777), false, path,
                     child_group});
  return walk_dir(w, fd.get(), path, child_lower, child_group, depth + 1);
}

Result<void> walk_dir(Walk& w, int dir, const std::string& rel,
                      const std::optional<std::string>& lower_dir, const std::string& group,
                      std::size_t depth) {
  if (depth > w.layers.limits->max_depth)
    return fail(ErrorCode::Limit, w.layers.in_upper(rel) + " is deeper than " +
                                      std::to_string(w.layers.limits->max_depth) + " directories");
  auto entries = list_dir(dir, w.layers.in_upper(rel), &w.budget);
  if (!entries) {
    if (entries.error().code != ErrorCode::Limit) return std::unexpected(entries.error());
    return fail(ErrorCode::Limit, w.layers.in_upper("") + " holds more than " +
                                      std::to_string(w.layers.limits->max_entries) +
                                      " entries (OverlayLimits::max_entries)");
  }
  std::set<std::string> names;
  for (const DirEntry& e : *entries) {
    const std::string path = join(rel, e.name);
    names.insert(e.name);
    if (is_whiteout(w, dir, e)) {
      w.view.whiteouts.insert(path);
      w.view.hidden_roots.insert(path);
      continue;
    }
    if (S_ISDIR(e.st.st_mode)) {
      KERNEX_RETURN_IF_ERROR(walk_subdir(w, dir, e, path, lower_dir, group, depth));
      continue;
    }
    // A metacopy file holds no data of its own, so only one without data blocks can be one.
    if (S_ISREG(e.st.st_mode) && e.st.st_blocks == 0 && e.st.st_size > 0 &&
        xattr_at(dir, e.name, w.layers.attr("metacopy")))
      return fail(ErrorCode::Unsupported,
                  w.layers.in_upper(path) +
                      " is a metacopy entry (overlayfs metacopy=on), which is not supported: "
                      "mount the overlay without metacopy");
    w.view.entries.insert_or_assign(
        path, NewEntry{type_of(e.st.st_mode), static_cast<std::uint32_t>(e.st.st_mode & 07777),
                       false, path, group});
    w.view.hidden_roots.insert(path);
  }
  if (lower_dir && *lower_dir != rel) {
    for_each_child(*w.layers.manifest, *lower_dir, [&](const std::string& child, auto&) {
      const std::string name(name_of(child));
      if (!names.contains(name)) expand_from_lower(w, child, join(rel, name), group);
    });
  }
  return {};
}

Result<bool> same_bytes(int a, int b, const std::string& where_a, const std::string& where_b) {
  std::string ba(65536, '\0'), bb(65536, '\0');
  for (;;) {
    const ssize_t na = ::read(a, ba.data(), ba.size());
    if (na < 0) return fail(ErrorCode::Io, where_a + ": read: " + errno_text(errno));
    std::size_t got = 0;
    while (got < static_cast<std::size_t>(na)) {
      const ssize_t nb = ::read(b, bb.data() + got, static_cast<std::size_t>(na) - got);
      if (nb < 0) return fail(ErrorCode::Io, where_b + ": read: " + errno_text(errno));
      if (nb == 0) return false;
      got += static_cast<std::size_t>(nb);
    }
    if (std::memcmp(ba.data(), bb.data(), got) != 0) return false;
    if (na == 0) {
      char extra;
      const ssize_t nb = ::read(b, &extra, 1);
      return nb == 0;
    }
  }
}

// The change at `path` of the real tree's `old` into `next`, if any.
Result<std::optional<Planned>> compare(const Layers& layers, const std::string& path,
                                       const ManifestEntry* old, const NewEntry& next) {
  Planned p{Change{ChangeKind::Added, path, {}, EntryType::None, next.type, 0, next.mode}, next,
            next.group};
  if (!old) return std::optional<Planned>(p);
  p.change.old_type = old->type;
  p.change.old_mode = old->mode;
  if (old->type != next.type) {
    p.change.kind = ChangeKind::TypeChanged;
    return std::optional<Planned>(p);
  }
  bool same = true;
  if (next.type == EntryType::File) {
    KERNEX_ASSIGN_OR_RETURN(same, same_file_content(layers, path, next));
  } else if (next.type == EntryType::Symlink) {
    auto target = read_link_beneath(layers.lower, path, layers.in_lower(path));
    KERNEX_ASSIGN_OR_RETURN(std::string next_target, new_link_target(layers, next));
    same = target && *target == next_target;
  }
  if (!same) {
    p.change.kind = ChangeKind::Modified;
  } else if (old->mode != next.mode) {
    p.change.kind = ChangeKind::ModeChanged;
  } else {
    return std::optional<Planned>();
  }
  return std::optional<Planned>(p);
}

}  // namespace

Result<Fd> open_source(const Layers& layers, const NewEntry& next, struct stat* st) {
  DirCache& cache = next.from_lower ? layers.lower_dirs : layers.upper_dirs;
  const std::string where =
      next.from_lower ? layers.in_lower(next.source) : layers.in_upper(next.source);
  KERNEX_ASSIGN_OR_RETURN(int dir, cache.open(next.from_lower ? layers.lower : layers.upper,
                                              parent_of(next.source), where));
  return open_regular_at(dir, std::string(name_of(next.source)), where, st);
}

Result<std::string> new_link_target(const Layers& layers, const NewEntry& next) {
  if (next.from_lower)
    return read_link_beneath(layers.lower, next.source, layers.in_lower(next.source));
  return read_link_beneath(layers.upper, next.source, layers.in_upper(next.source));
}

Result<bool> same_file_content(const Layers& layers, const std::string& lower_rel,
                               const NewEntry& next) {
  struct stat sa = {};
  struct stat sb = {};
  auto a_dir =
      layers.lower_dirs.open(layers.lower, parent_of(lower_rel), layers.in_lower(lower_rel));
  if (!a_dir) return false;  // gone or no longer a file in the real tree: it differs
  auto a =
      open_regular_at(*a_dir, std::string(name_of(lower_rel)), layers.in_lower(lower_rel), &sa);
  if (!a) return false;
  const std::string where =
      next.from_lower ? layers.in_lower(next.source) : layers.in_upper(next.source);
  KERNEX_ASSIGN_OR_RETURN(Fd b, open_source(layers, next, &sb));
  if (sa.st_size != sb.st_size) return false;
  if (sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino) return true;
  return same_bytes(a->get(), b.get(), layers.in_lower(lower_rel), where);
}

Result<LayerView> read_layer(const Layers& layers) {
  Walk w{layers, {}, layers.limits->max_entries};
  KERNEX_RETURN_IF_ERROR(walk_dir(w, layers.upper, "", std::optional<std::string>(""), "", 0));
  return std::move(w.view);
}

Result<std::vector<Planned>> plan_changes(const Layers& layers, const LayerView& view) {
  std::vector<Planned> out;
  const Manifest& m = *layers.manifest;
  for (const auto& [path, next] : view.entries) {
    const auto it = m.find(path);
    KERNEX_ASSIGN_OR_RETURN(auto change,
                            compare(layers, path, it == m.end() ? nullptr : &it->second, next));
    if (change) out.push_back(std::move(*change));
  }
  // Real entries under a hidden root that the view does not define are gone.
  std::string last_root;
  bool have_root = false;
  for (const std::string& root : view.hidden_roots) {
    if (have_root && at_or_below(root, last_root)) continue;
    last_root = root;
    have_root = true;
    for (auto it = m.lower_bound(root); it != m.end() && at_or_below(it->first, root); ++it) {
      if (view.entries.contains(it->first)) continue;
      out.push_back(Planned{Change{ChangeKind::Deleted,
                                   it->first,
                                   {},
                                   it->second.type,
                                   EntryType::None,
                                   it->second.mode,
                                   0},
                            std::nullopt,
                            {}});
    }
  }
  // A deletion inside a redirected directory's origin belongs to its rename.
  for (Planned& p : out) {
    if (p.change.kind != ChangeKind::Deleted) continue;
    for (const auto& [origin, group] : view.redirect_origins) {
      if (at_or_below(p.change.path, origin)) p.group = group;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Planned& a, const Planned& b) { return a.change.path < b.change.path; });
  KERNEX_RETURN_IF_ERROR(pair_renames(layers, out));
  return out;
}

}  // namespace kernex::workspace::detail
