#include "merged_tools.hpp"

#include <algorithm>
#include <set>
#include <string>

#include "kernex/log.hpp"

namespace kernex {
namespace {

// A few: one per distinct set of lists (a kernel's toolboxes, and those a run's skills add); the
// oldest goes first, and the lists it held with it.
constexpr std::size_t kKept = 8;

bool same_lists(const MergedTools& merged, const std::vector<ToolList>& lists) {
  return std::equal(merged.lists.begin(), merged.lists.end(), lists.begin(), lists.end(),
                    [](const ToolList& a, const ToolList& b) { return a.get() == b.get(); });
}

std::shared_ptr<const MergedTools> merge(const std::vector<ToolList>& lists) {
  auto merged = std::make_shared<MergedTools>();
  merged->lists = lists;
  std::set<std::string, std::less<>> taken;
  for (std::size_t i = 0; i < lists.size(); ++i) {
    for (const ToolSpec& spec : *lists[i]) {
      if (!taken.insert(spec.name).second) {
        log(LogLevel::Warn, "tool '" + spec.name + "' is offered twice; keeping the first");
        continue;
      }
      merged->specs.push_back(spec);
      merged->source.push_back(i);
    }
  }
  return merged;
}

}  // namespace

std::shared_ptr<const MergedTools> MergedToolsCache::find_locked(
    const std::vector<ToolList>& lists) const {
  for (const auto& entry : entries_)
    if (same_lists(*entry, lists)) return entry;
  return nullptr;
}

std::shared_ptr<const MergedTools> MergedToolsCache::get(const std::vector<ToolList>& lists) {
  {
    std::lock_guard lock(mutex_);
    if (auto found = find_locked(lists)) return found;
  }
  // Merged outside the lock: of two runs that miss together, the first to finish is kept.
  std::shared_ptr<const MergedTools> merged = merge(lists);
  // Released after the lock (declared before it): it may hold the last references to its lists.
  std::shared_ptr<const MergedTools> dropped;
  std::lock_guard lock(mutex_);
  if (auto found = find_locked(lists)) return found;
  entries_.push_front(merged);
  if (entries_.size() > kKept) {
    dropped = std::move(entries_.back());
    entries_.pop_back();
  }
  return merged;
}

}  // namespace kernex
