// MemoryStore::delete_conversation in the SQLite and volatile stores: everything naming the
// conversation goes, other conversations stay, an unknown id is a typed error.
#include <gtest/gtest.h>

#include "kernex/memory.hpp"
#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::TempDir;

class MemoryDelete : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> open(const std::string& name, Json options) {
    auto store = host.create_memory(name, options);
    EXPECT_TRUE(store) << store.error().describe();
    return store ? *store : nullptr;
  }
  // A conversation with an exchange, a compaction summary, usage and an audited tool call.
  std::string filled(MemoryStore& store, const std::string& sender, const std::string& word) {
    auto id = store
                  .open_conversation(kernex::MemoryScope::local(), {"cli", sender, ""},
                                     std::chrono::minutes(60))
                  .value();
    ToolCall call{"c1", "calculate", Json{{"expression", "1"}}};
    ContextEntry assistant = ContextEntry::assistant("");
    assistant.tool_calls = {call};
    EXPECT_TRUE(
        store.append_messages(kernex::MemoryScope::local(), id,
                              {ContextEntry::user("tell me about " + word), assistant,
                               ContextEntry::tool(ToolResult{"c1", "calculate", "1", false}),
                               ContextEntry::assistant(word + " facts")}));
    EXPECT_TRUE(store.save_compaction_summary(kernex::MemoryScope::local(), id,
                                              StoredSummary{"talked about " + word, 2}));
    EXPECT_TRUE(store.record_usage(kernex::MemoryScope::local(),
                                   UsageRecord{id, sender, "m", "p", Usage{}}));
    AuditRecord audit;
    audit.conversation_id = id;
    audit.sender_id = sender;
    audit.tool = "calculate";
    auto recorded = store.record_tool_call(kernex::MemoryScope::local(), audit);
    EXPECT_TRUE(recorded || recorded.error().code == ErrorCode::Unsupported);
    return id;
  }

  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
};

TEST_F(MemoryDelete, SqliteForgetsEverythingNamingTheConversation) {
  auto store = open("sqlite", Json{{"path", (dir / "memory.db").string()}});
  const std::string gone = filled(*store, "alice", "zeppelins");
  const std::string kept = filled(*store, "carol", "submarines");
  ASSERT_TRUE(store->delete_conversation(kernex::MemoryScope::local(), gone)) << "delete failed";

  EXPECT_TRUE(
      store->conversation_messages(kernex::MemoryScope::local(), gone, 0, 100).value().empty());
  EXPECT_FALSE(store->message_count(kernex::MemoryScope::local(), gone));
  EXPECT_FALSE(store->compaction_summary(kernex::MemoryScope::local(), gone).value());
  auto listed =
      store->list_conversations(kernex::MemoryScope::local(), ConversationFilter{}).value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, kept);
  // Recall no longer finds its messages or summary: the FTS rows went with them.
  RecallQuery q;
  q.text = "zeppelins";
  q.sender_id = "alice";
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(), q).value().empty());
  q.text = "submarines";
  q.sender_id = "carol";
  EXPECT_FALSE(store->recall(kernex::MemoryScope::local(), q).value().empty());
  auto audit = store->audit_log(kernex::MemoryScope::local(), 10).value();
  ASSERT_EQ(audit.size(), 1u);
  EXPECT_EQ(audit[0].conversation_id, kept);
  auto usage = store->usage_by_day(kernex::MemoryScope::local()).value();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].requests, 1u);
  EXPECT_EQ(store->conversation_messages(kernex::MemoryScope::local(), kept, 0, 100).value().size(),
            4u);

  // The sender's next message opens a new conversation, not the deleted one.
  auto next = store
                  ->open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                      std::chrono::minutes(60))
                  .value();
  EXPECT_NE(next, gone);
}

TEST_F(MemoryDelete, SqliteUnknownConversationIsAMemoryErrorNamingIt) {
  auto store = open("sqlite", Json{{"path", (dir / "memory.db").string()}});
  const std::string kept = filled(*store, "alice", "zeppelins");
  auto r = store->delete_conversation(kernex::MemoryScope::local(), "no-such-id");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Memory);
  EXPECT_NE(r.error().describe().find("no conversation no-such-id"), std::string::npos);
  EXPECT_EQ(store->conversation_messages(kernex::MemoryScope::local(), kept, 0, 100).value().size(),
            4u);
  ASSERT_TRUE(store->delete_conversation(kernex::MemoryScope::local(), kept));
  EXPECT_FALSE(store->delete_conversation(kernex::MemoryScope::local(),
                                          kept));  // twice: gone the first time
}

TEST_F(MemoryDelete, VolatileForgetsTheConversation) {
  auto store = open("volatile", Json::object());
  const std::string gone = filled(*store, "alice", "zeppelins");
  const std::string kept = filled(*store, "bob", "submarines");
  ASSERT_TRUE(store->delete_conversation(kernex::MemoryScope::local(), gone));
  EXPECT_FALSE(store->message_count(kernex::MemoryScope::local(), gone));
  EXPECT_FALSE(store->recent_messages(kernex::MemoryScope::local(), gone, 10));
  EXPECT_FALSE(store->compaction_summary(kernex::MemoryScope::local(), gone));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), kept).value(), 4u);
  // alice's key no longer leads to the deleted conversation.
  auto next = store
                  ->open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                      std::chrono::minutes(60))
                  .value();
  EXPECT_NE(next, gone);
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), next).value(), 0u);

  auto unknown = store->delete_conversation(kernex::MemoryScope::local(), gone);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::Memory);
}

}  // namespace
}  // namespace kernex
