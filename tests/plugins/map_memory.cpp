// A memory store keeping everything in maps, one conversation per key. Option
// `audits_in_exchange` (bool): audit rows ride save_exchange; each row's `reason` says which call
// brought it (record_tool_call or save_exchange), for tests of how a run hands them over.
#include <algorithm>
#include <map>
#include <mutex>

#include "kernex/plugin.hpp"

namespace {

class MapMemory final : public kernex::MemoryStore {
 public:
  explicit MapMemory(bool audits_in_exchange) : audits_in_exchange_(audits_in_exchange) {}
  bool audits_in_exchange() const override { return audits_in_exchange_; }
  kernex::Result<void> record_tool_call(const kernex::MemoryScope&,
                                        const kernex::AuditRecord& record) override {
    std::lock_guard lock(mutex_);
    audits_.push_back(record);
    audits_.back().reason = "record_tool_call";
    return {};
  }
  kernex::Result<std::vector<kernex::AuditRecord>> audit_log(const kernex::MemoryScope&,
                                                             std::size_t limit) override {
    std::lock_guard lock(mutex_);
    return std::vector<kernex::AuditRecord>(
        audits_.begin(),
        audits_.begin() + static_cast<std::ptrdiff_t>(std::min(limit, audits_.size())));
  }
  kernex::Result<void> save_exchange(const kernex::MemoryScope& scope,
                                     const kernex::ExchangeRecord& record) override {
    KERNEX_RETURN_IF_ERROR(append_messages(scope, record.conversation_id, record.messages));
    std::lock_guard lock(mutex_);
    if (record.usage) usage_.push_back(*record.usage);
    for (auto audit : record.audits) {
      audit.reason = "save_exchange";
      audits_.push_back(std::move(audit));
    }
    return {};
  }
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

  const bool audits_in_exchange_;
  std::mutex mutex_;
  std::vector<kernex::AuditRecord> audits_;
  std::map<std::string, std::vector<kernex::ContextEntry>> messages_;
  std::map<std::string, kernex::StoredSummary> summaries_;
  std::vector<kernex::UsageRecord> usage_;
};

kernex::Result<std::shared_ptr<kernex::MemoryStore>> make_map(const kernex::Json& config) {
  bool with_exchange = false;
  if (config.is_object() && config.contains("audits_in_exchange")) {
    if (!config["audits_in_exchange"].is_boolean())
      return kernex::fail(kernex::ErrorCode::Config, "map: audits_in_exchange must be a boolean");
    with_exchange = config["audits_in_exchange"].get<bool>();
  }
  return std::make_shared<MapMemory>(with_exchange);
}

}  // namespace

KERNEX_PLUGIN(Memory, "map", "1.0.0", "Keeps conversations in memory", make_map)
