// A memory store keeping everything in maps, one conversation per key.
#include <map>
#include <mutex>

#include "kernex/plugin.hpp"

namespace {

class MapMemory final : public kernex::MemoryStore {
 public:
  kernex::Result<std::string> open_conversation(const kernex::MemoryScope& scope,
                                                const kernex::ConversationKey& key,
                                                std::chrono::minutes) override {
    std::lock_guard lock(mutex_);
    std::string id = scope.tenant() + "/" + key.channel + "/" + key.sender_id + "/" + key.project;
    messages_.try_emplace(id);
    return id;
  }
  kernex::Result<std::vector<kernex::ContextEntry>> recent_messages(const kernex::MemoryScope&,
                                                                    const std::string& id,
                                                                    std::size_t limit) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto found, lookup(id));
    const auto& all = *found;
    const std::size_t from = all.size() > limit ? all.size() - limit : 0;
    return std::vector<kernex::ContextEntry>(all.begin() + static_cast<std::ptrdiff_t>(from),
                                             all.end());
  }
  kernex::Result<std::vector<kernex::ContextEntry>> oldest_messages(const kernex::MemoryScope&,
                                                                    const std::string& id,
                                                                    std::size_t count) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto found, lookup(id));
    const auto& all = *found;
    return std::vector<kernex::ContextEntry>(
        all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(count, all.size())));
  }
  kernex::Result<std::uint64_t> message_count(const kernex::MemoryScope&,
                                              const std::string& id) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto found, lookup(id));
    return (found)->size();
  }
  kernex::Result<void> append_messages(const kernex::MemoryScope&, const std::string& id,
                                       const std::vector<kernex::ContextEntry>& entries) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto found, lookup(id));
    (found)->insert((found)->end(), entries.begin(), entries.end());
    return {};
  }
  kernex::Result<std::optional<kernex::StoredSummary>> compaction_summary(
      const kernex::MemoryScope&, const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = summaries_.find(id);
    if (it == summaries_.end()) return std::optional<kernex::StoredSummary>();
    return std::optional<kernex::StoredSummary>(it->second);
  }
  kernex::Result<void> save_compaction_summary(const kernex::MemoryScope&, const std::string& id,
                                               const kernex::StoredSummary& summary) override {
    std::lock_guard lock(mutex_);
    summaries_[id] = summary;
    return {};
  }
  kernex::Result<void> record_usage(const kernex::MemoryScope&,
                                    const kernex::UsageRecord& record) override {
    std::lock_guard lock(mutex_);
    usage_.push_back(record);
    return {};
  }

 private:
  kernex::Result<std::vector<kernex::ContextEntry>*> lookup(const std::string& id) {
    auto it = messages_.find(id);
    if (it == messages_.end())
      return kernex::fail(kernex::ErrorCode::Memory, "no conversation " + id);
    return &it->second;
  }

  std::mutex mutex_;
  std::map<std::string, std::vector<kernex::ContextEntry>> messages_;
  std::map<std::string, kernex::StoredSummary> summaries_;
  std::vector<kernex::UsageRecord> usage_;
};

kernex::Result<std::shared_ptr<kernex::MemoryStore>> make_map(const kernex::Json&) {
  return std::make_shared<MapMemory>();
}

}  // namespace

KERNEX_PLUGIN(Memory, "map", "1.0.0", "Keeps conversations in memory", make_map)
