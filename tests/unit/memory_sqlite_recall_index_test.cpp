// The SQLite store indexes user messages for recall in batches (migration 010): a message waits
// above the recall watermark until a few dozen have, or until a recall could find it. Whatever
// waits, recall answers as if every message were indexed, across restarts, deletes and tenants,
// and the full-text index stays consistent.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "kernex/plugin_host.hpp"
#include "sqlite_raw.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::raw_int;
using testing::TempDir;

class RecallIndex : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> open() {
    auto s = host.create_memory("sqlite", Json{{"path", file.string()}});
    EXPECT_TRUE(s) << s.error().describe();
    return s ? *s : nullptr;
  }
  std::string conversation(MemoryStore& s, const MemoryScope& scope, const std::string& sender,
                           const std::string& channel = "cli") {
    return s.open_conversation(scope, {channel, sender, ""}, std::chrono::minutes(120)).value();
  }
  void exchange(MemoryStore& s, const MemoryScope& scope, const std::string& conv,
                const std::string& text) {
    ExchangeRecord r;
    r.conversation_id = conv;
    r.messages = {ContextEntry::user(text), ContextEntry::assistant("noted")};
    ASSERT_TRUE(s.save_exchange(scope, r));
  }
  std::vector<RecallHit> recall(MemoryStore& s, const MemoryScope& scope, const std::string& text,
                                const std::string& sender, const std::string& current = "",
                                std::size_t skip_newest = 0) {
    auto hits = s.recall(scope, RecallQuery{text, sender, 5, current, skip_newest, std::nullopt});
    EXPECT_TRUE(hits) << hits.error().describe();
    return hits.value_or(std::vector<RecallHit>{});
  }
  std::int64_t watermark() { return raw_int(file, "SELECT seq FROM recall_watermark"); }
  std::int64_t newest_seq() { return raw_int(file, "SELECT max(seq) FROM messages"); }
  // FTS5's own check of its index structure.
  bool index_consistent() {
    return raw_int(file, "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')") == 0;
  }

  TempDir dir;
  std::filesystem::path file = dir.path() / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  const MemoryScope local = MemoryScope::local();
};

// Saved, the store closed (as a crash would leave it: nothing indexed at close), opened again:
// another conversation of the sender recalls the messages, which recall indexed first.
TEST_F(RecallIndex, ARecallFindsMessagesStillAboveTheWatermarkAfterARestart) {
  std::string first;
  {
    auto s = open();
    first = conversation(*s, local, "alice");
    exchange(*s, local, first, "my aardvark is called Rufus");
    exchange(*s, local, first, "Rufus eats termites");
  }
  EXPECT_LT(watermark(), newest_seq());  // waiting: the turn wrote no index pages
  auto s = open();
  ASSERT_TRUE(s->close_conversation(local, first, std::nullopt));
  const std::string second = conversation(*s, local, "alice");
  ASSERT_NE(first, second);
  const auto hits = recall(*s, local, "aardvark Rufus", "alice", second, 0);
  ASSERT_EQ(hits.size(), 2u);  // both words first, then the one with "Rufus" only
  EXPECT_EQ(hits[0].conversation_id, first);
  EXPECT_EQ(hits[0].text, "my aardvark is called Rufus");
  EXPECT_EQ(watermark(), newest_seq());
  EXPECT_EQ(recall(*s, local, "termites", "alice", second, 0).size(), 1u);
  EXPECT_TRUE(index_consistent());
}

// A hot session's recall leaves out its own history window, so what waits there is not indexed for
// it; a message of the same conversation older than the window is.
TEST_F(RecallIndex, WhatWaitsInsideTheHistoryWindowIsNotIndexedForItsOwnRecall) {
  auto s = open();
  const std::string conv = conversation(*s, local, "alice");
  exchange(*s, local, conv, "the wombat digs burrows");
  exchange(*s, local, conv, "the numbat eats ants");
  const std::int64_t before = watermark();
  EXPECT_TRUE(recall(*s, local, "wombat burrows", "alice", conv, 4).empty());
  EXPECT_EQ(watermark(), before);
  // A window of the newest two messages: the wombat's exchange is older, so it is recalled.
  const auto hits = recall(*s, local, "wombat burrows", "alice", conv, 2);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].text, "the wombat digs burrows");
  EXPECT_EQ(watermark(), newest_seq());
}

// Without any recall, every few dozen user messages are indexed in the batch saving the last.
TEST_F(RecallIndex, ManyTurnsAreIndexedInBatchesWithoutARecall) {
  auto s = open();
  for (int i = 0; i < 40; ++i) {
    const std::string conv = conversation(*s, local, "user-" + std::to_string(i));
    exchange(*s, local, conv, "question number " + std::to_string(i) + " about kiwis");
  }
  const std::int64_t mark = watermark();
  EXPECT_GT(mark, 0);
  EXPECT_LT(mark, newest_seq());
  EXPECT_GE(raw_int(file, "SELECT count(*) FROM messages WHERE role = 'user' AND seq <= " +
                              std::to_string(mark)),
            32);
  EXPECT_EQ(recall(*s, local, "kiwis", "").size(), 5u);  // every sender: the rest indexed first
  EXPECT_EQ(watermark(), newest_seq());
  EXPECT_TRUE(index_consistent());
}

// Deleting a conversation whose messages wait, and one whose messages are indexed, keeps the index
// consistent and finds neither; a row inserted below the watermark (an import restoring old seqs)
// is indexed at once.
TEST_F(RecallIndex, DeletesAndRowsBelowTheWatermarkKeepTheIndexConsistent) {
  auto s = open();
  const std::string indexed = conversation(*s, local, "bob");
  exchange(*s, local, indexed, "the quokka smiles");
  const std::string other = conversation(*s, local, "carol");
  exchange(*s, local, other, "hello there");
  ASSERT_EQ(recall(*s, local, "quokka smiles", "carol", other, 0).size(), 0u);
  ASSERT_EQ(recall(*s, local, "quokka smiles", "", other, 0).size(), 1u);  // indexed it
  ASSERT_EQ(watermark(), newest_seq());
  const std::string waiting = conversation(*s, local, "dave");
  exchange(*s, local, waiting, "the quokka jumps");
  ASSERT_LT(watermark(), newest_seq());
  ASSERT_TRUE(s->delete_conversation(local, indexed));
  ASSERT_TRUE(s->delete_conversation(local, waiting));
  EXPECT_TRUE(recall(*s, local, "quokka", "", other, 0).empty());
  EXPECT_TRUE(index_consistent());
  // seq 1 was the deleted "quokka smiles": a restored row there is below the mark.
  ASSERT_EQ(
      raw_int(file, "INSERT INTO messages (seq, conversation_id, role, content) VALUES (1, '" +
                        other + "', 'user', 'a restored platypus')"),
      0);
  EXPECT_EQ(recall(*s, local, "platypus", "carol", "", 0).size(), 1u);
  EXPECT_TRUE(index_consistent());
}

// A message waiting in one tenant is recalled by that tenant only, whatever the sender's name.
TEST_F(RecallIndex, WaitingMessagesStayTheirTenants) {
  auto s = open();
  const MemoryScope acme = MemoryScope::of("acme").value();
  const std::string conv = conversation(*s, acme, "alice");
  exchange(*s, acme, conv, "the acme launch code is pelican");
  EXPECT_TRUE(recall(*s, local, "launch pelican", "alice", "", 0).empty());
  EXPECT_TRUE(recall(*s, local, "launch pelican", "", "", 0).empty());
  EXPECT_EQ(recall(*s, acme, "launch pelican", "alice", "", 0).size(), 1u);
  EXPECT_TRUE(recall(*s, local, "launch pelican", "", "", 0).empty());
}

}  // namespace
}  // namespace kernex
