// One conformance suite for every MemoryStore that keeps everything (sqlite, postgres): each case
// runs once per store through PluginHost::create_memory, so the stores agree on what the interface
// promises. Store-specific cases (files, options) stay in memory_<store>_test.cpp. Where the stores
// legitimately differ, the case says so and checks each store's behaviour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <thread>

#include "context_builder.hpp"
#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "pg_test_db.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::PgTestDb;
using testing::TempDir;

std::string utc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}
std::string now_plus(long seconds) { return utc(std::time(nullptr) + seconds); }

// The value of a result, by value: `for (x : f().value())` would iterate a destroyed temporary.
template <class T>
T rows(Result<T> r) {
  return std::move(r).value();
}

// The stores under test, and a fresh database for each: a file in the test's directory (sqlite) or
// a database created on KERNEX_TEST_PG_DSN's server and dropped afterwards (postgres).
class Stores {
 public:
  // Options naming a new, empty database of `kind`; nullopt when PostgreSQL is unavailable (the
  // caller skips, or fails when KERNEX_REQUIRE_PG=1: PgTestDb has recorded the failure then).
  std::optional<Json> new_database(const std::string& kind) {
    if (kind == "sqlite")
      return Json{{"path", (dir / ("db" + std::to_string(++files_)) / "memory.db").string()}};
    auto db = std::make_unique<PgTestDb>();
    if (db->dsn().empty()) return std::nullopt;
    Json options{{"dsn", db->dsn()}};
    databases_.push_back(std::move(db));
    return options;
  }
  std::shared_ptr<MemoryStore> open(const std::string& kind, const Json& options) {
    auto store = host.create_memory(kind, options);
    EXPECT_TRUE(store) << kind << ": " << store.error().describe();
    return store ? *store : nullptr;
  }

  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});

 private:
  int files_ = 0;
  std::vector<std::unique_ptr<PgTestDb>> databases_;
};

class MemoryConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto options = stores.new_database(GetParam());
    if (!options) {
      if (HasFailure()) FAIL() << "no PostgreSQL to test the postgres store against";
      GTEST_SKIP() << PgTestDb::skip_reason();
    }
    options_ = *options;
    store = stores.open(GetParam(), options_);
    ASSERT_TRUE(store);
  }
  // Another handle on the same database, as another process would open it.
  std::shared_ptr<MemoryStore> reopen() { return stores.open(GetParam(), options_); }
  bool is(const char* kind) const { return GetParam() == kind; }

  std::string conversation(MemoryStore& s, const std::string& sender = "alice",
                           const std::string& project = "") {
    auto id = s.open_conversation(kernex::MemoryScope::local(), {"cli", sender, project},
                                  std::chrono::minutes(120));
    EXPECT_TRUE(id) << id.error().describe();
    return id.value_or("");
  }
  std::string conversation(const std::string& sender = "alice", const std::string& project = "") {
    return conversation(*store, sender, project);
  }
  static TaskSpec task(std::string description, std::string due, std::string sender = "alice") {
    TaskSpec t;
    t.channel = "cli";
    t.sender_id = std::move(sender);
    t.reply_target = "chat-1";
    t.description = std::move(description);
    t.due_at = std::move(due);
    return t;
  }
  static RecallQuery query(std::string text, std::string sender = "alice", std::size_t limit = 5) {
    return RecallQuery{std::move(text), std::move(sender), limit, "", 0, std::nullopt};
  }

  Stores stores;  // outlives the stores below: a database is dropped only after they close
  Json options_;
  std::shared_ptr<MemoryStore> store;
};

std::string store_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Stores, MemoryConformance, ::testing::Values("sqlite", "postgres"),
                         store_name);

// ---- Opening ----

TEST_P(MemoryConformance, ReopeningKeepsDataAndMigratesOnce) {
  const std::string conv = conversation();
  ASSERT_TRUE(
      store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user("kept")}));
  store.reset();
  auto again = reopen();
  ASSERT_TRUE(again);
  auto recent = again->recent_messages(kernex::MemoryScope::local(), conv, 10);
  ASSERT_TRUE(recent) << recent.error().describe();
  ASSERT_EQ(recent->size(), 1u);
  EXPECT_EQ((*recent)[0].content, "kept");
  // A third handle opened while the second is open migrates nothing twice either.
  auto third = reopen();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->message_count(kernex::MemoryScope::local(), conv).value_or(0), 1u);
}

// ---- Conversations and history ----

TEST_P(MemoryConformance, ConversationReusedUntilIdle) {
  const std::string a = conversation();
  EXPECT_EQ(conversation(), a);
  auto fresh = store->open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                        std::chrono::minutes(0));
  ASSERT_TRUE(fresh);
  EXPECT_NE(*fresh, a);
  // The newest active conversation is the one reused.
  EXPECT_EQ(conversation(), *fresh);
}

TEST_P(MemoryConformance, ConversationsIsolatedByChannelSenderAndProject) {
  const std::string a = conversation("alice", "");
  EXPECT_NE(conversation("alice", "trader"), a);
  EXPECT_NE(conversation("bob", ""), a);
  auto other_channel = store->open_conversation(
      kernex::MemoryScope::local(), {"telegram", "alice", ""}, std::chrono::minutes(120));
  ASSERT_TRUE(other_channel);
  EXPECT_NE(*other_channel, a);
  // Closing one project's conversation leaves the other's.
  const std::string trader = conversation("alice", "trader");
  ASSERT_TRUE(store->close_conversation(kernex::MemoryScope::local(), a, std::nullopt));
  EXPECT_NE(conversation("alice", ""), a);
  EXPECT_EQ(conversation("alice", "trader"), trader);
}

TEST_P(MemoryConformance, MessagesKeepInsertionOrderWithinOneSecond) {
  // kernex ordered by a one-second timestamp: a pair saved within a second came back in any order.
  const std::string conv = conversation();
  std::vector<ContextEntry> all;
  for (int i = 0; i < 60; ++i) {
    std::vector<ContextEntry> exchange{ContextEntry::user("u" + std::to_string(i)),
                                       ContextEntry::assistant("a" + std::to_string(i))};
    ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, exchange));
    all.insert(all.end(), exchange.begin(), exchange.end());
  }
  auto recent = store->recent_messages(kernex::MemoryScope::local(), conv, 10);
  ASSERT_TRUE(recent);
  EXPECT_EQ(*recent, std::vector<ContextEntry>(all.end() - 10, all.end()));
  auto oldest = store->oldest_messages(kernex::MemoryScope::local(), conv, 4);
  ASSERT_TRUE(oldest);
  EXPECT_EQ(*oldest, std::vector<ContextEntry>(all.begin(), all.begin() + 4));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value_or(0), 120u);
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 1000).value(), all);
  EXPECT_TRUE(store->recent_messages(kernex::MemoryScope::local(), conv, 0).value().empty());
  // Interleaved conversations do not mix.
  const std::string other = conversation("bob");
  ASSERT_TRUE(
      store->append_messages(kernex::MemoryScope::local(), other, {ContextEntry::user("bob's")}));
  ASSERT_TRUE(
      store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user("last")}));
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 1).value().at(0).content,
            "last");
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), other, 10).value().size(), 1u);
}

TEST_P(MemoryConformance, ToolTurnsAndProviderStateRoundTrip) {
  // kernex's messages.role CHECK allowed only user/assistant: tool calls and results were lost.
  const std::string conv = conversation();
  ContextEntry call = ContextEntry::assistant("");
  call.tool_calls = {
      ToolCall{"c1", "word_count", Json{{"text", "a b"}}},
      ToolCall{"c2", "calculate",
               Json{{"expression", "1+1"}, {"nested", {{"deep", {1, 2.5, nullptr}}}}}}};
  call.provider_state = Json{{"thinking", "sig"}, {"parts", Json::array({"é", "中"})}};
  std::vector<ContextEntry> exchange{ContextEntry::user("count"), call,
                                     ContextEntry::tool(ToolResult{"c1", "word_count", "2", false}),
                                     ContextEntry::tool(ToolResult{"c2", "calculate", "no", true}),
                                     ContextEntry::assistant("two words")};
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, exchange));
  auto back = store->recent_messages(kernex::MemoryScope::local(), conv, 10);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, exchange);
}

TEST_P(MemoryConformance, HostileContentRoundTripsExactly) {
  const std::string conv = conversation();
  std::vector<ContextEntry> exchange;
  for (std::string text :
       {std::string("'; DROP TABLE messages; --"), std::string("\\x00 \\ \\\\ $1 ?1 %s %"),
        std::string("emoji 😀, a right-to-left mark \xe2\x80\xae, é 中"), std::string(""),
        std::string(100000, 'x'), std::string("line\nbreak\r\n\ttab")}) {
    exchange.push_back(ContextEntry::user(text));
  }
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, exchange));
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 10).value(), exchange);
}

// A NUL byte is valid UTF-8 and valid JSON (\u0000). In message text the stores differ,
// legitimately: SQLite's text holds it and keeps it; PostgreSQL's text cannot, so that store
// refuses the exchange as a whole (a Parse error naming the NUL) rather than cutting the text short
// at it. In tool arguments, stored as JSON text where it is escaped, both keep it.
TEST_P(MemoryConformance, NulBytesAreKeptOrRefusedNeverTruncated) {
  const std::string conv = conversation();
  const std::string nul("before\0after", 12);
  const auto saved = store->append_messages(kernex::MemoryScope::local(), conv,
                                            {ContextEntry::user("ok"), ContextEntry::user(nul)});
  if (is("sqlite")) {
    ASSERT_TRUE(saved) << saved.error().describe();
    EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 1).value().at(0).content,
              nul);
  } else {
    ASSERT_FALSE(saved);
    EXPECT_EQ(saved.error().code, ErrorCode::Parse);
    EXPECT_THAT(saved.error().describe(), HasSubstr("NUL"));
    EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 0u);
  }
  ContextEntry call = ContextEntry::assistant("");
  call.tool_calls = {ToolCall{"c1", "echo", Json{{"text", nul}}}};
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, {call}));
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 1).value().at(0), call);
}

TEST_P(MemoryConformance, AppendToUnknownConversationFailsAndSavesNothing) {
  auto r =
      store->append_messages(kernex::MemoryScope::local(), "no-such-id", {ContextEntry::user("x")});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().describe(), HasSubstr("no conversation no-such-id"));
  EXPECT_FALSE(store->message_count(kernex::MemoryScope::local(), "no-such-id"));
  EXPECT_TRUE(
      store->recent_messages(kernex::MemoryScope::local(), "no-such-id", 10).value().empty());
}

TEST_P(MemoryConformance, AppendIsAllOrNothing) {
  const std::string conv = conversation();
  ASSERT_TRUE(
      store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user("first")}));
  auto bad = store->append_messages(
      kernex::MemoryScope::local(), conv,
      {ContextEntry::user("fine"), ContextEntry::assistant("bad \xff byte")});
  ASSERT_FALSE(bad);
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 1u);
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 10).value().size(), 1u);
  // An empty exchange is a no-op.
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, {}));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 1u);
}

// save_exchange: a turn's messages and its usage row, both or neither.
TEST_P(MemoryConformance, SaveExchangeKeepsMessagesAndUsageTogether) {
  const std::string conv = conversation();
  ToolCall call{"call_1", "lookup", Json{{"key", "answer"}}};
  ContextEntry asks = ContextEntry::assistant("");
  asks.tool_calls = {call};
  ExchangeRecord record{
      conv,
      {ContextEntry::user("What is the answer?"), asks,
       ContextEntry::tool(ToolResult{"call_1", "lookup", "42", false}),
       ContextEntry::assistant("It is 42.")},
      UsageRecord{conv, "alice", "gpt-4o-mini", "openai", Usage{70, 13, 0, 0, 0}}};
  ASSERT_TRUE(store->save_exchange(kernex::MemoryScope::local(), record));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 4u);
  auto history = store->recent_messages(kernex::MemoryScope::local(), conv, 10).value();
  ASSERT_EQ(history.size(), 4u);
  EXPECT_EQ(history[0].content, "What is the answer?");
  ASSERT_EQ(history[1].tool_calls.size(), 1u);
  EXPECT_EQ(history[1].tool_calls[0].arguments, call.arguments);
  ASSERT_TRUE(history[2].tool_result);
  EXPECT_EQ(history[2].tool_result->content, "42");
  EXPECT_EQ(history[3].content, "It is 42.");
  auto usage = store->usage_by_day(kernex::MemoryScope::local()).value();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].requests, 1u);
  EXPECT_EQ(usage[0].usage.input_tokens, 70u);
  // Without a usage row, only the messages.
  ASSERT_TRUE(store->save_exchange(kernex::MemoryScope::local(),
                                   {conv, {ContextEntry::user("again")}, std::nullopt}));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 5u);
  EXPECT_EQ(store->usage_by_day(kernex::MemoryScope::local()).value()[0].requests, 1u);
}

TEST_P(MemoryConformance, SaveExchangeIsAllOrNothing) {
  const std::string conv = conversation();
  const UsageRecord usage{conv, "alice", "m", "p", Usage{1, 1, 0, 0, 0}};
  // A bad message: neither the messages nor the usage row.
  auto bad = store->save_exchange(
      kernex::MemoryScope::local(),
      {conv, {ContextEntry::user("fine"), ContextEntry::assistant("bad \xff byte")}, usage});
  ASSERT_FALSE(bad);
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 0u);
  EXPECT_TRUE(store->recent_messages(kernex::MemoryScope::local(), conv, 10).value().empty());
  EXPECT_TRUE(store->usage_by_day(kernex::MemoryScope::local()).value().empty());
  // An unknown conversation: the same.
  auto unknown = store->save_exchange(kernex::MemoryScope::local(),
                                      {"no-such-id", {ContextEntry::user("x")}, usage});
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().describe(), HasSubstr("no conversation no-such-id"));
  EXPECT_TRUE(store->usage_by_day(kernex::MemoryScope::local()).value().empty());
}

// An idempotency key saves a run's exchange once, however often the host saves it again (a
// crash between saving and recording that it saved); keys are the scope's own and go with their
// conversation.
TEST_P(MemoryConformance, SaveExchangeWithAKeySavesItOnce) {
  const auto local = kernex::MemoryScope::local();
  const auto other = kernex::MemoryScope::of("other").value();
  const std::string conv = conversation();
  const UsageRecord usage{conv, "alice", "m", "p", Usage{3, 2, 0, 0, 0}};
  ExchangeRecord record{
      conv, {ContextEntry::user("once"), ContextEntry::assistant("saved")}, usage};
  record.idempotency_key = "serve-run/run_1";
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->save_exchange(local, record));
  EXPECT_EQ(store->message_count(local, conv).value(), 2u);
  EXPECT_EQ(store->usage_by_day(local).value().at(0).requests, 1u);
  // Another key saves; no key saves every time.
  record.idempotency_key = "serve-run/run_2";
  ASSERT_TRUE(store->save_exchange(local, record));
  record.idempotency_key.clear();
  ASSERT_TRUE(store->save_exchange(local, record));
  EXPECT_EQ(store->message_count(local, conv).value(), 6u);
  // Another tenant's key of the same name is not this one (its own conversation saves).
  const std::string theirs =
      store->open_conversation(other, {"cli", "bob", ""}, std::chrono::minutes(30)).value();
  ExchangeRecord them{theirs, {ContextEntry::user("theirs")}, std::nullopt};
  them.idempotency_key = "serve-run/run_1";
  ASSERT_TRUE(store->save_exchange(other, them));
  EXPECT_EQ(store->message_count(other, theirs).value(), 1u);
  // Deleted with its conversation: a new conversation may use the key again.
  ASSERT_TRUE(store->delete_conversation(local, conv));
  const std::string next = conversation();
  record.conversation_id = next;
  record.idempotency_key = "serve-run/run_1";
  ASSERT_TRUE(store->save_exchange(local, record));
  EXPECT_EQ(store->message_count(local, next).value(), 2u);
}

// A turn is one write: its audit rows ride the exchange's transaction, once per idempotency key,
// in the exchange's tenant, and a row the log can't keep refuses the whole turn.
TEST_P(MemoryConformance, SaveExchangeCarriesItsAuditRows) {
  const auto local = kernex::MemoryScope::local();
  const auto other = kernex::MemoryScope::of("other").value();
  ASSERT_TRUE(store->audits_in_exchange());
  const std::string conv = conversation();
  AuditRecord looked{"", conv, "alice", "main", "lookup", Json{{"key", "a"}}, "42", "ok", ""};
  AuditRecord failed{"", conv, "alice", "main", "bash", Json{{"cmd", "x"}}, "boom", "error", ""};
  ExchangeRecord record{conv, {ContextEntry::user("q"), ContextEntry::assistant("a")}, {}};
  record.idempotency_key = "serve-run/run_a";
  record.audits = {looked, failed};
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(store->save_exchange(local, record));
  auto rows = store->audit_log(local, 10).value();
  ASSERT_EQ(rows.size(), 2u);
  std::set<std::string> tools{rows[0].tool, rows[1].tool};
  EXPECT_EQ(tools, (std::set<std::string>{"lookup", "bash"}));
  for (const auto& row : rows) EXPECT_EQ(row.conversation_id, conv);
  EXPECT_TRUE(store->audit_log(other, 10).value().empty());

  ExchangeRecord bad{conv, {ContextEntry::user("q2")}, {}};
  AuditRecord odd = looked;
  odd.status = "maybe";
  bad.audits = {looked, odd};
  auto refused = store->save_exchange(local, bad);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().describe(), HasSubstr("maybe"));
  EXPECT_EQ(store->message_count(local, conv).value(), 2u);
  EXPECT_EQ(store->audit_log(local, 10).value().size(), 2u);
}

TEST_P(MemoryConformance, CompactionSummaryStoredAndReplaced) {
  const std::string conv = conversation();
  EXPECT_FALSE(store->compaction_summary(kernex::MemoryScope::local(), conv).value());
  ASSERT_TRUE(store->save_compaction_summary(kernex::MemoryScope::local(), conv, {"first", 4}));
  ASSERT_TRUE(store->save_compaction_summary(kernex::MemoryScope::local(), conv, {"second", 6}));
  auto s = store->compaction_summary(kernex::MemoryScope::local(), conv);
  ASSERT_TRUE(s && *s);
  EXPECT_EQ((*s)->text, "second");
  EXPECT_EQ((*s)->covered_messages, 6u);
  EXPECT_FALSE(store->save_compaction_summary(kernex::MemoryScope::local(), conv, {"bad \xc3", 1}));
  EXPECT_EQ(store->compaction_summary(kernex::MemoryScope::local(), conv).value()->text, "second");
}

TEST_P(MemoryConformance, HistoryListsConversationsAndMessages) {
  const std::string conv = conversation();
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user("q"), ContextEntry::assistant("a")}));
  ASSERT_TRUE(
      store->close_conversation(kernex::MemoryScope::local(), conv, std::string("talked about q")));
  auto list = store->list_conversations(kernex::MemoryScope::local(), {});
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, conv);
  EXPECT_EQ((*list)[0].key.channel, "cli");
  EXPECT_EQ((*list)[0].key.sender_id, "alice");
  EXPECT_EQ((*list)[0].status, "closed");
  EXPECT_EQ((*list)[0].summary, "talked about q");
  EXPECT_EQ((*list)[0].message_count, 2u);
  EXPECT_EQ((*list)[0].started_at.size(), 19u);
  EXPECT_GE((*list)[0].last_activity, (*list)[0].started_at);
  auto messages = store->conversation_messages(kernex::MemoryScope::local(), conv, 0, 10);
  ASSERT_TRUE(messages);
  ASSERT_EQ(messages->size(), 2u);
  EXPECT_LT((*messages)[0].seq, (*messages)[1].seq);
  EXPECT_EQ((*messages)[0].conversation_id, conv);
  EXPECT_EQ((*messages)[0].entry.content, "q");
  EXPECT_EQ((*messages)[1].created_at.substr(0, 10), now_plus(0).substr(0, 10));
  auto after =
      store->conversation_messages(kernex::MemoryScope::local(), conv, (*messages)[0].seq, 10);
  ASSERT_EQ(after.value().size(), 1u);
  EXPECT_EQ(store->conversation_messages(kernex::MemoryScope::local(), conv, 0, 1).value().size(),
            1u);
  // The closed conversation's summary is offered to the next one.
  const std::string next = conversation();
  auto summaries =
      store->recent_summaries(kernex::MemoryScope::local(), {"cli", "alice", ""}, next, 3);
  ASSERT_TRUE(summaries);
  ASSERT_EQ(summaries->size(), 1u);
  EXPECT_EQ((*summaries)[0].text, "talked about q");
  EXPECT_EQ((*summaries)[0].conversation_id, conv);
  EXPECT_EQ((*summaries)[0].covered_messages, 2u);
  EXPECT_TRUE(store->recent_summaries(kernex::MemoryScope::local(), {"cli", "alice", ""}, conv, 3)
                  .value()
                  .empty());  // excluded
  EXPECT_TRUE(
      store->recent_summaries(kernex::MemoryScope::local(), {"telegram", "alice", ""}, next, 3)
          .value()
          .empty());
  EXPECT_TRUE(store->recent_summaries(kernex::MemoryScope::local(), {"cli", "bob", ""}, next, 3)
                  .value()
                  .empty());
  EXPECT_FALSE(store->close_conversation(kernex::MemoryScope::local(), "no-such-id", std::nullopt));
}

TEST_P(MemoryConformance, ListConversationsFiltersNewestFirstAndLimits) {
  const std::string a = conversation("alice");
  const std::string b = conversation("bob");
  auto tg = store
                ->open_conversation(kernex::MemoryScope::local(), {"telegram", "alice", ""},
                                    std::chrono::minutes(120))
                .value();
  // Activity decides the order, so touching `a` last puts it first (whatever the clock says).
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), b, {ContextEntry::user("b")}));
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), tg, {ContextEntry::user("t")}));
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), a, {ContextEntry::user("a")}));
  auto all = store->list_conversations(kernex::MemoryScope::local(), {}).value();
  ASSERT_EQ(all.size(), 3u);
  std::set<std::string> ids;
  for (const auto& c : all) ids.insert(c.id);
  EXPECT_EQ(ids, (std::set<std::string>{a, b, tg}));
  for (std::size_t i = 1; i < all.size(); ++i)
    EXPECT_GE(all[i - 1].last_activity, all[i].last_activity);
  ConversationFilter by_sender;
  by_sender.sender_id = "alice";
  auto alices = store->list_conversations(kernex::MemoryScope::local(), by_sender).value();
  ASSERT_EQ(alices.size(), 2u);
  for (const auto& c : alices) EXPECT_EQ(c.key.sender_id, "alice");
  ConversationFilter by_channel;
  by_channel.channel = "telegram";
  auto telegram = store->list_conversations(kernex::MemoryScope::local(), by_channel).value();
  ASSERT_EQ(telegram.size(), 1u);
  EXPECT_EQ(telegram[0].id, tg);
  EXPECT_FALSE(telegram[0].summary);
  EXPECT_EQ(telegram[0].status, "active");
  ConversationFilter one;
  one.limit = 1;
  EXPECT_EQ(store->list_conversations(kernex::MemoryScope::local(), one).value().size(), 1u);
}

TEST_P(MemoryConformance, DeleteConversationForgetsItsMessagesSummaryAndUsage) {
  const std::string gone = conversation();
  const std::string kept = conversation("bob");
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), gone,
                                     {ContextEntry::user("forget the zanzibar plan")}));
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), kept,
                                     {ContextEntry::user("keep the zanzibar plan")}));
  ASSERT_TRUE(
      store->save_compaction_summary(kernex::MemoryScope::local(), gone, {"zanzibar summary", 1}));
  ASSERT_TRUE(store->record_usage(kernex::MemoryScope::local(),
                                  {gone, "alice", "m", "p", Usage{1, 1, 0, 0, 0}}));
  ASSERT_TRUE(store->record_usage(kernex::MemoryScope::local(),
                                  {kept, "bob", "m", "p", Usage{2, 2, 0, 0, 0}}));
  ASSERT_TRUE(store->delete_conversation(kernex::MemoryScope::local(), gone));
  EXPECT_FALSE(store->message_count(kernex::MemoryScope::local(), gone));
  EXPECT_TRUE(
      store->conversation_messages(kernex::MemoryScope::local(), gone, 0, 10).value().empty());
  EXPECT_FALSE(store->compaction_summary(kernex::MemoryScope::local(), gone).value());
  auto hits = store->recall(kernex::MemoryScope::local(), query("zanzibar plan", ""));
  ASSERT_TRUE(hits);
  ASSERT_EQ(hits->size(), 1u);  // neither the message nor the summary is recalled any more
  EXPECT_EQ((*hits)[0].conversation_id, kept);
  auto usage = store->usage_by_day(kernex::MemoryScope::local()).value();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].usage.input_tokens, 2u);
  EXPECT_EQ(store->list_conversations(kernex::MemoryScope::local(), {}).value().size(), 1u);
  EXPECT_FALSE(store->delete_conversation(kernex::MemoryScope::local(), gone));  // already gone
  // The sender starts over with a new conversation.
  EXPECT_NE(conversation(), gone);
}

// ---- Recall ----

// A sender's recall finds only their own messages (and skips the search for a sender with none);
// without a sender it ranks every match.
// A sender with a summarised conversation and no messages: recall still finds the summary, except
// from inside that very conversation.
TEST_P(MemoryConformance, RecallFindsSummariesOfASenderWithoutMessages) {
  const std::string old_conv = conversation("carol");
  ASSERT_TRUE(store->close_conversation(kernex::MemoryScope::local(), old_conv,
                                        std::string("Sent the ACME invoice twice")));
  const std::string now_conv = conversation("carol");
  ASSERT_NE(now_conv, old_conv);
  RecallQuery q = query("ACME invoice", "carol");
  q.current_conversation = now_conv;
  auto hits = store->recall(kernex::MemoryScope::local(), q);
  ASSERT_TRUE(hits) << hits.error().describe();
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].source, "summary");
  EXPECT_EQ((*hits)[0].conversation_id, old_conv);
  q.current_conversation = old_conv;
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(), q).value().empty());
  EXPECT_TRUE(
      store->recall(kernex::MemoryScope::local(), query("ACME invoice", "dave")).value().empty());
}

TEST_P(MemoryConformance, RecallIsScopedToTheSenderEitherWay) {
  const std::string alice = conversation();
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), alice,
                                     {ContextEntry::user("the deploy failed on friday"),
                                      ContextEntry::assistant("the deploy failed, sorry")}));
  const std::string bob = conversation("bob");
  ASSERT_TRUE(store->append_messages(
      kernex::MemoryScope::local(), bob,
      {ContextEntry::user("my deploy failed twice"), ContextEntry::user("nothing to do with it")}));
  auto mine = store->recall(kernex::MemoryScope::local(), query("deploy failed"));
  ASSERT_TRUE(mine) << mine.error().describe();
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].text, "the deploy failed on friday");
  EXPECT_EQ((*mine)[0].source, "message");
  EXPECT_EQ((*mine)[0].conversation_id, alice);
  EXPECT_GT((*mine)[0].seq, 0);
  EXPECT_EQ((*mine)[0].created_at.size(), 19u);
  auto everyone = store->recall(kernex::MemoryScope::local(), query("deploy failed", ""));
  ASSERT_TRUE(everyone);
  EXPECT_EQ(everyone->size(), 2u);
  EXPECT_TRUE(
      store->recall(kernex::MemoryScope::local(), query("deploy failed", "carol")).value().empty());
  // Any word fills up after every word, for a sender too.
  auto any = store->recall(kernex::MemoryScope::local(), query("friday deploy weekend"));
  ASSERT_TRUE(any);
  EXPECT_EQ(any->size(), 1u);
}

// Hits with every word of the query rank before hits with only some; the limit is kept.
TEST_P(MemoryConformance, RecallRanksEveryWordFirstAndKeepsTheLimit) {
  const std::string conv = conversation();
  ASSERT_TRUE(store->append_messages(
      kernex::MemoryScope::local(), conv,
      {ContextEntry::user("friday lunch was good"),
       ContextEntry::user("the deploy broke on friday"), ContextEntry::user("another friday note"),
       ContextEntry::user("deploy notes for monday")}));
  auto hits = store->recall(kernex::MemoryScope::local(), query("deploy friday", "alice", 10));
  ASSERT_TRUE(hits) << hits.error().describe();
  ASSERT_EQ(hits->size(), 4u);
  EXPECT_EQ((*hits)[0].text, "the deploy broke on friday");
  auto two =
      store->recall(kernex::MemoryScope::local(), query("deploy friday", "alice", 2)).value();
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].text, "the deploy broke on friday");
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(), query("deploy friday", "alice", 0))
                  .value()
                  .empty());
  // Case does not matter.
  EXPECT_EQ(store->recall(kernex::MemoryScope::local(), query("DEPLOY BROKE")).value().at(0).text,
            "the deploy broke on friday");
}

TEST_P(MemoryConformance, RecallTakesHostileQueryTextLiterally) {
  const std::string conv = conversation();
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user("the build is NOT working again"),
                                      ContextEntry::user("say \"hello world\" to them"),
                                      ContextEntry::user("an error (crash) happened"),
                                      ContextEntry::user("costs 100% of the budget_line")}));
  const std::string other = conversation("alice", "p");
  // FTS5 operators, tsquery operators, LIKE wildcards, SQL and regex metacharacters.
  for (const char* q : {"NOT working",
                        "error (crash)",
                        "work*",
                        "say \"hello world\"",
                        "AND OR",
                        "NEAR(",
                        "\"",
                        "col:umn",
                        "^start",
                        "a - b",
                        "crash & !error | (x",
                        "work:*",
                        "a <-> b",
                        "'; DROP TABLE x; --",
                        "%",
                        "%%%",
                        "___",
                        "\\",
                        "\\\\'",
                        "$1 ?1 :name",
                        "[a-z]+ .* (?i)",
                        "!!!",
                        "   ",
                        "\t\n",
                        "()",
                        "''",
                        "😀 emoji",
                        "NULL",
                        "select * from messages"}) {
    auto hits =
        store->recall(kernex::MemoryScope::local(), {q, "alice", 5, other, 0, std::nullopt});
    EXPECT_TRUE(hits) << q << ": " << hits.error().describe();
  }
  const std::string long_query(20000, 'z');
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(),
                            {long_query, "alice", 5, other, 0, std::nullopt}));
  std::string many_words;
  for (int i = 0; i < 2000; ++i) many_words += "word" + std::to_string(i) + " ";
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(),
                            {many_words, "alice", 5, other, 0, std::nullopt}));
  auto hits = store->recall(kernex::MemoryScope::local(),
                            {"NOT working", "alice", 5, other, 0, std::nullopt});
  ASSERT_EQ(hits.value().size(), 1u);
  EXPECT_EQ((*hits)[0].source, "message");
  EXPECT_EQ((*hits)[0].conversation_id, conv);
  EXPECT_EQ((*hits)[0].text, "the build is NOT working again");
  EXPECT_EQ(store
                ->recall(kernex::MemoryScope::local(),
                         {"error (crash)", "alice", 5, other, 0, std::nullopt})
                .value()
                .size(),
            1u);
  EXPECT_EQ(store
                ->recall(kernex::MemoryScope::local(),
                         {"hello world", "alice", 5, other, 0, std::nullopt})
                .value()
                .size(),
            1u);
  // Wildcards are not wildcards: "%" and "_" match nothing, "buil*" is not a prefix search.
  EXPECT_TRUE(
      store->recall(kernex::MemoryScope::local(), {"buil*", "alice", 5, other, 0, std::nullopt})
          .value()
          .empty());
  EXPECT_TRUE(
      store->recall(kernex::MemoryScope::local(), {"%%%", "alice", 5, other, 0, std::nullopt})
          .value()
          .empty());
  EXPECT_TRUE(
      store->recall(kernex::MemoryScope::local(), {"___", "alice", 5, other, 0, std::nullopt})
          .value()
          .empty());
  EXPECT_TRUE(store
                  ->recall(kernex::MemoryScope::local(),
                           {"'; DROP TABLE x; --", "alice", 5, other, 0, std::nullopt})
                  .value()
                  .empty());
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 4u);
  // Invalid UTF-8 in a query is an error, not a crash or a match.
  EXPECT_FALSE(store->recall(kernex::MemoryScope::local(),
                             {"bad \xff\xfe query", "alice", 5, other, 0, std::nullopt}));
}

TEST_P(MemoryConformance, RecallRules) {
  const std::string old_conv = conversation();
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), old_conv,
                                     {ContextEntry::user("my cat is called Miso"),
                                      ContextEntry::assistant("Miso the cat, noted")}));
  ASSERT_TRUE(store->close_conversation(kernex::MemoryScope::local(), old_conv,
                                        std::string("The user's cat Miso likes tuna")));
  const std::string conv = conversation();
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user("tell me about Miso today")}));
  RecallQuery q{"Miso", "alice", 5, conv, 1, std::nullopt};
  auto hits = store->recall(kernex::MemoryScope::local(), q);
  ASSERT_TRUE(hits);
  // The user message and the summary; never the assistant's text; not the message in the window.
  ASSERT_EQ(hits->size(), 2u);
  std::set<std::string> sources{(*hits)[0].source, (*hits)[1].source};
  EXPECT_EQ(sources, (std::set<std::string>{"message", "summary"}));
  for (const auto& h : *hits) {
    EXPECT_NE(h.text, "tell me about Miso today");
    if (h.source == "summary") {
      EXPECT_EQ(h.seq, 0);
      EXPECT_EQ(h.conversation_id, old_conv);
    }
  }
  // Outside the window, the current conversation's own older messages are recalled too.
  q.skip_newest = 0;
  EXPECT_EQ(store->recall(kernex::MemoryScope::local(), q).value().size(), 3u);
  // Another sender sees nothing; a short query does not search.
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(), query("Miso", "bob")).value().empty());
  EXPECT_TRUE(store->recall(kernex::MemoryScope::local(), query("Mi")).value().empty());
  // since: an hour ahead finds nothing, an hour back finds the hits; ISO times are accepted.
  EXPECT_TRUE(
      store->recall(kernex::MemoryScope::local(), {"Miso", "alice", 5, "", 0, now_plus(3600)})
          .value()
          .empty());
  EXPECT_EQ(
      store->recall(kernex::MemoryScope::local(), {"Miso", "alice", 5, "", 0, now_plus(-3600)})
          .value()
          .size(),
      3u);
  std::string iso = now_plus(-3600);
  iso[10] = 'T';
  EXPECT_EQ(store->recall(kernex::MemoryScope::local(), {"Miso", "alice", 5, "", 0, iso + "Z"})
                .value()
                .size(),
            3u);
  auto bad_since = store->recall(kernex::MemoryScope::local(),
                                 {"Miso", "alice", 5, "", 0, std::string("yesterday")});
  ASSERT_FALSE(bad_since);
  EXPECT_THAT(bad_since.error().describe(), HasSubstr("recall since"));
}

// ---- Facts ----

TEST_P(MemoryConformance, FactsUpsertSoftDeleteAndComeBack) {
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "name", "Alice"));
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "name", "Ali"));
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "city", "Lyon"));
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "bob", "name", "Bob"));
  EXPECT_EQ(store->fact(kernex::MemoryScope::local(), "alice", "name").value(), "Ali");
  EXPECT_FALSE(store->fact(kernex::MemoryScope::local(), "alice", "nothing").value());
  EXPECT_EQ(store->facts(kernex::MemoryScope::local(), "alice").value(),
            (std::vector<std::pair<std::string, std::string>>{{"city", "Lyon"}, {"name", "Ali"}}));
  EXPECT_TRUE(store->soft_delete_fact(kernex::MemoryScope::local(), "alice", "name").value());
  EXPECT_FALSE(store->soft_delete_fact(kernex::MemoryScope::local(), "alice", "name")
                   .value());  // idempotent
  EXPECT_FALSE(store->fact(kernex::MemoryScope::local(), "alice", "name").value());
  EXPECT_EQ(store->fact(kernex::MemoryScope::local(), "bob", "name").value(),
            "Bob");  // another sender's fact is untouched
  EXPECT_EQ(store->facts(kernex::MemoryScope::local(), "alice").value().size(), 1u);
  auto all = store->fact_records(kernex::MemoryScope::local(), "alice", true).value();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].key, "name");
  EXPECT_TRUE(all[1].deleted_at);
  EXPECT_EQ(all[1].updated_at.size(), 19u);
  // Every sender's facts, by sender then key.
  auto everyone = store->fact_records(kernex::MemoryScope::local(), std::nullopt, false).value();
  ASSERT_EQ(everyone.size(), 2u);
  EXPECT_EQ(everyone[0].sender_id, "alice");
  EXPECT_EQ(everyone[1].sender_id, "bob");
  // Re-storing un-deletes with the new value.
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "name", "Alicia"));
  EXPECT_EQ(store->fact(kernex::MemoryScope::local(), "alice", "name").value(), "Alicia");
  const auto restored = store->fact_records(kernex::MemoryScope::local(), "alice", true).value();
  for (const auto& f : restored) EXPECT_FALSE(f.deleted_at) << f.key;
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "job", "pilot"));
  EXPECT_EQ(
      store->soft_delete_facts(kernex::MemoryScope::local(), "alice", std::string("job")).value(),
      1u);
  EXPECT_EQ(store->soft_delete_facts(kernex::MemoryScope::local(), "alice", std::nullopt).value(),
            2u);
  EXPECT_EQ(store->fact_records(kernex::MemoryScope::local(), "alice", true).value().size(), 3u);
  EXPECT_TRUE(store->fact_records(kernex::MemoryScope::local(), "alice", false).value().empty());
  EXPECT_FALSE(store->store_fact(kernex::MemoryScope::local(), "alice", "", "x"));
  EXPECT_FALSE(store->store_fact(kernex::MemoryScope::local(), "alice", "k", "bad \xff"));
  // Keys and values are data, whatever they hold.
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "'; DROP TABLE facts; --",
                                "%_\\ 中"));
  EXPECT_EQ(store->fact(kernex::MemoryScope::local(), "alice", "'; DROP TABLE facts; --").value(),
            "%_\\ 中");
  EXPECT_FALSE(store->fact(kernex::MemoryScope::local(), "alice", "%").value());
}

// ---- Tasks ----

TEST_P(MemoryConformance, TaskCreatedWithNormalisedDueTime) {
  auto id =
      store->create_task(kernex::MemoryScope::local(), task("Call John", "2026-12-31T15:00:00"));
  ASSERT_TRUE(id) << id.error().describe();
  auto tasks = store->pending_tasks(kernex::MemoryScope::local(), "alice").value();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].id, *id);
  EXPECT_EQ(tasks[0].spec.due_at, "2026-12-31 15:00:00");
  EXPECT_FALSE(tasks[0].spec.repeat);
  EXPECT_EQ(tasks[0].spec.task_type, "reminder");
  EXPECT_EQ(tasks[0].spec.channel, "cli");
  EXPECT_EQ(tasks[0].spec.reply_target, "chat-1");
  EXPECT_EQ(tasks[0].spec.max_retries, 3u);
  EXPECT_EQ(tasks[0].status, "pending");
  EXPECT_EQ(tasks[0].retry_count, 0u);
  EXPECT_FALSE(tasks[0].claimed_by);
  EXPECT_FALSE(tasks[0].lease_until);
  EXPECT_EQ(tasks[0].created_at.size(), 19u);
  auto bad = store->create_task(kernex::MemoryScope::local(), task("Call John", "tomorrow"));
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().describe(), HasSubstr("task due_at"));
  EXPECT_FALSE(
      store->create_task(kernex::MemoryScope::local(), task("Call John", "2026-13-01 00:00:00")));
  // A day the month lacks is no time; a leap day is one.
  for (const char* no_such_day : {"2026-02-29 09:00:00", "2026-02-30 09:00:00",
                                  "2026-04-31 09:00:00", "2100-02-29 09:00:00"}) {
    auto refused =
        store->create_task(kernex::MemoryScope::local(), task("Pay the rent", no_such_day));
    ASSERT_FALSE(refused) << no_such_day;
    EXPECT_EQ(refused.error().code, ErrorCode::Parse) << no_such_day;
  }
  EXPECT_TRUE(store->create_task(kernex::MemoryScope::local(),
                                 task("Leap day party", "2028-02-29 20:00:00")));
  EXPECT_FALSE(store->create_task(kernex::MemoryScope::local(), task("", "2026-01-01 00:00:00")));
  TaskSpec weird = task("x y z", "2026-01-01 00:00:00");
  weird.repeat = "fortnightly";
  EXPECT_FALSE(store->create_task(kernex::MemoryScope::local(), weird));
  // "once" is no repeat; ISO with minutes only and fractional seconds are normalised.
  TaskSpec once = task("Water the ficus", "2027-01-01T08:30Z");
  once.repeat = "once";
  once.task_type = "action";
  once.project = "home";
  auto once_id = store->create_task(kernex::MemoryScope::local(), once).value();
  auto stored = store->task(kernex::MemoryScope::local(), once_id).value();
  ASSERT_TRUE(stored);
  EXPECT_FALSE(stored->spec.repeat);
  EXPECT_EQ(stored->spec.due_at, "2027-01-01 08:30:00");
  EXPECT_EQ(stored->spec.task_type, "action");
  EXPECT_EQ(stored->spec.project, "home");
  EXPECT_EQ(store
                ->task(kernex::MemoryScope::local(),
                       store
                           ->create_task(kernex::MemoryScope::local(),
                                         task("Feed the cat now", "2027-02-01T10:00:00.123Z"))
                           .value())
                .value()
                ->spec.due_at,
            "2027-02-01 10:00:00");
  EXPECT_FALSE(store->task(kernex::MemoryScope::local(), "no-such-task").value());
}

TEST_P(MemoryConformance, PendingTasksSoonestFirstPerSender) {
  auto late = store
                  ->create_task(kernex::MemoryScope::local(),
                                task("Late thing to do", "2026-12-31 15:00:00"))
                  .value();
  auto early = store
                   ->create_task(kernex::MemoryScope::local(),
                                 task("Early other errand", "2026-06-01 09:00:00"))
                   .value();
  ASSERT_TRUE(store->create_task(kernex::MemoryScope::local(),
                                 task("Bob's own chore", "2026-01-01 09:00:00", "bob")));
  auto tasks = store->pending_tasks(kernex::MemoryScope::local(), "alice").value();
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].id, early);
  EXPECT_EQ(tasks[1].id, late);
  EXPECT_TRUE(store->pending_tasks(kernex::MemoryScope::local(), "carol").value().empty());
}

TEST_P(MemoryConformance, TaskExactAndFuzzyDedup) {
  auto a = store->create_task(kernex::MemoryScope::local(),
                              task("Close all positions", "2026-03-01 10:00:00"));
  EXPECT_EQ(store
                ->create_task(kernex::MemoryScope::local(),
                              task("Close all positions", "2026-03-01 10:00:00"))
                .value(),
            a.value());
  auto e = store->create_task(kernex::MemoryScope::local(),
                              task("Send daily email to Adriana", "2026-02-22 07:00:00"));
  EXPECT_EQ(store
                ->create_task(kernex::MemoryScope::local(),
                              task("Send daily email to Adriana", "2026-02-22T07:00:00Z"))
                .value(),
            e.value());
  EXPECT_EQ(
      store
          ->create_task(kernex::MemoryScope::local(),
                        task("Send daily love email to Adriana via gmail", "2026-02-22 07:05:00"))
          .value(),
      e.value());
  EXPECT_NE(store
                ->create_task(kernex::MemoryScope::local(),
                              task("Send daily email to Adriana", "2026-02-22 07:00:00", "bob"))
                .value(),
            e.value());
  auto h =
      store->create_task(kernex::MemoryScope::local(),
                         task("Cancel Hostinger plan — expires March 17", "2026-03-16 09:00:00"));
  EXPECT_EQ(store
                ->create_task(kernex::MemoryScope::local(),
                              task("Cancel Hostinger VPS — last reminder, expires TOMORROW",
                                   "2026-03-16 09:10:00"))
                .value(),
            h.value());
  auto m = store->create_task(kernex::MemoryScope::local(),
                              task("Send good morning message to the team", "2026-04-01 08:00:00"));
  EXPECT_NE(store
                ->create_task(kernex::MemoryScope::local(),
                              task("Cancel Hostinger plan and subscription", "2026-04-01 08:00:00"))
                .value(),
            m.value());
  EXPECT_NE(
      store->create_task(kernex::MemoryScope::local(), task("Reminder task", "2026-05-01 08:00:00"))
          .value(),
      store->create_task(kernex::MemoryScope::local(), task("Action task", "2026-05-01 08:00:00"))
          .value());
  // More than 30 minutes apart is another task.
  EXPECT_NE(store
                ->create_task(kernex::MemoryScope::local(),
                              task("Close all positions", "2026-03-01 10:31:00"))
                .value(),
            a.value());
}

TEST_P(MemoryConformance, ClaimTakesOnlyDueTasks) {
  auto past =
      store->create_task(kernex::MemoryScope::local(), task("past thing", "2020-01-01 00:00:00"));
  ASSERT_TRUE(store->create_task(kernex::MemoryScope::local(),
                                 task("future thing", "2099-01-01 00:00:00")));
  auto claimed =
      store->claim_due_tasks(kernex::MemoryScope::local(), "w1", std::chrono::seconds(600), 10);
  ASSERT_TRUE(claimed);
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_EQ((*claimed)[0].id, past.value());
  EXPECT_EQ((*claimed)[0].status, "claimed");
  EXPECT_EQ((*claimed)[0].claimed_by, "w1");
  ASSERT_TRUE((*claimed)[0].lease_until);
  EXPECT_GT(*(*claimed)[0].lease_until, now_plus(500));
  EXPECT_LE(*(*claimed)[0].lease_until, now_plus(700));
  EXPECT_TRUE(
      store->claim_due_tasks(kernex::MemoryScope::local(), "w2", std::chrono::seconds(600), 10)
          .value()
          .empty());
  // A claimed task is not pending.
  EXPECT_EQ(store->pending_tasks(kernex::MemoryScope::local(), "alice").value().size(), 1u);
  // One-shot completion: delivered, no longer pending or due.
  EXPECT_FALSE(store->complete_task(kernex::MemoryScope::local(), past.value(), "w2")
                   .value());  // not w2's claim
  EXPECT_TRUE(store->complete_task(kernex::MemoryScope::local(), past.value(), "w1").value());
  auto done = store->task(kernex::MemoryScope::local(), past.value()).value();
  EXPECT_EQ(done->status, "delivered");
  EXPECT_FALSE(done->claimed_by);
  EXPECT_EQ(store->pending_tasks(kernex::MemoryScope::local(), "alice").value().size(), 1u);
  EXPECT_FALSE(store->complete_task(kernex::MemoryScope::local(), past.value(), "w1")
                   .value());  // delivered once
  EXPECT_FALSE(store->complete_task(kernex::MemoryScope::local(), "no-such-task", "w1"));
  EXPECT_FALSE(store->claim_due_tasks(kernex::MemoryScope::local(), "", std::chrono::seconds(600),
                                      10));  // a claim names its worker
}

TEST_P(MemoryConformance, ClaimHonoursTheLimitOldestDueFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(store
                      ->create_task(kernex::MemoryScope::local(),
                                    task("job number " + std::to_string(i) + " alpha beta gamma",
                                         "202" + std::to_string(4 - i) + "-01-01 00:00:00"))
                      .value());
  }
  auto first =
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 2)
          .value();
  ASSERT_EQ(first.size(), 2u);
  std::set<std::string> got{first[0].id, first[1].id};
  EXPECT_EQ(got, (std::set<std::string>{ids[4], ids[3]}));  // due 2020 and 2021
  EXPECT_EQ(store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 10)
                .value()
                .size(),
            3u);
  EXPECT_TRUE(
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 10)
          .value()
          .empty());
}

TEST_P(MemoryConformance, TwoHandlesOnOneDatabaseClaimOnce) {
  ASSERT_TRUE(
      store->create_task(kernex::MemoryScope::local(), task("due now", "2020-01-01 00:00:00")));
  auto second = reopen();
  ASSERT_TRUE(second);
  auto a = store->claim_due_tasks(kernex::MemoryScope::local(), "a", std::chrono::seconds(600), 10)
               .value();
  auto b = second->claim_due_tasks(kernex::MemoryScope::local(), "b", std::chrono::seconds(600), 10)
               .value();
  EXPECT_EQ(a.size() + b.size(), 1u);
  EXPECT_TRUE(
      store->claim_due_tasks(kernex::MemoryScope::local(), "a", std::chrono::seconds(600), 10)
          .value()
          .empty());
  EXPECT_TRUE(
      second->claim_due_tasks(kernex::MemoryScope::local(), "b", std::chrono::seconds(600), 10)
          .value()
          .empty());
}

// Claimers racing on separate handles (separate connections, as separate processes) share the
// due tasks out: every task is claimed exactly once.
TEST_P(MemoryConformance, ConcurrentClaimersEachTaskOnce) {
  constexpr int kTasks = 40, kWorkers = 4;
  std::set<std::string> created;
  for (int i = 0; i < kTasks; ++i) {
    created.insert(store
                       ->create_task(kernex::MemoryScope::local(),
                                     task("task " + std::to_string(i), now_plus(-60 - i),
                                          "s" + std::to_string(i)))
                       .value());
  }
  std::vector<std::shared_ptr<MemoryStore>> handles;
  for (int w = 0; w < kWorkers; ++w) handles.push_back(reopen());
  std::vector<std::vector<std::string>> claimed(kWorkers);
  std::vector<std::string> errors(kWorkers);
  {
    std::vector<std::jthread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&, w] {
        for (;;) {
          auto got = handles[static_cast<std::size_t>(w)]->claim_due_tasks(
              kernex::MemoryScope::local(), "w" + std::to_string(w), std::chrono::seconds(600), 3);
          if (!got) {
            errors[static_cast<std::size_t>(w)] = got.error().describe();
            return;
          }
          if (got->empty()) return;
          for (const auto& t : *got) claimed[static_cast<std::size_t>(w)].push_back(t.id);
        }
      });
    }
  }
  std::multiset<std::string> all;
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(errors[static_cast<std::size_t>(w)], "") << "worker " << w;
    all.insert(claimed[static_cast<std::size_t>(w)].begin(),
               claimed[static_cast<std::size_t>(w)].end());
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kTasks));
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()), created);
}

TEST_P(MemoryConformance, ExpiredLeaseIsReclaimedAndOldHolderLosesIt) {
  auto id = store->create_task(kernex::MemoryScope::local(), task("due now", "2020-01-01 00:00:00"))
                .value();
  ASSERT_EQ(store
                ->claim_due_tasks(kernex::MemoryScope::local(), "dead-worker",
                                  std::chrono::seconds(0), 10)
                .value()
                .size(),
            1u);
  auto again =
      store->claim_due_tasks(kernex::MemoryScope::local(), "w2", std::chrono::seconds(600), 10)
          .value();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].claimed_by, "w2");
  EXPECT_FALSE(store->complete_task(kernex::MemoryScope::local(), id, "dead-worker").value());
  EXPECT_FALSE(store->fail_task(kernex::MemoryScope::local(), id, "dead-worker",
                                "late"));  // the lost claim cannot fail it either
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), id).value()->retry_count, 0u);
  EXPECT_TRUE(store->complete_task(kernex::MemoryScope::local(), id, "w2").value());
}

TEST_P(MemoryConformance, OverdueRecurringTaskFiresOncePerCatchUp) {
  // kernex advanced a recurring task from its old due time: a daily task overdue since 2020
  // became due again at once, once per missed day. It now moves to its next time after now.
  TaskSpec spec = task("water the plants", "2020-01-01T09:00:00");
  spec.repeat = "daily";
  auto id = store->create_task(kernex::MemoryScope::local(), spec).value();
  ASSERT_EQ(store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 10)
                .value()
                .size(),
            1u);
  ASSERT_TRUE(store->complete_task(kernex::MemoryScope::local(), id, "w").value());
  auto t = store->task(kernex::MemoryScope::local(), id).value();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, "pending");
  EXPECT_FALSE(t->claimed_by);
  EXPECT_FALSE(t->lease_until);
  EXPECT_GT(t->spec.due_at, now_plus(0));
  EXPECT_LE(t->spec.due_at, now_plus(86400));
  EXPECT_EQ(t->spec.due_at.substr(11), "09:00:00");
  EXPECT_TRUE(
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 10)
          .value()
          .empty());
}

TEST_P(MemoryConformance, RecurrenceSteps) {
  const auto make = [&](const char* repeat, const char* due) {
    auto t = task(std::string(repeat) + " " + std::string(repeat) + "-chore " +
                      std::string(repeat) + "-errand",
                  due);
    t.repeat = repeat;
    return store->create_task(kernex::MemoryScope::local(), t).value();
  };
  // Completing early (no claim, empty worker) moves one step.
  const auto friday = make("weekdays", "2099-01-02 08:00:00");  // a Friday
  const auto daily = make("daily", "2099-12-31 23:30:00");
  const auto weekly = make("weekly", "2099-01-02 08:00:00");
  const auto monthly = make("monthly", "2099-01-31 08:00:00");
  const auto mid_month = make("monthly", "2099-01-15 08:00:00");
  for (const auto& id : {friday, daily, weekly, monthly, mid_month})
    ASSERT_TRUE(store->complete_task(kernex::MemoryScope::local(), id, "").value());
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), friday).value()->spec.due_at,
            "2099-01-05 08:00:00");  // Monday
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), daily).value()->spec.due_at,
            "2100-01-01 23:30:00");
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), weekly).value()->spec.due_at,
            "2099-01-09 08:00:00");
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), mid_month).value()->spec.due_at,
            "2099-02-15 08:00:00");
  // Past a month's end the day overflows into the next month (Jan 31 + 1 month = "Feb 31" = Mar 3),
  // as SQLite's date arithmetic does; PostgreSQL's interval arithmetic would clamp to Feb 28, so a
  // store on it computes the step itself and the stores agree.
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), monthly).value()->spec.due_at,
            "2099-03-03 08:00:00");
}

// A task's retry time, which the interface does not report: read from the store's export.
std::optional<std::string> retry_at(MemoryStore& s, const std::string& id) {
  auto doc = s.export_json(kernex::MemoryScope::local());
  EXPECT_TRUE(doc) << doc.error().describe();
  if (!doc) return std::nullopt;
  for (const auto& row : (*doc)["scheduled_tasks"]) {
    if (row["id"] != id) continue;
    if (!row.contains("retry_at")) return std::nullopt;
    return row["retry_at"].get<std::string>();
  }
  ADD_FAILURE() << "no task " << id << " in the export";
  return std::nullopt;
}

TEST_P(MemoryConformance, FailedTaskRetriesWithBackoffThenFails) {
  auto id =
      store->create_task(kernex::MemoryScope::local(), task("flaky job", "2020-01-01 00:00:00"))
          .value();
  ASSERT_EQ(store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 1)
                .value()
                .size(),
            1u);
  EXPECT_FALSE(retry_at(*store, id));  // exported only when set
  EXPECT_TRUE(store->fail_task(kernex::MemoryScope::local(), id, "w", "boom 1").value());
  auto t = store->task(kernex::MemoryScope::local(), id).value();
  EXPECT_EQ(t->retry_count, 1u);
  EXPECT_EQ(t->last_error, "boom 1");
  EXPECT_EQ(t->status, "pending");
  EXPECT_FALSE(t->claimed_by);
  EXPECT_EQ(t->spec.due_at,
            "2020-01-01 00:00:00");  // the scheduled occurrence; the retry has its own time
  const auto first = retry_at(*store, id);
  ASSERT_TRUE(first);
  EXPECT_GT(*first, now_plus(60));  // backed off, not due at once
  EXPECT_LE(*first, now_plus(180));
  EXPECT_TRUE(
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 1)
          .value()
          .empty());
  EXPECT_TRUE(store->fail_task(kernex::MemoryScope::local(), id, "", "boom 2").value());
  EXPECT_GT(retry_at(*store, id).value_or(""), now_plus(180));  // the backoff grows
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), id).value()->spec.due_at,
            "2020-01-01 00:00:00");
  EXPECT_FALSE(store->fail_task(kernex::MemoryScope::local(), id, "", "boom 3").value());
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), id).value()->status, "failed");
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), id).value()->last_error, "boom 3");
  EXPECT_FALSE(retry_at(*store, id));  // no retry pending
  EXPECT_FALSE(store->fail_task(kernex::MemoryScope::local(), "missing", "", "x"));
  EXPECT_FALSE(store->fail_task(kernex::MemoryScope::local(), id, "",
                                "after failing"));  // a failed task is nobody's to fail
  // max_retries 1 fails at once; 0 counts as 1.
  for (std::uint32_t max : {1u, 0u}) {
    TaskSpec once = task("fragile job " + std::to_string(max), "2020-01-01 00:00:00");
    once.max_retries = max;
    auto fragile = store->create_task(kernex::MemoryScope::local(), once).value();
    EXPECT_FALSE(store->fail_task(kernex::MemoryScope::local(), fragile, "", "boom").value());
    EXPECT_EQ(store->task(kernex::MemoryScope::local(), fragile).value()->status, "failed");
  }
}

TEST_P(MemoryConformance, RecurringTaskSucceedingAfterFailureStartsAfresh) {
  TaskSpec spec = task("nightly report", "2020-01-01 02:00:00");
  spec.repeat = "daily";
  auto id = store->create_task(kernex::MemoryScope::local(), spec).value();
  EXPECT_TRUE(store->fail_task(kernex::MemoryScope::local(), id, "", "boom").value());
  ASSERT_TRUE(store->complete_task(kernex::MemoryScope::local(), id, "").value());
  auto t = store->task(kernex::MemoryScope::local(), id).value();
  EXPECT_EQ(t->status, "pending");
  EXPECT_EQ(t->retry_count, 0u);
  EXPECT_FALSE(t->last_error);
  EXPECT_GT(t->spec.due_at, now_plus(0));
  EXPECT_LE(t->spec.due_at, now_plus(86400));
  // The next occurrence counts from the scheduled one, not from the retry's time: a daily 02:00
  // task that failed once used to fire at its retry's time of day from then on.
  EXPECT_EQ(t->spec.due_at.substr(11), "02:00:00");
  EXPECT_FALSE(retry_at(*store, id));
}

// The same through claims, with retry times in the past (set by an import: no waiting for a
// backoff). A pending task is due at its retry time when it has one, else at its occurrence.
TEST_P(MemoryConformance, RetriesAreClaimedAtTheirRetryTimeAndKeepTheSchedule) {
  const auto row = [](const char* id, const char* description, const char* due,
                      std::optional<const char*> retry) {
    Json r{{"id", id},
           {"channel", "cli"},
           {"sender_id", "alice"},
           {"reply_target", "chat"},
           {"description", description},
           {"due_at", due},
           {"repeat", "daily"},
           {"task_type", "reminder"},
           {"project", ""},
           {"status", "pending"},
           {"retry_count", 1},
           {"max_retries", 3},
           {"last_error", "boom"},
           {"claimed_by", nullptr},
           {"lease_until", nullptr},
           {"created_at", "2019-12-31 00:00:00"},
           {"delivered_at", nullptr}};
    if (retry) r["retry_at"] = *retry;
    return r;
  };
  Json doc{{"format", "kernex-memory"}, {"version", 1}};
  doc["scheduled_tasks"] = Json::array({
      row("fresh", "a first attempt", "2020-01-01 05:00:00", std::nullopt),
      row("retry-late", "an occurrence retried later", "2020-01-01 01:00:00",
          "2020-01-01 06:00:00"),
      row("retry-early", "an occurrence retried before it was due", "2099-01-01 04:00:00",
          "2020-01-01 03:00:00"),
      row("retry-pending", "a retry still backing off", "2020-01-01 00:30:00",
          "2099-01-01 00:00:00"),
  });
  ASSERT_TRUE(store->import_json(kernex::MemoryScope::local(), doc))
      << "a document with retry_at imports";
  EXPECT_EQ(retry_at(*store, "retry-late"), "2020-01-01 06:00:00");
  EXPECT_FALSE(retry_at(*store, "fresh"));
  // Due by retry time: 03:00 and 05:00 come first; the task whose retry is in 2099 is not due,
  // however old its occurrence.
  auto first =
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 2)
          .value();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ((std::set<std::string>{first[0].id, first[1].id}),
            (std::set<std::string>{"retry-early", "fresh"}));
  auto rest =
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 10)
          .value();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].id, "retry-late");
  EXPECT_EQ(rest[0].spec.due_at,
            "2020-01-01 01:00:00");  // the claim reports the scheduled occurrence
  // Success after the retry: the next occurrence keeps 01:00, the retry is forgotten.
  ASSERT_TRUE(store->complete_task(kernex::MemoryScope::local(), "retry-late", "w").value());
  auto done = store->task(kernex::MemoryScope::local(), "retry-late").value();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->spec.due_at.substr(11), "01:00:00");
  EXPECT_GT(done->spec.due_at, now_plus(0));
  EXPECT_EQ(done->retry_count, 0u);
  EXPECT_FALSE(retry_at(*store, "retry-late"));
  // pending_tasks reports scheduled occurrences, soonest first.
  auto pending = store->pending_tasks(kernex::MemoryScope::local(), "alice").value();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].id, "retry-pending");
  EXPECT_EQ(pending[0].spec.due_at, "2020-01-01 00:30:00");
}

TEST_P(MemoryConformance, CancelByPrefixForItsSenderOnly) {
  auto id =
      store->create_task(kernex::MemoryScope::local(), task("Call John", "2026-12-31 15:00:00"))
          .value();
  const std::string prefix = id.substr(0, 8);
  EXPECT_FALSE(store->cancel_task(kernex::MemoryScope::local(), prefix, "bob").value());
  EXPECT_EQ(store->pending_tasks(kernex::MemoryScope::local(), "alice").value().size(), 1u);
  EXPECT_TRUE(store->cancel_task(kernex::MemoryScope::local(), prefix, "alice").value());
  EXPECT_TRUE(store->pending_tasks(kernex::MemoryScope::local(), "alice").value().empty());
  EXPECT_EQ(store->task(kernex::MemoryScope::local(), id).value()->status, "cancelled");
  EXPECT_TRUE(store->cancel_task(kernex::MemoryScope::local(), prefix, "alice")
                  .value());  // again: still cancelled
  EXPECT_FALSE(store->cancel_task(kernex::MemoryScope::local(), "", "alice"));
  // A cancelled task is never claimed.
  auto due = store
                 ->create_task(kernex::MemoryScope::local(),
                               task("Due but cancelled", "2020-01-01 00:00:00"))
                 .value();
  ASSERT_TRUE(store->cancel_task(kernex::MemoryScope::local(), due, "alice").value());
  EXPECT_TRUE(
      store->claim_due_tasks(kernex::MemoryScope::local(), "w", std::chrono::seconds(600), 10)
          .value()
          .empty());
}

TEST_P(MemoryConformance, CancelWithAnAmbiguousPrefixCancelsNothing) {
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) {
    const std::string due = "2026-0" + std::to_string(1 + i % 9) + "-1" + std::to_string(i % 10) +
                            " 0" + std::to_string(i % 10) + ":00:00";
    ids.push_back(store
                      ->create_task(kernex::MemoryScope::local(),
                                    task("errand number " + std::to_string(i), due))
                      .value());
  }
  // 40 ids over 16 first hex digits: some digit starts two of them.
  std::map<char, int> firsts;
  for (const auto& id : ids) ++firsts[id[0]];
  auto shared =
      std::find_if(firsts.begin(), firsts.end(), [](const auto& kv) { return kv.second > 1; });
  ASSERT_NE(shared, firsts.end());
  auto r = store->cancel_task(kernex::MemoryScope::local(), std::string(1, shared->first), "alice");
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().describe(), HasSubstr("give more of the id"));
  EXPECT_EQ(store->pending_tasks(kernex::MemoryScope::local(), "alice").value().size(), ids.size());
}

TEST_P(MemoryConformance, IdPrefixesAreLiteral) {
  // kernex matched prefixes with LIKE: "%" cancelled whatever task came first.
  ASSERT_TRUE(
      store->create_task(kernex::MemoryScope::local(), task("Call John", "2026-12-31 15:00:00")));
  for (const char* hostile : {"%", "_", "%%", "'", "\\", ".*", "' OR '1'='1"}) {
    auto r = store->cancel_task(kernex::MemoryScope::local(), hostile, "alice");
    ASSERT_TRUE(r) << hostile << ": " << r.error().describe();
    EXPECT_FALSE(*r) << hostile;
    EXPECT_TRUE(store->task_runs(kernex::MemoryScope::local(), hostile, 10).value().empty())
        << hostile;
  }
  EXPECT_EQ(store->pending_tasks(kernex::MemoryScope::local(), "alice").value().size(), 1u);
}

TEST_P(MemoryConformance, TaskRunHistory) {
  TaskRun first{"",          "0123456789abcdef", "2026-01-01 10:00:00", "",
                "completed", "first result",     std::nullopt,          1234};
  TaskRun second{"",       "0123456789abcdef", "2026-01-01T11:00:00Z", "2026-01-01 11:00:05",
                 "failed", std::nullopt,       "provider exploded",    std::nullopt};
  auto first_id = store->record_task_run(kernex::MemoryScope::local(), first);
  ASSERT_TRUE(first_id) << first_id.error().describe();
  EXPECT_FALSE(first_id->empty());
  ASSERT_TRUE(store->record_task_run(kernex::MemoryScope::local(), second));
  auto runs = store->task_runs(kernex::MemoryScope::local(), "01234567", 10).value();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].status, "failed");
  EXPECT_EQ(runs[0].error, "provider exploded");
  EXPECT_EQ(runs[0].started_at, "2026-01-01 11:00:00");
  EXPECT_EQ(runs[0].finished_at, "2026-01-01 11:00:05");
  EXPECT_FALSE(runs[0].tokens);
  EXPECT_FALSE(runs[0].result);
  EXPECT_EQ(runs[1].id, *first_id);
  EXPECT_EQ(runs[1].task_id, "0123456789abcdef");
  EXPECT_EQ(runs[1].result, "first result");
  EXPECT_EQ(runs[1].tokens, 1234u);
  EXPECT_EQ(runs[1].finished_at.substr(0, 10), now_plus(0).substr(0, 10));  // set by the store
  EXPECT_EQ(store->task_runs(kernex::MemoryScope::local(), "01234567", 1).value().size(), 1u);
  EXPECT_TRUE(store->task_runs(kernex::MemoryScope::local(), "ffff", 10).value().empty());
  TaskRun bogus = first;
  bogus.status = "bogus";
  EXPECT_FALSE(store->record_task_run(kernex::MemoryScope::local(), bogus));
  TaskRun bad_time = first;
  bad_time.started_at = "noon";
  EXPECT_FALSE(store->record_task_run(kernex::MemoryScope::local(), bad_time));
}

// ---- Learning ----

TEST_P(MemoryConformance, LessonsDedupCapAndReinforce) {
  ASSERT_TRUE(store->store_lesson(kernex::MemoryScope::local(),
                                  {"alice", "trading", "Never risk more than 2%", "", 1, ""}));
  ASSERT_TRUE(store->store_lesson(kernex::MemoryScope::local(),
                                  {"alice", "trading", "Never risk more than 2%", "", 1, ""}));
  auto one = store->lessons(kernex::MemoryScope::local(), "alice", std::nullopt).value();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].occurrences, 2u);
  EXPECT_EQ(one[0].updated_at.size(), 19u);
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(
        store->store_lesson(kernex::MemoryScope::local(),
                            {"alice", "style", "Rule number " + std::to_string(i), "", 1, ""}));
  }
  // Reinforcing the oldest surviving rule moves it to the front; the cap then drops others.
  ASSERT_TRUE(store->store_lesson(kernex::MemoryScope::local(),
                                  {"alice", "style", "Rule number 2", "", 1, ""}));
  ASSERT_TRUE(store->store_lesson(kernex::MemoryScope::local(),
                                  {"alice", "style", "Rule number 12", "", 1, ""}));
  std::vector<std::string> rules;
  const auto listed = store->lessons(kernex::MemoryScope::local(), "alice", std::nullopt).value();
  for (const auto& l : listed) {
    if (l.domain == "style") rules.push_back(l.rule);
  }
  ASSERT_EQ(rules.size(), 10u);
  EXPECT_EQ(rules[0], "Rule number 12");
  EXPECT_EQ(rules[1], "Rule number 2");
  for (const char* gone : {"Rule number 0", "Rule number 1", "Rule number 3"}) {
    EXPECT_EQ(std::find(rules.begin(), rules.end(), gone), rules.end()) << gone;
  }
  // The cap is per domain: trading's rule survived style's twelve.
  EXPECT_EQ(listed.size(), 11u);
  // Per project: the cap and dedup do not cross projects or senders; the project's rules come
  // first.
  ASSERT_TRUE(store->store_lesson(kernex::MemoryScope::local(),
                                  {"alice", "style", "Rule number 2", "my-trader", 1, ""}));
  ASSERT_TRUE(store->store_lesson(kernex::MemoryScope::local(),
                                  {"bob", "style", "Rule number 2", "", 1, ""}));
  auto layered =
      store->lessons(kernex::MemoryScope::local(), "alice", std::string("my-trader")).value();
  ASSERT_FALSE(layered.empty());
  EXPECT_EQ(layered[0].project, "my-trader");
  EXPECT_EQ(layered[0].occurrences, 1u);
  EXPECT_EQ(layered.size(), 12u);
  // Without a project only general rules are listed.
  for (const auto& l : rows(store->lessons(kernex::MemoryScope::local(), "alice", std::nullopt)))
    EXPECT_EQ(l.project, "");
  EXPECT_EQ(store->lessons(kernex::MemoryScope::local(), "bob", std::nullopt).value().size(), 1u);
  EXPECT_FALSE(
      store->store_lesson(kernex::MemoryScope::local(), {"alice", "", "no domain", "", 1, ""}));
  EXPECT_FALSE(store->store_lesson(kernex::MemoryScope::local(), {"alice", "d", "", "", 1, ""}));
}

TEST_P(MemoryConformance, OutcomesByProjectAndPrunedPerSender) {
  ASSERT_TRUE(
      store->store_outcome(kernex::MemoryScope::local(),
                           {"alice", "trading", 1, "good entry", "conversation", "my-trader", ""}));
  ASSERT_TRUE(
      store->store_outcome(kernex::MemoryScope::local(),
                           {"alice", "communication", -1, "too long", "conversation", "", ""}));
  EXPECT_EQ(store->recent_outcomes(kernex::MemoryScope::local(), "alice", 15, std::nullopt)
                .value()
                .size(),
            2u);
  auto trader =
      store->recent_outcomes(kernex::MemoryScope::local(), "alice", 15, std::string("my-trader"))
          .value();
  ASSERT_EQ(trader.size(), 1u);
  EXPECT_EQ(trader[0].domain, "trading");
  EXPECT_EQ(trader[0].score, 1);
  EXPECT_EQ(trader[0].source, "conversation");
  EXPECT_EQ(trader[0].timestamp.substr(0, 10), now_plus(0).substr(0, 10));
  auto general =
      store->recent_outcomes(kernex::MemoryScope::local(), "alice", 15, std::string("")).value();
  ASSERT_EQ(general.size(), 1u);
  EXPECT_EQ(general[0].domain, "communication");
  EXPECT_EQ(general[0].score, -1);
  EXPECT_FALSE(store->store_outcome(kernex::MemoryScope::local(),
                                    {"alice", "x", 2, "bad score", "conversation", "", ""}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store->store_outcome(kernex::MemoryScope::local(),
                                     {"alice", "d", 0, "o" + std::to_string(i), "c", "", ""}));
  }
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(store->store_outcome(kernex::MemoryScope::local(),
                                     {"bob", "d", 0, "b" + std::to_string(i), "c", "", ""}));
  EXPECT_EQ(
      store->recent_outcomes(kernex::MemoryScope::local(), "alice", 2, std::nullopt).value().size(),
      2u);
  // Keeps the newest 3 of each sender: alice loses 2, bob keeps both.
  EXPECT_EQ(store->prune_outcomes(kernex::MemoryScope::local(), 3).value(), 2u);
  auto kept =
      store->recent_outcomes(kernex::MemoryScope::local(), "alice", 15, std::nullopt).value();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].lesson, "o2");
  EXPECT_EQ(kept[2].lesson, "o0");
  EXPECT_EQ(
      store->recent_outcomes(kernex::MemoryScope::local(), "bob", 15, std::nullopt).value().size(),
      2u);
  EXPECT_EQ(store->prune_outcomes(kernex::MemoryScope::local(), 3).value(), 0u);
  EXPECT_EQ(store->prune_outcomes(kernex::MemoryScope::local(), 0).value(), 5u);
  EXPECT_TRUE(store->recent_outcomes(kernex::MemoryScope::local(), "alice", 15, std::nullopt)
                  .value()
                  .empty());
}

// ---- Usage and audit ----

TEST_P(MemoryConformance, UsageSummedByDayModelAndProvider) {
  const std::string conv = conversation();
  EXPECT_TRUE(store->usage_by_day(kernex::MemoryScope::local()).value().empty());
  ASSERT_TRUE(store->record_usage(
      kernex::MemoryScope::local(),
      {conv, "alice", "claude-sonnet-4-6", "anthropic", Usage{100, 50, 1000, 200, 0.01}}));
  ASSERT_TRUE(store->record_usage(
      kernex::MemoryScope::local(),
      {conv, "alice", "claude-sonnet-4-6", "anthropic", Usage{250, 100, 300, 0, 0.02}}));
  ASSERT_TRUE(store->record_usage(kernex::MemoryScope::local(),
                                  {conv, "alice", "llama3.2", "ollama", Usage{10, 5, 0, 0, 0}}));
  ASSERT_TRUE(
      store->record_usage(kernex::MemoryScope::local(),
                          {conv, "bob", "claude-sonnet-4-6", "bedrock", Usage{1, 1, 0, 0, 0.5}}));
  auto rows = store->usage_by_day(kernex::MemoryScope::local()).value();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].model, "claude-sonnet-4-6");
  EXPECT_EQ(rows[0].provider, "anthropic");
  EXPECT_EQ(rows[0].requests, 2u);
  EXPECT_EQ(rows[0].usage.input_tokens, 350u);
  EXPECT_EQ(rows[0].usage.output_tokens, 150u);
  EXPECT_EQ(rows[0].usage.cache_read_tokens, 1300u);
  EXPECT_EQ(rows[0].usage.cache_write_tokens, 200u);
  EXPECT_DOUBLE_EQ(rows[0].usage.cost_usd, 0.03);
  EXPECT_EQ(rows[0].day, now_plus(0).substr(0, 10));
  EXPECT_EQ(rows[1].provider, "bedrock");  // by day, model, then provider
  EXPECT_EQ(rows[2].model, "llama3.2");
  EXPECT_EQ(rows[2].usage.cost_usd, 0.0);
  // Large counts are not truncated to 32 bits.
  ASSERT_TRUE(
      store->record_usage(kernex::MemoryScope::local(),
                          {conv, "alice", "big", "p", Usage{5'000'000'000ULL, 0, 0, 0, 0}}));
  auto big = store->usage_by_day(kernex::MemoryScope::local()).value();
  auto it =
      std::find_if(big.begin(), big.end(), [](const UsageTotals& t) { return t.model == "big"; });
  ASSERT_NE(it, big.end());
  EXPECT_EQ(it->usage.input_tokens, 5'000'000'000ULL);
}

TEST_P(MemoryConformance, AuditLogNewestFirst) {
  AuditRecord rec;
  rec.conversation_id = "c";
  rec.sender_id = "alice";
  rec.agent = "main";
  rec.tool = "word_count";
  rec.arguments = Json{{"text", "a b"}, {"nested", {1, 2}}};
  rec.result = "2";
  ASSERT_TRUE(store->record_tool_call(kernex::MemoryScope::local(), rec));
  AuditRecord denied = rec;
  denied.tool = "shell";
  denied.status = "denied";
  denied.reason = "not allowed";
  denied.timestamp = "2026-01-01 00:00:00";
  ASSERT_TRUE(store->record_tool_call(kernex::MemoryScope::local(), denied));
  rec.status = "maybe";
  EXPECT_FALSE(store->record_tool_call(kernex::MemoryScope::local(), rec));
  auto log = store->audit_log(kernex::MemoryScope::local(), 10).value();
  ASSERT_EQ(log.size(), 2u);
  // Newest first by recording order, whatever the timestamps say.
  EXPECT_EQ(log[0].tool, "shell");
  EXPECT_EQ(log[0].status, "denied");
  EXPECT_EQ(log[0].reason, "not allowed");
  EXPECT_EQ(log[0].timestamp, "2026-01-01 00:00:00");
  EXPECT_EQ(log[1].tool, "word_count");
  EXPECT_EQ(log[1].arguments, (Json{{"text", "a b"}, {"nested", {1, 2}}}));
  EXPECT_EQ(log[1].status, "ok");
  EXPECT_EQ(log[1].agent, "main");
  EXPECT_EQ(log[1].conversation_id, "c");
  EXPECT_EQ(log[1].sender_id, "alice");
  EXPECT_EQ(log[1].result, "2");
  EXPECT_EQ(log[1].timestamp.substr(0, 10), now_plus(0).substr(0, 10));
  EXPECT_EQ(store->audit_log(kernex::MemoryScope::local(), 1).value().size(), 1u);
}

// ---- Backup ----

// Fills a store with one of everything an export carries.
std::string fill(MemoryStore& s, const std::string& conv) {
  ContextEntry call = ContextEntry::assistant("");
  call.tool_calls = {ToolCall{"c1", "calculate", Json{{"expression", "1+1"}}}};
  call.provider_state = Json{{"signature", "abc"}};
  EXPECT_TRUE(s.append_messages(kernex::MemoryScope::local(), conv,
                                {ContextEntry::user("add é 中"), call,
                                 ContextEntry::tool(ToolResult{"c1", "calculate", "2", false}),
                                 ContextEntry::assistant("2")}));
  EXPECT_TRUE(s.save_compaction_summary(kernex::MemoryScope::local(), conv, {"sum", 2}));
  EXPECT_TRUE(s.store_fact(kernex::MemoryScope::local(), "alice", "name", "Alice"));
  EXPECT_TRUE(s.store_fact(kernex::MemoryScope::local(), "alice", "gone", "x"));
  EXPECT_TRUE(s.soft_delete_fact(kernex::MemoryScope::local(), "alice", "gone"));
  EXPECT_TRUE(s.store_lesson(kernex::MemoryScope::local(), {"alice", "d", "r", "", 1, ""}));
  EXPECT_TRUE(s.store_lesson(kernex::MemoryScope::local(), {"alice", "d", "r", "", 1, ""}));
  EXPECT_TRUE(s.store_outcome(kernex::MemoryScope::local(),
                              {"alice", "d", 1, "l", "conversation", "", ""}));
  EXPECT_TRUE(s.record_usage(kernex::MemoryScope::local(),
                             {conv, "alice", "m", "p", Usage{1, 2, 3, 4, 0.5}}));
  EXPECT_TRUE(s.record_tool_call(
      kernex::MemoryScope::local(),
      {"", conv, "alice", "", "calculate", Json{{"expression", "1+1"}}, "2", "ok", ""}));
  TaskSpec t;
  t.channel = "cli";
  t.sender_id = "alice";
  t.reply_target = "chat-1";
  t.description = "Call John about the export";
  t.due_at = "2026-12-31 15:00:00";
  t.repeat = "weekly";
  auto id = s.create_task(kernex::MemoryScope::local(), t).value_or("");
  EXPECT_TRUE(
      s.record_task_run(kernex::MemoryScope::local(),
                        {"", id, "2026-01-01 00:00:00", "", "completed", "done", std::nullopt, 7}));
  return id;
}

// What a store holds, read through the interface (not the export), to compare two stores.
Json observe(MemoryStore& s, const std::string& conv, const std::string& task_id) {
  Json out;
  out["messages"] = Json::array();
  for (const auto& m : rows(s.conversation_messages(kernex::MemoryScope::local(), conv, 0, 100))) {
    out["messages"].push_back({m.seq, m.entry, m.created_at});
  }
  auto summary = s.compaction_summary(kernex::MemoryScope::local(), conv).value();
  out["summary"] = summary ? Json{summary->text, summary->covered_messages} : Json();
  for (const auto& c : rows(s.list_conversations(kernex::MemoryScope::local(), {}))) {
    out["conversations"].push_back({c.id, c.key.channel, c.key.sender_id, c.status, c.started_at,
                                    c.last_activity, c.message_count, c.summary.value_or("")});
  }
  for (const auto& f : rows(s.fact_records(kernex::MemoryScope::local(), std::nullopt, true))) {
    out["facts"].push_back({f.sender_id, f.key, f.value, f.updated_at, f.deleted_at.value_or("")});
  }
  for (const auto& l : rows(s.lessons(kernex::MemoryScope::local(), "alice", std::nullopt))) {
    out["lessons"].push_back({l.domain, l.rule, l.occurrences, l.updated_at});
  }
  for (const auto& o :
       rows(s.recent_outcomes(kernex::MemoryScope::local(), "alice", 10, std::nullopt))) {
    out["outcomes"].push_back({o.domain, o.score, o.lesson, o.timestamp});
  }
  for (const auto& u : rows(s.usage_by_day(kernex::MemoryScope::local()))) {
    out["usage"].push_back(
        {u.day, u.model, u.provider, u.requests, u.usage.input_tokens, u.usage.cost_usd});
  }
  for (const auto& a : rows(s.audit_log(kernex::MemoryScope::local(), 10)))
    out["audit"].push_back({a.timestamp, a.tool, a.arguments, a.status});
  auto t = s.task(kernex::MemoryScope::local(), task_id).value();
  if (t)
    out["task"] = {t->spec.description, t->spec.due_at, t->spec.repeat.value_or(""), t->status,
                   t->created_at};
  for (const auto& r : rows(s.task_runs(kernex::MemoryScope::local(), task_id, 10))) {
    out["runs"].push_back(
        {r.id, r.started_at, r.finished_at, r.status, r.result.value_or(""), r.tokens.value_or(0)});
  }
  return out;
}

TEST_P(MemoryConformance, ExportImportRoundTrips) {
  const std::string conv = conversation();
  const std::string id = fill(*store, conv);
  auto exported = store->export_json(kernex::MemoryScope::local());
  ASSERT_TRUE(exported) << exported.error().describe();
  EXPECT_EQ((*exported)["format"], "kernex-memory");
  EXPECT_EQ((*exported)["messages"].size(), 4u);

  auto fresh = stores.open(GetParam(), stores.new_database(GetParam()).value());
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(fresh->import_json(kernex::MemoryScope::local(), *exported));
  EXPECT_EQ(fresh->export_json(kernex::MemoryScope::local()).value(), *exported);
  EXPECT_EQ(observe(*fresh, conv, id), observe(*store, conv, id));
  // Recall works on imported data (the indexes are rebuilt by the import).
  EXPECT_EQ(fresh->recall(kernex::MemoryScope::local(), query("add é")).value().size(), 1u);
  EXPECT_EQ(fresh->recall(kernex::MemoryScope::local(), query("sum", "")).value().size(), 1u);
  // A second import collides on ids and imports nothing.
  auto again = fresh->import_json(kernex::MemoryScope::local(), *exported);
  ASSERT_FALSE(again);
  EXPECT_EQ(fresh->export_json(kernex::MemoryScope::local()).value(), *exported);
  auto junk = fresh->import_json(kernex::MemoryScope::local(), Json{{"format", "something"}});
  ASSERT_FALSE(junk);
  EXPECT_THAT(junk.error().describe(), HasSubstr("not a kernex memory export"));
  auto future = fresh->import_json(kernex::MemoryScope::local(),
                                   Json{{"format", "kernex-memory"}, {"version", 99}});
  ASSERT_FALSE(future);
  Json bad_column = *exported;
  bad_column["facts"][0]["colour"] = "red";
  auto empty = stores.open(GetParam(), stores.new_database(GetParam()).value());
  ASSERT_TRUE(empty);
  auto rejected = empty->import_json(kernex::MemoryScope::local(), bad_column);
  ASSERT_FALSE(rejected);
  EXPECT_THAT(rejected.error().describe(), HasSubstr("unknown column 'colour'"));
  EXPECT_TRUE(empty->list_conversations(kernex::MemoryScope::local(), {})
                  .value()
                  .empty());  // nothing half-imported
  Json structured = *exported;
  structured["facts"][0]["value"] = Json::array({1});
  EXPECT_FALSE(empty->import_json(kernex::MemoryScope::local(), structured));
  EXPECT_TRUE(empty->list_conversations(kernex::MemoryScope::local(), {}).value().empty());
  // New rows after an import do not collide with imported ids.
  ASSERT_TRUE(fresh->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user("after the import")}));
  ASSERT_TRUE(fresh->store_outcome(kernex::MemoryScope::local(),
                                   {"alice", "d", 0, "after", "conversation", "", ""}));
  ASSERT_TRUE(fresh->record_tool_call(kernex::MemoryScope::local(),
                                      {"", conv, "alice", "", "t", Json::object(), "", "ok", ""}));
  ASSERT_TRUE(
      fresh->store_lesson(kernex::MemoryScope::local(), {"alice", "d", "new rule", "", 1, ""}));
  ASSERT_TRUE(fresh->record_usage(kernex::MemoryScope::local(),
                                  {conv, "alice", "m", "p", Usage{1, 0, 0, 0, 0}}));
  EXPECT_EQ(fresh->message_count(kernex::MemoryScope::local(), conv).value(), 5u);
}

// An export of one store loads into the other, and both then hold the same data: moving from
// SQLite to PostgreSQL (and back) is an export and an import.
TEST_P(MemoryConformance, ExportLoadsIntoTheOtherStore) {
  const std::string other_kind = is("sqlite") ? "postgres" : "sqlite";
  auto other_options = stores.new_database(other_kind);
  if (!other_options) {
    if (HasFailure()) FAIL() << "no PostgreSQL to test the postgres store against";
    GTEST_SKIP() << PgTestDb::skip_reason();
  }
  const std::string conv = conversation();
  const std::string id = fill(*store, conv);
  auto exported = store->export_json(kernex::MemoryScope::local());
  ASSERT_TRUE(exported) << exported.error().describe();
  auto other = stores.open(other_kind, *other_options);
  ASSERT_TRUE(other);
  auto imported = other->import_json(kernex::MemoryScope::local(), *exported);
  ASSERT_TRUE(imported) << imported.error().describe();
  EXPECT_EQ(observe(*other, conv, id), observe(*store, conv, id));
  EXPECT_EQ(other->export_json(kernex::MemoryScope::local()).value(), *exported);
  EXPECT_EQ(other->recall(kernex::MemoryScope::local(), query("add é")).value().size(), 1u);
  // The moved store carries on: the conversation, its task and new rows.
  EXPECT_EQ(conversation(*other), conv);
  ASSERT_TRUE(other->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user("after the move")}));
  EXPECT_EQ(other->message_count(kernex::MemoryScope::local(), conv).value(), 5u);
  EXPECT_TRUE(other->complete_task(kernex::MemoryScope::local(), id, "").value());
}

// ---- Context assembly ----

TEST_P(MemoryConformance, ContextSectionsFromMemory) {
  const std::string old_conv = conversation();
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), old_conv,
                                     {ContextEntry::user("I keep forgetting the invoice for ACME"),
                                      ContextEntry::assistant("noted")}));
  ASSERT_TRUE(store->close_conversation(kernex::MemoryScope::local(), old_conv,
                                        std::string("Discussed the ACME invoice")));
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "occupation", "pilot"));
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "name", "Alice"));
  ASSERT_TRUE(store->store_fact(kernex::MemoryScope::local(), "alice", "welcomed", "true"));
  ASSERT_TRUE(store->create_task(kernex::MemoryScope::local(),
                                 task("Send the ACME invoice", "2099-01-01 09:00:00")));
  ASSERT_TRUE(
      store->store_lesson(kernex::MemoryScope::local(), {"alice", "style", "Be brief", "", 1, ""}));
  ASSERT_TRUE(store->store_outcome(
      kernex::MemoryScope::local(),
      {"alice", "billing", 1, "invoice sent on time", "conversation", "", ""}));

  Limits limits;
  ContextInputs in;
  in.store = store.get();
  in.key = {"cli", "alice", ""};
  in.system_prompt = "BASE";
  in.limits = &limits;
  auto built = build_context(in, Request::from_text("alice", "what about the invoice for ACME"));
  ASSERT_TRUE(built) << built.error().describe();
  const std::string& p = built->context.system_prompt;
  EXPECT_EQ(p.rfind("BASE\n\nUser profile:\n- name: Alice\n- occupation: pilot\n\n", 0), 0u) << p;
  EXPECT_THAT(p, Not(HasSubstr("welcomed")));
  EXPECT_THAT(p, HasSubstr("Recent conversation history:\n- ["));
  EXPECT_THAT(p, HasSubstr("] Discussed the ACME invoice"));
  EXPECT_THAT(p, HasSubstr("Related past context:\n- ["));
  EXPECT_THAT(p, HasSubstr("] User: I keep forgetting the invoice for ACME"));
  EXPECT_THAT(p, HasSubstr("User's scheduled tasks:\n- ["));
  EXPECT_THAT(p, HasSubstr("] Send the ACME invoice (due: 2099-01-01 09:00:00, once)"));
  EXPECT_THAT(p, HasSubstr("Learned behavioral rules:\n- [style] Be brief"));
  EXPECT_THAT(p, HasSubstr("Recent outcomes:\n- [+] billing: invoice sent on time (0m ago)"));

  in.needs = ContextNeeds{false, false, false, false, false};
  auto bare = build_context(in, Request::from_text("alice", "what about the invoice for ACME"));
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->context.system_prompt, "BASE");
}

// ---- Through the kernel ----

class MemoryConformanceKernel : public MemoryConformance {
 protected:
  // The kernel opens the store by plugin name; it adds data_dir to the options (sqlite uses it).
  PluginRef memory_ref() const {
    if (is("sqlite")) return PluginRef{"sqlite", Json::object()};
    return PluginRef{GetParam(), options_};
  }
  std::shared_ptr<MemoryStore> kernel_store() {
    if (is("sqlite"))
      return stores.open("sqlite", Json{{"path", (stores.dir / "kdata" / "memory.db").string()}});
    return reopen();
  }
  std::unique_ptr<Kernel> kernel(const std::vector<std::string>& lines, Limits limits = {}) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.system_prompt = "BASE PROMPT";
    config.data_dir = stores.dir / "kdata";
    config.provider.name = "replay";
    config.provider.config = {{"script", stores.dir.write("script.jsonl", script).string()},
                              {"record", (stores.dir / "record.jsonl").string()}};
    config.memory = memory_ref();
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    config.limits = limits;
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    return k ? std::move(*k) : nullptr;
  }
  Json request(std::size_t i) {
    return Json::parse(testing::read_lines(stores.dir / "record.jsonl").at(i));
  }
  static std::string text(const std::string& t) { return Json{{"text", t}}.dump(); }
};

INSTANTIATE_TEST_SUITE_P(Stores, MemoryConformanceKernel, ::testing::Values("sqlite", "postgres"),
                         store_name);

TEST_P(MemoryConformanceKernel, SecondKernelSeesTheFirstOnesHistory) {
  // kernex wrote exchanges under project "default" and read under "": no history, ever. A second
  // kernel (a new process) on the same store sees the first one's exchange.
  {
    auto k = kernel({text("first answer")});
    ASSERT_TRUE(k);
    ASSERT_TRUE(k->run(Request::from_text("u1", "hello")));
  }
  auto k = kernel({text("second answer")});
  ASSERT_TRUE(k);
  ASSERT_TRUE(k->run(Request::from_text("u1", "again")));
  const Json messages = request(1)["messages"];
  ASSERT_EQ(messages.size(), 3u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "hello");
  EXPECT_EQ(messages[1]["content"], "first answer");
  EXPECT_EQ(messages[2]["content"], "again");
}

// The run's scope reaches every memory call the kernel makes: the same sender in another tenant
// gets none of the first tenant's history, recall, facts or tasks in its request, and its exchange,
// audit and usage are saved in its own tenant.
TEST_P(MemoryConformanceKernel, RunsOfTwoTenantsShareNoMemory) {
  auto k = kernel({text("noted"), text("no idea"), text("you said 4111")});
  ASSERT_TRUE(k);
  RunOptions alpha;
  alpha.memory_scope = MemoryScope::of("alpha").value();
  ASSERT_TRUE(k->run(Request::from_text("support", "my card number is 4111 quokka"), alpha));
  auto s = kernel_store();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->store_fact(alpha.memory_scope, "support", "card", "4111"));
  ASSERT_TRUE(
      s->create_task(alpha.memory_scope, task("read 4111 aloud", now_plus(3600), "support")));
  RunOptions beta;
  beta.memory_scope = MemoryScope::of("beta").value();
  auto b = k->run(Request::from_text("support", "what is my card number quokka"), beta);
  ASSERT_TRUE(b) << b.error().describe();
  EXPECT_THAT(request(1).dump(), Not(HasSubstr("4111")));
  EXPECT_THAT(request(1).dump(), HasSubstr("what is my card number"));
  EXPECT_EQ(s->message_count(beta.memory_scope, b->conversation_id).value(), 2u);
  EXPECT_FALSE(s->message_count(alpha.memory_scope, b->conversation_id));
  EXPECT_TRUE(s->usage_by_day(MemoryScope::local()).value().empty());
  EXPECT_EQ(s->usage_by_day(beta.memory_scope).value().at(0).requests, 1u);
  // Alpha's next turn has its history, fact and task.
  ASSERT_TRUE(k->run(Request::from_text("support", "and my card?"), alpha));
  EXPECT_THAT(request(2).dump(), HasSubstr("4111"));
}

TEST_P(MemoryConformanceKernel, SummaryKeptAndExtendedNotRecomputed) {
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  auto k = kernel(
      {text("a1"), text("a2"), text("SUMMARY ONE"), text("a3"), text("SUMMARY TWO"), text("a4")},
      limits);
  ASSERT_TRUE(k);
  std::string conv;
  for (auto m : {"m1", "m2", "m3"})
    conv = k->run(Request::from_text("u", m)).value().conversation_id;
  // Run 3 overflowed by two messages: summarised once, and the summary is kept in the store.
  EXPECT_NE(
      request(3)["system"].get<std::string>().find("[Earlier conversation summary]\nSUMMARY ONE"),
      std::string::npos);
  auto s = kernel_store();
  ASSERT_TRUE(s);
  auto stored = s->compaction_summary(kernex::MemoryScope::local(), conv).value();
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->text, "SUMMARY ONE");
  EXPECT_EQ(stored->covered_messages, 2u);
  // Run 4 overflows by two more: only those are summarised, on top of the stored summary.
  ASSERT_TRUE(k->run(Request::from_text("u", "m4")));
  const std::string input = request(4)["messages"][0]["content"];
  EXPECT_NE(input.find("Summary so far:\nSUMMARY ONE"), std::string::npos) << input;
  EXPECT_EQ(input.find("m1"), std::string::npos) << input;
  EXPECT_EQ(s->compaction_summary(kernex::MemoryScope::local(), conv).value()->text, "SUMMARY TWO");
}

TEST_P(MemoryConformanceKernel, ToolCallsSavedAuditedAndUsageRecorded) {
  Json call{
      {"tool_calls", {{{"id", "c1"}, {"name", "word_count"}, {"arguments", {{"text", "a b c"}}}}}},
      {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}};
  Json answer{{"text", "three"}, {"usage", {{"input_tokens", 20}, {"output_tokens", 2}}}};
  auto k = kernel({call.dump(), answer.dump()});
  ASSERT_TRUE(k);
  auto run = k->run(Request::from_text("u", "count a b c"));
  ASSERT_TRUE(run) << run.error().describe();
  k.reset();
  auto s = kernel_store();
  ASSERT_TRUE(s);
  auto messages =
      s->conversation_messages(kernex::MemoryScope::local(), run->conversation_id, 0, 10).value();
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1].entry.tool_calls.at(0).name, "word_count");
  ASSERT_TRUE(messages[2].entry.tool_result);
  EXPECT_EQ(messages[3].entry.content, "three");
  auto audit = s->audit_log(kernex::MemoryScope::local(), 10).value();
  ASSERT_EQ(audit.size(), 1u);
  EXPECT_EQ(audit[0].tool, "word_count");
  EXPECT_EQ(audit[0].conversation_id, run->conversation_id);
  auto usage = s->usage_by_day(kernex::MemoryScope::local()).value();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].usage.input_tokens, 30u);
  EXPECT_EQ(usage[0].provider, "replay");
}

// ---- Scopes: every call sees only its tenant's rows ----
// A row written in one scope is never read, listed, counted, claimed, exported, changed or deleted
// from another, whatever ids or sender names the other scope passes: the same session id in two
// tenants is two conversations, and a sender id that is a prefix of another never matches it.

MemoryScope scope_of(const char* tenant) { return MemoryScope::of(tenant).value(); }

TEST(MemoryScopeName, IsNeverEmptyAndNamesOneTenant) {
  EXPECT_EQ(MemoryScope::local().tenant(), "local");
  EXPECT_TRUE(MemoryScope::of("alpha"));
  EXPECT_TRUE(MemoryScope::of("a.b-c_9"));
  EXPECT_TRUE(MemoryScope::of(std::string(64, 'x')));
  for (const std::string& bad :
       {std::string(), std::string(65, 'x'), std::string("a/b"), std::string("a b"),
        std::string("a\x1f"
                    "b"),
        std::string("a\0b", 3), std::string("t%"), std::string("ä")}) {
    auto scope = MemoryScope::of(bad);
    ASSERT_FALSE(scope) << "'" << bad << "' was taken as a tenant";
    EXPECT_EQ(scope.error().code, ErrorCode::Usage);
  }
}

class MemoryScopes : public MemoryConformance {
 protected:
  const MemoryScope a = scope_of("alpha");
  const MemoryScope b = scope_of("beta");
  std::string open(const MemoryScope& scope, const std::string& sender = "support") {
    auto id = store->open_conversation(scope, {"serve", sender, ""}, std::chrono::minutes(120));
    EXPECT_TRUE(id) << id.error().describe();
    return id.value_or("");
  }
  // Alpha's session "support" with a secret in it, as tenant alpha's serve run would save it.
  std::string alpha_secret() {
    const std::string id = open(a);
    EXPECT_TRUE(store->append_messages(a, id,
                                       {ContextEntry::user("my card number is 4111 quokka"),
                                        ContextEntry::assistant("noted the card number")}));
    return id;
  }
};

INSTANTIATE_TEST_SUITE_P(Stores, MemoryScopes, ::testing::Values("sqlite", "postgres"), store_name);

TEST_P(MemoryScopes, SameSessionIdInTwoTenantsIsTwoConversations) {
  const std::string ida = alpha_secret();
  const std::string idb = open(b);
  ASSERT_NE(ida, idb);
  EXPECT_EQ(open(a), ida);
  EXPECT_TRUE(store->recent_messages(b, ida, 10).value().empty());
  EXPECT_TRUE(store->oldest_messages(b, ida, 10).value().empty());
  EXPECT_TRUE(store->conversation_messages(b, ida, 0, 10).value().empty());
  EXPECT_FALSE(store->message_count(b, ida));
  EXPECT_EQ(store->message_count(a, ida).value(), 2u);
  EXPECT_EQ(store->message_count(b, idb).value(), 0u);
  EXPECT_EQ(store->recent_messages(a, ida, 10).value().size(), 2u);

  // Writes through another tenant's conversation id change nothing.
  EXPECT_FALSE(store->append_messages(b, ida, {ContextEntry::user("beta writes")}));
  ExchangeRecord exchange{ida, {ContextEntry::user("beta writes")}, std::nullopt};
  EXPECT_FALSE(store->save_exchange(b, exchange));
  EXPECT_FALSE(store->save_compaction_summary(b, ida, StoredSummary{"beta summary", 1}));
  EXPECT_FALSE(store->compaction_summary(a, ida).value());
  EXPECT_TRUE(store->save_compaction_summary(a, ida, StoredSummary{"alpha summary", 1}));
  EXPECT_FALSE(store->compaction_summary(b, ida).value());
  EXPECT_EQ(store->compaction_summary(a, ida).value()->text, "alpha summary");
  EXPECT_FALSE(store->close_conversation(b, ida, std::string("beta closes")));
  EXPECT_FALSE(store->delete_conversation(b, ida));
  EXPECT_EQ(store->message_count(a, ida).value(), 2u);
  EXPECT_EQ(open(a), ida) << "beta's close reached alpha's conversation";

  // Listing: each tenant sees its own conversation only, even filtered by the same key.
  ConversationFilter filter;
  filter.channel = "serve";
  filter.sender_id = "support";
  auto listed_b = store->list_conversations(b, filter).value();
  ASSERT_EQ(listed_b.size(), 1u);
  EXPECT_EQ(listed_b[0].id, idb);
  EXPECT_FALSE(listed_b[0].summary);
  auto listed_a = store->list_conversations(a, ConversationFilter{}).value();
  ASSERT_EQ(listed_a.size(), 1u);
  EXPECT_EQ(listed_a[0].id, ida);
  EXPECT_TRUE(
      store->list_conversations(MemoryScope::local(), ConversationFilter{}).value().empty());

  // Alpha's closed conversation's summary is no summary of beta's sender.
  ASSERT_TRUE(store->close_conversation(a, ida, std::string("the quokka card summary")));
  EXPECT_TRUE(store->recent_summaries(b, {"serve", "support", ""}, idb, 5).value().empty());
  EXPECT_EQ(store->recent_summaries(a, {"serve", "support", ""}, "", 5).value().size(), 1u);

  // Deleting beta's own conversation leaves alpha's whole.
  ASSERT_TRUE(store->delete_conversation(b, idb));
  EXPECT_EQ(store->message_count(a, ida).value(), 2u);
  ASSERT_TRUE(store->delete_conversation(a, ida));
  EXPECT_FALSE(store->message_count(a, ida));
}

TEST_P(MemoryScopes, RecallNeverCrossesTenants) {
  const std::string ida = alpha_secret();
  ASSERT_TRUE(store->close_conversation(a, ida, std::string("quokka summary of the card")));
  const std::string idb = open(b);
  for (const std::string& sender : {std::string("support"), std::string()}) {
    for (const char* text : {"what is my card number?", "quokka", "card number 4111"}) {
      SCOPED_TRACE(std::string(text) + " as sender '" + sender + "'");
      RecallQuery q = query(text, sender, 10);
      EXPECT_TRUE(store->recall(b, q).value().empty());
      q.current_conversation = idb;
      q.skip_newest = 2;
      EXPECT_TRUE(store->recall(b, q).value().empty());
      EXPECT_TRUE(store->recall(MemoryScope::local(), q).value().empty());
      // A conversation id of alpha's as beta's current one changes nothing.
      q.current_conversation = ida;
      EXPECT_TRUE(store->recall(b, q).value().empty());
    }
  }
  auto mine = store->recall(a, query("quokka", "support", 10)).value();
  ASSERT_EQ(mine.size(), 2u);  // the message and the summary
}

TEST_P(MemoryScopes, FactsLessonsAndOutcomesAreTenantKeyed) {
  ASSERT_TRUE(store->store_fact(a, "support", "card", "4111"));
  EXPECT_TRUE(store->facts(b, "support").value().empty());
  EXPECT_FALSE(store->fact(b, "support", "card").value());
  EXPECT_TRUE(store->fact_records(b, std::nullopt, true).value().empty());
  EXPECT_TRUE(store->fact_records(b, std::string("support"), true).value().empty());
  EXPECT_FALSE(store->soft_delete_fact(b, "support", "card").value());
  EXPECT_EQ(store->soft_delete_facts(b, "support", std::nullopt).value(), 0u);
  // The same sender and key in beta is beta's own fact, apart from alpha's.
  ASSERT_TRUE(store->store_fact(b, "support", "card", "beta's"));
  EXPECT_EQ(store->fact(a, "support", "card").value(), "4111");
  EXPECT_EQ(store->fact(b, "support", "card").value(), "beta's");
  ASSERT_TRUE(store->soft_delete_fact(b, "support", "card").value());
  EXPECT_EQ(store->fact(a, "support", "card").value(), "4111");
  EXPECT_EQ(store->facts(a, "support").value().size(), 1u);

  ASSERT_TRUE(
      store->store_lesson(a, Lesson{"support", "billing", "never read the card aloud", "", 1, ""}));
  EXPECT_TRUE(store->lessons(b, "support", std::nullopt).value().empty());
  EXPECT_TRUE(store->lessons(b, "support", std::string("p")).value().empty());
  EXPECT_EQ(store->lessons(a, "support", std::nullopt).value().size(), 1u);
  // Reinforcing the same rule in beta adds beta's lesson, not an occurrence of alpha's.
  ASSERT_TRUE(
      store->store_lesson(b, Lesson{"support", "billing", "never read the card aloud", "", 1, ""}));
  EXPECT_EQ(store->lessons(a, "support", std::nullopt).value().at(0).occurrences, 1u);

  ASSERT_TRUE(store->store_outcome(
      a, OutcomeRecord{"support", "billing", 1, "card kept", "conversation", "", ""}));
  EXPECT_TRUE(store->recent_outcomes(b, "support", 10, std::nullopt).value().empty());
  EXPECT_TRUE(store->recent_outcomes(b, "support", 10, std::string()).value().empty());
  EXPECT_EQ(store->prune_outcomes(b, 0).value(), 0u);
  EXPECT_EQ(store->recent_outcomes(a, "support", 10, std::nullopt).value().size(), 1u);
  EXPECT_EQ(store->prune_outcomes(a, 0).value(), 1u);
}

TEST_P(MemoryScopes, TasksAreNeverSeenClaimedOrChangedFromAnotherTenant) {
  const std::string id =
      store->create_task(a, task("call about the card", now_plus(-60), "support")).value();
  EXPECT_FALSE(store->task(b, id).value());
  EXPECT_TRUE(store->pending_tasks(b, "support").value().empty());
  EXPECT_TRUE(
      store->claim_due_tasks(b, "beta-worker", std::chrono::seconds(60), 10).value().empty());
  EXPECT_FALSE(store->complete_task(b, id, "").value_or(false));
  EXPECT_FALSE(store->fail_task(b, id, "", "beta fails it").value_or(false));
  EXPECT_FALSE(store->cancel_task(b, id, "support").value_or(false));
  EXPECT_FALSE(store->cancel_task(b, id.substr(0, 4), "support").value_or(false));
  // Beta's identical task is beta's own, not a duplicate of alpha's.
  const std::string beta_id =
      store->create_task(b, task("call about the card", now_plus(-60), "support")).value();
  EXPECT_NE(beta_id, id);
  auto mine = store->task(a, id).value();
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, "pending");
  EXPECT_EQ(mine->retry_count, 0u);

  auto claimed = store->claim_due_tasks(a, "alpha-worker", std::chrono::seconds(60), 10).value();
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, id);
  EXPECT_FALSE(store->complete_task(b, id, "alpha-worker").value_or(false));
  EXPECT_EQ(store->task(a, id).value()->status, "claimed");
  ASSERT_TRUE(store->complete_task(a, id, "alpha-worker").value());

  TaskRun run;
  run.task_id = id;
  run.started_at = now_plus(-5);
  run.status = "completed";
  run.result = "card call made";
  ASSERT_TRUE(store->record_task_run(a, run));
  EXPECT_TRUE(store->task_runs(b, id, 10).value().empty());
  EXPECT_TRUE(store->task_runs(b, "", 10).value().empty());
  EXPECT_TRUE(store->task_runs(b, id.substr(0, 2), 10).value().empty());
  EXPECT_EQ(store->task_runs(a, id.substr(0, 2), 10).value().size(), 1u);
}

TEST_P(MemoryScopes, SenderPrefixNeverMatches) {
  for (const MemoryScope& s : {a, b}) {
    SCOPED_TRACE(s.tenant());
    const std::string conv = open(s, "support");
    ASSERT_TRUE(store->append_messages(s, conv, {ContextEntry::user("support quokka secret")}));
    ASSERT_TRUE(store->store_fact(s, "support", "card", "4111"));
    ASSERT_TRUE(store->store_lesson(s, Lesson{"support", "billing", "quokka rule", "", 1, ""}));
    ASSERT_TRUE(store->store_outcome(
        s, OutcomeRecord{"support", "billing", 1, "quokka", "conversation", "", ""}));
    const std::string id =
        store->create_task(s, task("quokka call", now_plus(3600), "support")).value();
    for (const char* sender : {"sup", "s", "support ", "Support", "supporter"}) {
      SCOPED_TRACE(sender);
      EXPECT_TRUE(store->facts(s, sender).value().empty());
      EXPECT_FALSE(store->fact(s, sender, "card").value());
      EXPECT_TRUE(store->fact_records(s, sender, true).value().empty());
      EXPECT_EQ(store->soft_delete_facts(s, sender, std::nullopt).value(), 0u);
      EXPECT_TRUE(store->lessons(s, sender, std::nullopt).value().empty());
      EXPECT_TRUE(store->recent_outcomes(s, sender, 10, std::nullopt).value().empty());
      EXPECT_TRUE(store->pending_tasks(s, sender).value().empty());
      EXPECT_FALSE(store->cancel_task(s, id.substr(0, 8), sender).value_or(false));
      EXPECT_TRUE(store->recall(s, query("quokka secret", sender, 10)).value().empty());
      ConversationFilter filter;
      filter.sender_id = sender;
      EXPECT_TRUE(store->list_conversations(s, filter).value().empty());
    }
    EXPECT_EQ(store->task(s, id).value()->status, "pending");
    EXPECT_EQ(store->facts(s, "support").value().size(), 1u);
  }
}

TEST_P(MemoryScopes, UsageAndAuditAreTenantKeyed) {
  const std::string ida = alpha_secret();
  ASSERT_TRUE(store->record_usage(a, UsageRecord{ida, "support", "m", "p", Usage{7, 3}}));
  ExchangeRecord exchange{
      ida, {ContextEntry::user("more")}, UsageRecord{ida, "support", "m", "p", Usage{1, 1}}};
  ASSERT_TRUE(store->save_exchange(a, exchange));
  AuditRecord audit;
  audit.conversation_id = ida;
  audit.sender_id = "support";
  audit.tool = "read_card";
  audit.result = "4111 quokka";
  ASSERT_TRUE(store->record_tool_call(a, audit));
  EXPECT_TRUE(store->usage_by_day(b).value().empty());
  EXPECT_TRUE(store->audit_log(b, 100).value().empty());
  EXPECT_TRUE(store->usage_by_day(MemoryScope::local()).value().empty());
  EXPECT_EQ(store->usage_by_day(a).value().at(0).requests, 2u);
  EXPECT_EQ(store->audit_log(a, 100).value().size(), 1u);
  // Beta's delete of alpha's conversation id leaves alpha's usage and audit rows.
  EXPECT_FALSE(store->delete_conversation(b, ida));
  EXPECT_EQ(store->usage_by_day(a).value().at(0).requests, 2u);
  EXPECT_EQ(store->audit_log(a, 100).value().size(), 1u);
}

TEST_P(MemoryScopes, ExportHoldsOneTenantAndImportFillsOnlyItsScope) {
  const std::string ida = alpha_secret();
  ASSERT_TRUE(store->store_fact(a, "support", "card", "4111 quokka"));
  ASSERT_TRUE(store->create_task(a, task("quokka call", now_plus(3600), "support")));
  ASSERT_TRUE(store->record_tool_call(
      a, AuditRecord{"", ida, "support", "", "t", Json::object(), "quokka", "ok", ""}));
  ASSERT_TRUE(store->record_usage(a, UsageRecord{ida, "support", "m", "p", Usage{1, 1}}));
  const std::string idb = open(b);
  ASSERT_TRUE(store->append_messages(b, idb, {ContextEntry::user("beta's own words")}));

  const std::string beta_doc = store->export_json(b).value().dump();
  EXPECT_THAT(beta_doc, Not(HasSubstr("quokka")));
  EXPECT_THAT(beta_doc, Not(HasSubstr(ida)));
  EXPECT_THAT(beta_doc, HasSubstr("beta's own words"));
  EXPECT_THAT(beta_doc, Not(HasSubstr("\"tenant\"")));
  const Json alpha_doc = store->export_json(a).value();
  EXPECT_THAT(alpha_doc.dump(), HasSubstr("quokka"));
  EXPECT_THAT(alpha_doc.dump(), Not(HasSubstr("beta's own words")));

  // Into a fresh store, under another tenant: only that tenant sees the rows.
  auto options = stores.new_database(GetParam());
  ASSERT_TRUE(options);
  auto other = stores.open(GetParam(), *options);
  ASSERT_TRUE(other);
  const MemoryScope gamma = scope_of("gamma");
  ASSERT_TRUE(other->import_json(gamma, alpha_doc)) << "import";
  EXPECT_EQ(other->message_count(gamma, ida).value(), 2u);
  EXPECT_FALSE(other->message_count(a, ida));
  EXPECT_EQ(other->fact(gamma, "support", "card").value(), "4111 quokka");
  EXPECT_FALSE(other->fact(MemoryScope::local(), "support", "card").value());
  EXPECT_TRUE(other->export_json(MemoryScope::local()).value().dump().find("quokka") ==
              std::string::npos);

  // A document naming a tenant, or adding to another tenant's conversation, imports nothing.
  Json named = Json{{"format", "kernex-memory"}, {"version", 1}};
  named["facts"] =
      Json::array({{{"tenant", "alpha"}, {"sender_id", "x"}, {"key", "k"}, {"value", "v"}}});
  EXPECT_FALSE(store->import_json(b, named));
  EXPECT_FALSE(store->fact(a, "x", "k").value());
  EXPECT_FALSE(store->fact(b, "x", "k").value());
  Json intrude = Json{{"format", "kernex-memory"}, {"version", 1}};
  intrude["facts"] = Json::array({{{"sender_id", "y"}, {"key", "k"}, {"value", "v"}}});
  intrude["messages"] = Json::array(
      {{{"seq", 999999}, {"conversation_id", ida}, {"role", "user"}, {"content", "beta injects"}}});
  EXPECT_FALSE(store->import_json(b, intrude));
  EXPECT_EQ(store->message_count(a, ida).value(), 2u);
  for (const auto& m : rows(store->conversation_messages(a, ida, 0, 10)))
    EXPECT_NE(m.entry.content, "beta injects");
  EXPECT_FALSE(store->fact(b, "y", "k").value()) << "a failed import kept some rows";
}

}  // namespace
}  // namespace kernex
