// Memory stores: conversations, summaries and usage. The interface hides the storage engine,
// so an embedded store and a networked one implement the same calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/message.hpp"

namespace kernex {

// A conversation is scoped by channel + sender + project ("" is a project like any other:
// the same key is used to read and to write, fixing kernex's ""/"default" mismatch).
struct ConversationKey {
  std::string channel;
  std::string sender_id;
  std::string project;
};

// A compaction summary covering the conversation's oldest `covered_messages` messages.
struct StoredSummary {
  std::string text;
  std::uint64_t covered_messages = 0;
};

struct UsageRecord {
  std::string conversation_id;
  std::string sender_id;
  std::string model;
  std::string provider;
  Usage usage;
};

class MemoryStore {
 public:
  virtual ~MemoryStore() = default;
  // The active conversation for `key`, reused while idle for less than `idle`; else a new one.
  virtual Result<std::string> open_conversation(const ConversationKey& key,
                                                std::chrono::minutes idle) = 0;
  // The newest `limit` messages, oldest first, in insertion order (no timestamp ties).
  virtual Result<std::vector<ContextEntry>> recent_messages(const std::string& conversation_id,
                                                            std::size_t limit) = 0;
  // The oldest `count` messages, oldest first.
  virtual Result<std::vector<ContextEntry>> oldest_messages(const std::string& conversation_id,
                                                            std::size_t count) = 0;
  virtual Result<std::uint64_t> message_count(const std::string& conversation_id) = 0;
  // Appends an exchange atomically: all entries or none.
  virtual Result<void> append_messages(const std::string& conversation_id,
                                       const std::vector<ContextEntry>& entries) = 0;
  // The stored compaction summary, if any, so it is reused rather than recomputed each turn.
  virtual Result<std::optional<StoredSummary>> compaction_summary(
      const std::string& conversation_id) = 0;
  virtual Result<void> save_compaction_summary(const std::string& conversation_id,
                                               const StoredSummary& summary) = 0;
  virtual Result<void> record_usage(const UsageRecord& record) = 0;
  // Facts about a sender (key -> value), injected into the system prompt when asked for.
  virtual Result<std::vector<std::pair<std::string, std::string>>> facts(
      const std::string& sender_id) {
    (void)sender_id;
    return std::vector<std::pair<std::string, std::string>>{};
  }
};

}  // namespace kernex
