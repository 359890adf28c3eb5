// A memory store that lives as long as the process: for hosts that keep no state between
// runs, and for exercising context building without a database. Config: none (the
// kernel's data_dir is accepted and ignored).
#include <chrono>
#include <map>
#include <mutex>

#include "kernex/plugin.hpp"

namespace {

using kernex::ErrorCode;
using kernex::Result;
using Clock = std::chrono::steady_clock;

class VolatileStore final : public kernex::MemoryStore {
 public:
  Result<std::string> open_conversation(const kernex::MemoryScope& scope,
                                        const kernex::ConversationKey& key,
                                        std::chrono::minutes idle) override {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    const std::string active =
        scope.tenant() + '\x1f' + key.channel + '\x1f' + key.sender_id + '\x1f' + key.project;
    if (auto it = active_.find(active); it != active_.end()) {
      Conversation& conv = conversations_.at(it->second);
      if (now - conv.last_activity < idle) {
        conv.last_activity = now;
        return it->second;
      }
    }
    const std::string id = "volatile-" + std::to_string(++counter_);
    conversations_[id].last_activity = now;
    conversations_[id].tenant = scope.tenant();
    active_[active] = id;
    return id;
  }

  Result<std::vector<kernex::ContextEntry>> recent_messages(const kernex::MemoryScope& scope,
                                                            const std::string& id,
                                                            std::size_t limit) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto conv, find(scope, id));
    const auto& m = (conv)->messages;
    const std::size_t from = m.size() > limit ? m.size() - limit : 0;
    return std::vector<kernex::ContextEntry>(m.begin() + static_cast<std::ptrdiff_t>(from),
                                             m.end());
  }

  Result<std::vector<kernex::ContextEntry>> oldest_messages(const kernex::MemoryScope& scope,
                                                            const std::string& id,
                                                            std::size_t count) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto conv, find(scope, id));
    const auto& m = (conv)->messages;
    return std::vector<kernex::ContextEntry>(
        m.begin(), m.begin() + static_cast<std::ptrdiff_t>(std::min(count, m.size())));
  }

  Result<std::uint64_t> message_count(const kernex::MemoryScope& scope,
                                      const std::string& id) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto conv, find(scope, id));
    return (conv)->messages.size();
  }

  Result<void> append_messages(const kernex::MemoryScope& scope, const std::string& id,
                               const std::vector<kernex::ContextEntry>& entries) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto conv, find(scope, id));
    (conv)->messages.insert((conv)->messages.end(), entries.begin(), entries.end());
    (conv)->last_activity = Clock::now();
    return {};
  }

  Result<std::optional<kernex::StoredSummary>> compaction_summary(const kernex::MemoryScope& scope,
                                                                  const std::string& id) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto conv, find(scope, id));
    return (conv)->summary;
  }

  Result<void> save_compaction_summary(const kernex::MemoryScope& scope, const std::string& id,
                                       const kernex::StoredSummary& summary) override {
    std::lock_guard lock(mutex_);
    KERNEX_ASSIGN_OR_RETURN(auto conv, find(scope, id));
    (conv)->summary = summary;
    return {};
  }

  Result<void> delete_conversation(const kernex::MemoryScope& scope,
                                   const std::string& id) override {
    std::lock_guard lock(mutex_);
    KERNEX_RETURN_IF_ERROR(find(scope, id));
    conversations_.erase(id);
    std::erase_if(active_, [&](const auto& entry) { return entry.second == id; });
    std::erase_if(usage_, [&](const Usage& u) {
      return u.tenant == scope.tenant() && u.record.conversation_id == id;
    });
    return {};
  }

  Result<void> record_usage(const kernex::MemoryScope& scope,
                            const kernex::UsageRecord& record) override {
    std::lock_guard lock(mutex_);
    usage_.push_back({scope.tenant(), record});
    return {};
  }

 private:
  struct Conversation {
    Clock::time_point last_activity;
    std::vector<kernex::ContextEntry> messages;
    std::optional<kernex::StoredSummary> summary;
    std::string tenant;  // a conversation of another tenant is not found
  };
  struct Usage {
    std::string tenant;
    kernex::UsageRecord record;
  };

  Result<Conversation*> find(const kernex::MemoryScope& scope, const std::string& id) {
    auto it = conversations_.find(id);
    if (it == conversations_.end() || it->second.tenant != scope.tenant())
      return kernex::fail(ErrorCode::Memory, "volatile: no conversation " + id);
    return &it->second;
  }

  std::mutex mutex_;
  std::map<std::string, Conversation> conversations_;
  std::map<std::string, std::string> active_;  // tenant, channel, sender, project -> id
  std::vector<Usage> usage_;
  std::uint64_t counter_ = 0;
};

Result<std::shared_ptr<kernex::MemoryStore>> make_volatile(const kernex::Json& config) {
  // data_dir is set by the kernel for every memory plugin; this one keeps no files.
  const bool only_data_dir =
      config.is_object() && config.size() == 1 && config.contains("data_dir");
  if (!config.is_null() && !(config.is_object() && config.empty()) && !only_data_dir) {
    return kernex::fail(ErrorCode::Config, "volatile: takes no options");
  }
  return std::make_shared<VolatileStore>();
}

}  // namespace

KERNEX_PLUGIN(Memory, "volatile", "1.0.0", "Conversations kept in process memory only",
              make_volatile)
