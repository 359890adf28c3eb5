// A hot session's context (the SQLite store keeps the newest messages of the conversations it
// read or saved lately) equals a full build from a store that holds nothing yet, turn after turn:
// with compaction, recall hits, a forget, and another connection writing between turns; and it
// never shows a conversation to another tenant; and a build's reads are one snapshot
// (kernex/context_reads.hpp) that a write inside it or another thread never deadlocks. Each suite
// runs with group commit and with every write its own commit.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cmath>
#include <future>
#include <limits>

#include "context_builder.hpp"
#include "kernex/context_reads.hpp"
#include "kernex/plugin_host.hpp"
#include "sqlite_raw.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::raw_int;
using testing::TempDir;

// A summary that names what it summarised, so two builds agree only on the same input.
class EchoSummarizer : public Summarizer {
 public:
  Result<std::string> summarize(const std::string& text) override {
    return "S" + std::to_string(text.size()) + ":" + text.substr(0, 40);
  }
};

class HotContext : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam())
      ::setenv("KERNEX_GROUP_COMMIT", "off", 1);
    else
      ::unsetenv("KERNEX_GROUP_COMMIT");
    hot = open();
    limits.max_context_messages = 6;
    limits.compaction = CompactionStrategy::Summarize;
  }
  void TearDown() override { ::unsetenv("KERNEX_GROUP_COMMIT"); }
  std::shared_ptr<MemoryStore> open() {
    auto s = host.create_memory("sqlite", Json{{"path", file.string()}});
    EXPECT_TRUE(s) << s.error().describe();
    return s ? *s : nullptr;
  }
  Result<BuiltContext> build(MemoryStore& store, const std::string& sender, const std::string& text,
                             const MemoryScope& scope) {
    ContextInputs in;
    in.store = &store;
    in.scope = scope;
    in.key = {"cli", sender, ""};
    in.system_prompt = "BASE";
    in.limits = &limits;
    in.summarizer = &summarizer;
    in.needs.outcomes = false;  // its "(5m ago)" ages depend on the second a build runs in
    return build_context(in, Request::from_text(sender, text));
  }
  // The hot store's build beside a full one (a store opened now: nothing cached, its own reads).
  BuiltContext compare(const std::string& sender, const std::string& text,
                       const MemoryScope& scope = MemoryScope::local()) {
    auto full_store = open();
    auto full = build(*full_store, sender, text, scope);
    auto warm = build(*hot, sender, text, scope);
    EXPECT_TRUE(full && warm);
    if (!full || !warm) return {};
    // A conversation either opens now is its own until its row commits with its first exchange
    // (group commit): each store then names its own. Any other is the same one.
    if (!full->context.history.empty()) {
      EXPECT_EQ(warm->conversation_id, full->conversation_id) << text;
    }
    EXPECT_EQ(warm->context.system_prompt, full->context.system_prompt) << text;
    EXPECT_EQ(warm->context.history, full->context.history) << text;
    EXPECT_EQ(warm->compaction.overflow, full->compaction.overflow) << text;
    EXPECT_EQ(warm->compaction.summarized, full->compaction.summarized) << text;
    return std::move(*warm);
  }
  // One turn's exchange as the kernel saves it, a tool call every third turn.
  void save(MemoryStore& store, const std::string& conv, const std::string& text, int n,
            const MemoryScope& scope = MemoryScope::local()) {
    ExchangeRecord r;
    r.conversation_id = conv;
    r.messages.push_back(ContextEntry::user(text));
    if (n % 3 == 0) {
      ContextEntry call = ContextEntry::assistant("");
      call.tool_calls.push_back(
          ToolCall{"c" + std::to_string(n), "lookup", Json{{"key", text}, {"n", n}, {"x", 0.1}}});
      call.provider_state = Json{{"thinking", "t" + std::to_string(n)}};
      r.messages.push_back(std::move(call));
      r.messages.push_back(ContextEntry::tool(
          ToolResult{"c" + std::to_string(n), "lookup", "result " + std::to_string(n), false}));
    }
    r.messages.push_back(ContextEntry::assistant("answer " + std::to_string(n)));
    ASSERT_TRUE(store.save_exchange(scope, r));
  }
  // A turn of `sender` on the hot store: compared with a full build, then saved.
  std::string turn(const std::string& sender, const std::string& text, int n) {
    auto built = compare(sender, text);
    save(*hot, built.conversation_id, text, n);
    return built.conversation_id;
  }
  // The hot store's context reads (the kernel's bracket), begun.
  ContextReadScope* begin_reads() {
    auto* reads = dynamic_cast<ContextReadScope*>(hot.get());
    EXPECT_NE(reads, nullptr);
    if (reads != nullptr) reads->begin_context_reads();
    return reads;
  }
  // The conversation of `sender` committed, so a store opened later finds it.
  std::string started(const std::string& sender, const std::string& text) {
    auto first = build(*hot, sender, text, MemoryScope::local());
    EXPECT_TRUE(first);
    save(*hot, first->conversation_id, text, 1);
    return first->conversation_id;
  }

  TempDir dir;
  std::filesystem::path file = dir.path() / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  std::shared_ptr<MemoryStore> hot;
  Limits limits;
  EchoSummarizer summarizer;
};

TEST_P(HotContext, GrowingHistoryWithCompactionEqualsAFullBuild) {
  const std::string conv = started("alice", "hello there");
  for (int n = 2; n < 14; ++n) {
    EXPECT_EQ(turn("alice", "message number " + std::to_string(n), n), conv);
  }
  auto last = compare("alice", "and now");
  EXPECT_GT(last.compaction.overflow, 0u);
  EXPECT_TRUE(last.compaction.summarized);
}

// The hot copy keeps a saved message's JSON columns as written and decodes them when a read asks:
// what JSON text cannot hold (NaN and infinity are written as null) reads back from memory as it
// reads back from the file, turn after turn.
TEST_P(HotContext, JsonTheFileChangesReadsBackAsTheFileHasIt) {
  const std::string conv = started("alice", "hello there");
  ExchangeRecord r;
  r.conversation_id = conv;
  r.messages.push_back(ContextEntry::user("odd numbers"));
  ContextEntry call = ContextEntry::assistant("");
  call.tool_calls.push_back(ToolCall{
      "c1", "lookup", Json{{"nan", std::nan("")}, {"big", 18446744073709551615ull}, {"x", 1e300}}});
  call.provider_state = Json{{"inf", std::numeric_limits<double>::infinity()}};
  r.messages.push_back(std::move(call));
  r.messages.push_back(ContextEntry::tool(ToolResult{"c1", "lookup", "done", true}));
  r.messages.push_back(ContextEntry::assistant("odd"));
  ASSERT_TRUE(hot->save_exchange(MemoryScope::local(), r));
  const auto window = hot->recent_messages(MemoryScope::local(), conv, 50).value();
  ASSERT_EQ(window.size(), 6u);
  EXPECT_TRUE(window[3].tool_calls.at(0).arguments.at("nan").is_null());
  EXPECT_TRUE(window[3].provider_state.at("inf").is_null());
  EXPECT_TRUE(window[4].tool_result.value().is_error);
  compare("alice", "and again");
  turn("alice", "one more", 3);
  compare("alice", "and the last");
}

TEST_P(HotContext, AnotherConnectionWritingBetweenTurnsIsSeen) {
  const std::string conv = started("alice", "hello there");
  auto other = open();
  for (int n = 2; n < 10; ++n) {
    turn("alice", "turn " + std::to_string(n), n);
    save(*other, conv, "from elsewhere " + std::to_string(n),
         n + 100);  // another process, as it were
    auto built = compare("alice", "after elsewhere " + std::to_string(n));
    ASSERT_FALSE(built.context.history.empty());
    EXPECT_EQ(built.context.history.back().content, "answer " + std::to_string(n + 100));
  }
  // A row written behind both stores' backs, by a bare connection.
  ASSERT_EQ(raw_int(file, "UPDATE conversations SET message_count = message_count + 0"), 0);
  compare("alice", "after a bare write");
}

TEST_P(HotContext, AForgottenConversationIsNotServedFromMemory) {
  const std::string conv = started("alice", "hello there");
  for (int n = 2; n < 5; ++n) turn("alice", "turn " + std::to_string(n), n);
  // Forgotten by this store: the next turn opens a new, empty conversation.
  ASSERT_TRUE(hot->delete_conversation(MemoryScope::local(), conv));
  auto after = build(*hot, "alice", "who am I", MemoryScope::local());
  ASSERT_TRUE(after);
  EXPECT_NE(after->conversation_id, conv);
  EXPECT_TRUE(after->context.history.empty());
  EXPECT_EQ(hot->recent_messages(MemoryScope::local(), conv, 50).value().size(), 0u);
  save(*hot, after->conversation_id, "who am I", 1);
  for (int n = 2; n < 5; ++n) turn("alice", "again " + std::to_string(n), n);
  // Forgotten by another connection: this store's next read sees none of it.
  const std::string second = after->conversation_id;
  ASSERT_TRUE(open()->delete_conversation(MemoryScope::local(), second));
  EXPECT_EQ(hot->recent_messages(MemoryScope::local(), second, 50).value().size(), 0u);
  EXPECT_FALSE(hot->message_count(MemoryScope::local(), second));
  compare("alice", "anyone there");
}

TEST_P(HotContext, RecallHitsFromAnEarlierConversationMatch) {
  const std::string first = started("alice", "my aardvark is called Rufus");
  turn("alice", "Rufus eats termites every morning", 2);
  ASSERT_TRUE(hot->close_conversation(MemoryScope::local(), first, std::string("about Rufus")));
  started("alice", "a new day");
  for (int n = 2; n < 6; ++n) turn("alice", "tell me about Rufus " + std::to_string(n), n);
  auto built = compare("alice", "what does Rufus eat");
  EXPECT_NE(built.context.system_prompt.find("termites"), std::string::npos);
}

TEST_P(HotContext, AnotherTenantFindsNothingOfAHotConversation) {
  const std::string conv = started("alice", "my secret is 1234");
  for (int n = 2; n < 5; ++n) turn("alice", "secret part " + std::to_string(n), n);
  const MemoryScope other = MemoryScope::of("other").value();
  // The conversation's id, asked for in another tenant: nothing, warm as the store is.
  EXPECT_EQ(hot->recent_messages(other, conv, 50).value().size(), 0u);
  EXPECT_FALSE(hot->message_count(other, conv));
  EXPECT_EQ(hot->recent_messages(MemoryScope::local(), conv, 50).value().size(), 10u);
  // The same sender in another tenant: a conversation of its own, no history, no recall.
  auto built = compare("alice", "what is my secret", other);
  EXPECT_NE(built.conversation_id, conv);
  EXPECT_TRUE(built.context.history.empty());
  EXPECT_EQ(built.context.system_prompt.find("1234"), std::string::npos);
  EXPECT_EQ(hot->message_count(MemoryScope::local(), conv).value(), 10u);
}

// The kernel finds the store's one-snapshot bracket through the loaded plugin (a dynamic_cast
// across the .so boundary), so every build above ran its reads inside it.
TEST_P(HotContext, TheKernelFindsTheStoresContextReads) {
  EXPECT_NE(dynamic_cast<ContextReadScope*>(hot.get()), nullptr);
}

// Inside the bracket the reads are one snapshot: another connection's commit is not seen until
// the bracket ends (each read would see it otherwise).
TEST_P(HotContext, ContextReadsAreOneSnapshot) {
  const MemoryScope local = MemoryScope::local();
  const std::string conv = started("alice", "hello there");
  auto* reads = begin_reads();
  ASSERT_NE(reads, nullptr);
  EXPECT_EQ(hot->oldest_messages(local, conv, 100).value().size(), 2u);
  save(*open(), conv, "from elsewhere", 2);
  EXPECT_EQ(hot->oldest_messages(local, conv, 100).value().size(), 2u);
  EXPECT_EQ(hot->recent_messages(local, conv, 100).value().size(), 2u);
  reads->end_context_reads();
  EXPECT_EQ(hot->oldest_messages(local, conv, 100).value().size(), 4u);
  EXPECT_EQ(hot->recent_messages(local, conv, 100).value().size(), 4u);
}

// Inside the bracket the store still settles a queued write and saves: the bracket never
// deadlocks on the store's own writer, and a read after a save sees it. Nested brackets end
// with the outermost.
TEST_P(HotContext, WritesInsideContextReadsGoThrough) {
  const MemoryScope local = MemoryScope::local();
  auto* reads = begin_reads();
  ASSERT_NE(reads, nullptr);
  reads->begin_context_reads();
  const std::string conv =
      hot->open_conversation(local, {"cli", "bob", ""}, limits.conversation_idle).value();
  EXPECT_EQ(hot->message_count(local, conv).value(), 0u);
  save(*hot, conv, "inside", 3);
  EXPECT_EQ(hot->recent_messages(local, conv, 50).value().size(), 4u);
  AuditRecord audit;
  audit.tool = "lookup";
  EXPECT_TRUE(hot->record_tool_call(local, audit));
  reads->end_context_reads();
  EXPECT_EQ(hot->oldest_messages(local, conv, 50).value().size(), 4u);
  reads->end_context_reads();
  EXPECT_EQ(open()->message_count(local, conv).value(), 4u);
  EXPECT_EQ(hot->audit_log(local, 10).value().size(), 1u);
}

// Another thread's write and read during the bracket wait for its end, then go through.
TEST_P(HotContext, AnotherThreadsCallsGoThroughOnceTheBracketEnds) {
  const MemoryScope local = MemoryScope::local();
  const std::string conv = started("alice", "hello there");
  auto* reads = begin_reads();
  ASSERT_NE(reads, nullptr);
  EXPECT_EQ(hot->oldest_messages(local, conv, 100).value().size(), 2u);
  auto other = std::async(std::launch::async, [&] {
    save(*hot, conv, "from another thread", 2);
    return hot->oldest_messages(local, conv, 100).value().size();
  });
  EXPECT_EQ(hot->message_count(local, conv).value(), 2u);
  reads->end_context_reads();
  EXPECT_EQ(other.get(), 4u);
  EXPECT_EQ(hot->message_count(local, conv).value(), 4u);
}

// Two threads in brackets of their own, each stepping out for writes (a queued conversation
// settled, an exchange saved) while the other takes the store: neither ever finds the other's
// bracket in its way, and every save is there.
TEST_P(HotContext, TwoThreadsSteppingOutOfTheirBracketsNeverCollide) {
  const MemoryScope local = MemoryScope::local();
  const auto run = [&](const std::string& sender) {
    for (int i = 0; i < 15; ++i) {
      auto* reads = begin_reads();
      if (reads == nullptr) return;
      const std::string conv =
          hot->open_conversation(local, {"cli", sender + std::to_string(i), ""},
                                 limits.conversation_idle)
              .value();
      EXPECT_EQ(hot->message_count(local, conv).value(), 0u);
      save(*hot, conv, "from " + sender, 1);
      EXPECT_EQ(hot->oldest_messages(local, conv, 10).value().size(), 2u);
      reads->end_context_reads();
    }
  };
  auto other = std::async(std::launch::async, run, "bob");
  run("carol");
  other.get();
  ConversationFilter all;
  all.limit = 100;
  EXPECT_EQ(open()->list_conversations(local, all).value().size(), 30u);
}

INSTANTIATE_TEST_SUITE_P(Writes, HotContext, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "direct" : "grouped"; });

}  // namespace
}  // namespace kernex
