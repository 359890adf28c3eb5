// Accept: choose the changes (with what they need: their new parent directories, the rest of a
// renamed directory), refuse what must never land, set aside conflicts, apply the rest
// (removals deepest first, then creations parents first, files staged and renamed in one
// durable batch), record the new real state in the manifest and drop what landed from upper/.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "overlay_state.hpp"
#include "real_tree_writer.hpp"
#include "trash.hpp"

namespace kernex::workspace::detail {

namespace {

enum class Fate { Skip, Pending, Conflict, Refused, Applied };

struct Run {
  Overlay::State& state;
  const Layers& layers;
  Trash& trash;
  const KernelGuard& guard;
  std::vector<Planned> all;
  std::vector<Fate> fate;
  AcceptResult result;
};

const Planned* find_change(const std::vector<Planned>& all, std::string_view path) {
  const auto it = std::lower_bound(all.begin(), all.end(), path,
                                   [](const Planned& p, auto v) { return p.change.path < v; });
  return it != all.end() && it->change.path == path ? &*it : nullptr;
}

// A chosen change brings the new directories above it and the rest of its renamed directory.
void complete_selection(Run& run) {
  for (int pass = 0; pass < 2; ++pass) {
    std::set<std::string> groups;
    for (std::size_t i = 0; i < run.all.size(); ++i) {
      if (run.fate[i] != Fate::Pending) continue;
      const Planned& p = run.all[i];
      if (!p.group.empty()) groups.insert(p.group);
      if (!p.next) continue;
      for (std::string_view dir = parent_of(p.change.path); !dir.empty(); dir = parent_of(dir)) {
        const Planned* up = find_change(run.all, dir);
        if (up && up->next && up->next->type == EntryType::Dir)
          run.fate[static_cast<std::size_t>(up - run.all.data())] = Fate::Pending;
      }
    }
    for (std::size_t i = 0; i < run.all.size(); ++i)
      if (!run.all[i].group.empty() && groups.contains(run.all[i].group))
        run.fate[i] = Fate::Pending;
  }
}

std::optional<std::string> refusal(const Layers& layers, const Planned& p) {
  if (!p.next) return std::nullopt;
  if (p.next->type == EntryType::Other)
    return "it is not a file, symlink or directory (a FIFO, socket or device is never applied)";
  if (p.next->type != EntryType::Symlink) return std::nullopt;
  auto target = new_link_target(layers, *p.next);
  if (!target) return target.error().describe();
  if (auto escape = symlink_escape(p.change.path, *target)) return "a symlink: " + *escape;
  return std::nullopt;
}

// Whether the real entry at `path` is still what the manifest recorded: the reason if not.
Result<std::optional<std::string>> drift(const Run& run, const std::string& path) {
  KERNEX_ASSIGN_OR_RETURN(auto now,
                          lstat_beneath(run.layers.lower, path, run.layers.in_lower(path)));
  const auto it = run.state.manifest.find(path);
  using Reason = std::optional<std::string>;
  if (it == run.state.manifest.end())
    return now ? Reason("it appeared in the real tree after the session started") : Reason();
  if (!now) return Reason("it was removed from the real tree after the session started");
  const ManifestEntry then = it->second, current = entry_of(*now);
  if (then.type != current.type) return Reason("its type changed in the real tree");
  if (then.ino != current.ino) return Reason("it was replaced in the real tree (other inode)");
  if (then.type != EntryType::Dir &&
      (then.size != current.size || then.mtime_ns != current.mtime_ns))
    return Reason("it changed in the real tree (size or modification time)");
  return Reason();
}

Result<void> check(Run& run, bool force) {
  for (std::size_t i = 0; i < run.all.size(); ++i) {
    if (run.fate[i] != Fate::Pending) continue;
    const Planned& p = run.all[i];
    if (auto why = kernel_refusal(p.change, run.guard)) {
      run.fate[i] = Fate::Refused;
      run.result.refused.push_back({p.change.path, *why});
      continue;
    }
    if (auto why = refusal(run.layers, p)) {
      run.fate[i] = Fate::Refused;
      run.result.refused.push_back({p.change.path, *why});
      continue;
    }
    KERNEX_ASSIGN_OR_RETURN(auto why, drift(run, p.change.path));
    if (!why && p.change.kind == ChangeKind::Renamed) {
      KERNEX_ASSIGN_OR_RETURN(why, drift(run, p.change.from));
    }
    if (why && !force) {
      run.fate[i] = Fate::Conflict;
      run.result.conflicts.push_back({p.change.path, *why});
    }
  }
  // A renamed directory lands whole or not at all.
  std::set<std::string> blocked;
  for (std::size_t i = 0; i < run.all.size(); ++i)
    if ((run.fate[i] == Fate::Conflict || run.fate[i] == Fate::Refused) &&
        !run.all[i].group.empty())
      blocked.insert(run.all[i].group);
  for (std::size_t i = 0; i < run.all.size(); ++i) {
    if (run.fate[i] != Fate::Pending || !blocked.contains(run.all[i].group)) continue;
    run.fate[i] = Fate::Conflict;
    run.result.conflicts.push_back(
        {run.all[i].change.path, "part of the renamed directory \"" + run.all[i].group +
                                     "\", which has a conflict or a refused path"});
  }
  return {};
}

void refuse(Run& run, std::size_t i, const Error& e) {
  run.fate[i] = Fate::Refused;
  run.result.refused.push_back({run.all[i].change.path, e.describe()});
}

// The real entry a change takes away, if any: (path, type).
std::optional<std::pair<std::string, EntryType>> removed_by(const Change& c) {
  switch (c.kind) {
    case ChangeKind::Deleted:
    case ChangeKind::TypeChanged:
      return std::pair(c.path, c.old_type);
    case ChangeKind::Renamed:
      return std::pair(c.from, EntryType::File);
    default:
      return std::nullopt;
  }
}

void apply(Run& run) {
  RealTreeWriter writer(run.layers, run.trash);
  // Removals, deepest (reverse path order) first.
  std::vector<std::pair<std::string, std::size_t>> removals;
  for (std::size_t i = 0; i < run.all.size(); ++i)
    if (run.fate[i] == Fate::Pending)
      if (auto r = removed_by(run.all[i].change)) removals.emplace_back(r->first, i);
  std::sort(removals.rbegin(), removals.rend());
  // A renamed directory's origin still holds the content its new place takes: it goes last.
  auto remove_pass = [&](bool grouped) {
    for (const auto& [path, i] : removals) {
      if (run.all[i].group.empty() == grouped || run.fate[i] != Fate::Pending) continue;
      if (auto r = writer.remove(path, removed_by(run.all[i].change)->second); !r)
        refuse(run, i, r.error());
    }
  };
  remove_pass(false);
  // Creations, parents first (path order).
  for (std::size_t i = 0; i < run.all.size(); ++i) {
    if (run.fate[i] != Fate::Pending || !run.all[i].next) continue;
    const Planned& p = run.all[i];
    Result<void> done;
    if (p.change.kind == ChangeKind::ModeChanged)
      done = writer.set_mode(p.change.path, p.next->mode);
    else if (p.next->type == EntryType::Dir)
      done = writer.make_dir(p.change.path, p.next->mode);
    else
      done = writer.stage(p.change.path, *p.next, i);
    if (!done) refuse(run, i, done.error());
  }
  for (const auto& [i, error] : writer.commit()) refuse(run, i, error);
  remove_pass(true);
  for (std::size_t i = 0; i < run.all.size(); ++i) {
    if (run.fate[i] != Fate::Pending) continue;
    run.fate[i] = Fate::Applied;
    run.result.applied.push_back(run.all[i].change.path);
    if (touched_kernel_path(run.all[i].change, run.guard))
      run.result.kernel_landed.push_back(run.all[i].change.path);
  }
}

// The manifest takes the real tree's new state at every path that landed.
Result<void> record(Run& run, int layer_dir) {
  Manifest& m = run.state.manifest;
  for (std::size_t i = 0; i < run.all.size(); ++i) {
    if (run.fate[i] != Fate::Applied) continue;
    const Change& c = run.all[i].change;
    if (auto r = removed_by(c)) {
      auto it = m.lower_bound(r->first);
      while (it != m.end() && at_or_below(it->first, r->first)) it = m.erase(it);
    }
    if (!run.all[i].next) continue;
    KERNEX_ASSIGN_OR_RETURN(auto now,
                            lstat_beneath(run.layers.lower, c.path, run.layers.in_lower(c.path)));
    if (now) m.insert_or_assign(c.path, entry_of(*now));
  }
  return write_file_atomic(layer_dir, kManifestFile, format_manifest(m),
                           label("overlay manifest", run.state.layer.string(), kManifestFile));
}

// A redirected directory whose changes all landed leaves upper/ whole: its redirect now names
// a directory the real tree no longer has, so read again it would hide what just landed.
Result<void> drop_landed_redirects(const Run& run) {
  std::map<std::string, bool> landed;  // group -> all applied
  for (std::size_t i = 0; i < run.all.size(); ++i) {
    if (run.all[i].group.empty()) continue;
    auto [it, fresh] = landed.emplace(run.all[i].group, true);
    it->second = it->second && run.fate[i] == Fate::Applied;
  }
  for (const auto& [group, all_applied] : landed) {
    if (!all_applied) continue;
    const std::string where = run.layers.in_upper(group);
    KERNEX_ASSIGN_OR_RETURN(Fd dir, open_dir_beneath(run.layers.upper, parent_of(group), where));
    const std::string name(name_of(group));
    if (!run.trash.take(dir.get(), name))
      KERNEX_RETURN_IF_ERROR(remove_tree(dir.get(), name, where));
  }
  return {};
}

}  // namespace

Result<AcceptResult> accept_changes(Overlay::State& state, OpenLayers& open,
                                    const std::vector<std::string>& paths, bool force,
                                    const KernelGuard& guard) {
  KERNEX_ASSIGN_OR_RETURN(auto view, read_layer(open.layers));
  KERNEX_ASSIGN_OR_RETURN(auto all, plan_changes(open.layers, view));
  KERNEX_ASSIGN_OR_RETURN(const std::vector<bool> chosen, match_changes(all, paths));
  Trash trash = Trash::make(open.layer_dir.get());
  Run run{state, open.layers, trash, guard, std::move(all), {}, {}};
  run.fate.resize(run.all.size(), Fate::Skip);
  for (std::size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i]) run.fate[i] = Fate::Pending;
  complete_selection(run);
  KERNEX_RETURN_IF_ERROR(check(run, force));
  apply(run);
  open.layers.lower_dirs.clear();  // the real tree changed under the cached directory
  if (run.result.applied.empty()) return std::move(run.result);
  KERNEX_RETURN_IF_ERROR(record(run, open.layer_dir.get()));
  KERNEX_RETURN_IF_ERROR(drop_landed_redirects(run));
  // What did not land is still as planned; what did is gone from upper/ or now equal to it.
  std::vector<Planned> left;
  for (std::size_t i = 0; i < run.all.size(); ++i)
    if (run.fate[i] != Fate::Applied) left.push_back(std::move(run.all[i]));
  if (auto cleaned = clean_upper(open.layers, view, left, trash, open.upper.get(), ""); !cleaned)
    run.result.refused.push_back(
        {"", "accepted, but upper/ was not cleaned: " + cleaned.error().describe()});
  return std::move(run.result);
}

}  // namespace kernex::workspace::detail
