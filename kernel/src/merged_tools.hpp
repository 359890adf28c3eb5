// The tools of a run whose executors all hand out shared lists (kernex/toolbox.hpp's
// SharedToolList), merged once and kept for the next runs of the same lists: a run then copies no
// schema (copying and freeing every tool's JSON Schema was ~5 % of a run start in a burst, and
// most of its heap).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "kernex/tool.hpp"

namespace kernex {

using ToolList = std::shared_ptr<const std::vector<ToolSpec>>;

struct MergedTools {
  std::vector<ToolList> lists;      // held, so no other list can take their addresses (the key)
  std::vector<ToolSpec> specs;      // in list order; a name offered again is dropped (logged once)
  std::vector<std::size_t> source;  // for each spec, the index of its list
};

// One kernel's merges: the last few, by the lists' addresses. Owned by the kernel and destroyed
// before its plugins are unloaded: the lists it holds were made, and are freed, by their code.
class MergedToolsCache {
 public:
  // The merge of `lists` (none null), from the last few merged when they are the same lists in
  // the same order.
  std::shared_ptr<const MergedTools> get(const std::vector<ToolList>& lists);

 private:
  std::shared_ptr<const MergedTools> find_locked(const std::vector<ToolList>& lists) const;

  std::mutex mutex_;
  std::deque<std::shared_ptr<const MergedTools>> entries_;  // newest first
};

}  // namespace kernex
