// The SQLite memory plugin through the MemoryStore interface: kernex-memory's conformance
// cases (without its defects), recall, tasks, learning, backup and context assembly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sys/wait.h>

#include <cstdio>
#include <ctime>

#include "context_builder.hpp"
#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

std::string utc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}
std::string now_plus(long seconds) { return utc(std::time(nullptr) + seconds); }

class MemorySqlite : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> open(Json options = Json::object()) {
    if (!options.contains("path")) options["path"] = (dir / "data" / "memory.db").string();
    auto store = host.create_memory("sqlite", options);
    EXPECT_TRUE(store) << store.error().describe();
    return store ? *store : nullptr;
  }
  std::string conversation(MemoryStore& s, const std::string& sender = "alice", const std::string& project = "") {
    auto id = s.open_conversation({"cli", sender, project}, std::chrono::minutes(120));
    EXPECT_TRUE(id) << id.error().describe();
    return id.value_or("");
  }
  TaskSpec task(std::string description, std::string due, std::string sender = "alice") {
    TaskSpec t;
    t.channel = "cli";
    t.sender_id = std::move(sender);
    t.reply_target = "chat-1";
    t.description = std::move(description);
    t.due_at = std::move(due);
    return t;
  }

  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  std::shared_ptr<MemoryStore> store = open();
};

// ---- Opening ----

TEST_F(MemorySqlite, FileIsPrivateAndDataDirIsCreated0700) {
  struct stat st{};
  ASSERT_EQ(::stat((dir / "data").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((dir / "data" / "memory.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(store->append_messages(conversation(*store), {ContextEntry::user("hi")}));
  EXPECT_TRUE(std::filesystem::exists(dir / "data" / "memory.db-wal"));  // WAL mode
}

TEST_F(MemorySqlite, DataDirOptionDefaultsTheFileName) {
  auto s = host.create_memory("sqlite", Json{{"data_dir", (dir / "d2").string()}});
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_TRUE(std::filesystem::exists(dir / "d2" / "memory.db"));
}

TEST_F(MemorySqlite, BadOptionsAreConfigErrors) {
  auto unknown = host.create_memory("sqlite", Json{{"path", "x.db"}, {"colour", "red"}});
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().describe(), HasSubstr("unknown option 'colour'"));
  auto none = host.create_memory("sqlite", Json::object());
  ASSERT_FALSE(none);
  EXPECT_THAT(none.error().describe(), HasSubstr("'path'"));
  auto sync = host.create_memory("sqlite", Json{{"path", "x.db"}, {"synchronous", "sometimes"}});
  ASSERT_FALSE(sync);
  EXPECT_THAT(sync.error().describe(), HasSubstr("synchronous"));
}

TEST_F(MemorySqlite, ReopeningKeepsDataAndMigratesOnce) {
  const std::string conv = conversation(*store);
  ASSERT_TRUE(store->append_messages(conv, {ContextEntry::user("kept")}));
  store.reset();
  auto again = open();
  auto recent = again->recent_messages(conv, 10);
  ASSERT_TRUE(recent);
  ASSERT_EQ(recent->size(), 1u);
  EXPECT_EQ((*recent)[0].content, "kept");
}

// ---- Conversations and history ----

TEST_F(MemorySqlite, ConversationReusedUntilIdle) {
  const std::string a = conversation(*store);
  EXPECT_EQ(conversation(*store), a);
  auto fresh = store->open_conversation({"cli", "alice", ""}, std::chrono::minutes(0));
  ASSERT_TRUE(fresh);
  EXPECT_NE(*fresh, a);
}

TEST_F(MemorySqlite, ConversationsIsolatedByChannelSenderAndProject) {
  const std::string a = conversation(*store, "alice", "");
  EXPECT_NE(conversation(*store, "alice", "trader"), a);
  EXPECT_NE(conversation(*store, "bob", ""), a);
  auto other_channel = store->open_conversation({"telegram", "alice", ""}, std::chrono::minutes(120));
  ASSERT_TRUE(other_channel);
  EXPECT_NE(*other_channel, a);
  // Closing one project's conversation leaves the other's.
  const std::string trader = conversation(*store, "alice", "trader");
  ASSERT_TRUE(store->close_conversation(a, std::nullopt));
  EXPECT_NE(conversation(*store, "alice", ""), a);
  EXPECT_EQ(conversation(*store, "alice", "trader"), trader);
}

TEST_F(MemorySqlite, DefectTimestampTiesReorderMessages) {
  // kernex ordered by a one-second timestamp: a pair saved within a second came back in any order.
  const std::string conv = conversation(*store);
  std::vector<ContextEntry> all;
  for (int i = 0; i < 60; ++i) {
    std::vector<ContextEntry> exchange{ContextEntry::user("u" + std::to_string(i)),
                                       ContextEntry::assistant("a" + std::to_string(i))};
    ASSERT_TRUE(store->append_messages(conv, exchange));
    all.insert(all.end(), exchange.begin(), exchange.end());
  }
  auto recent = store->recent_messages(conv, 10);
  ASSERT_TRUE(recent);
  EXPECT_EQ(*recent, std::vector<ContextEntry>(all.end() - 10, all.end()));
  auto oldest = store->oldest_messages(conv, 4);
  ASSERT_TRUE(oldest);
  EXPECT_EQ(*oldest, std::vector<ContextEntry>(all.begin(), all.begin() + 4));
  EXPECT_EQ(store->message_count(conv).value_or(0), 120u);
}

TEST_F(MemorySqlite, DefectToolTurnsNeverPersisted) {
  // kernex's messages.role CHECK allowed only user/assistant: tool calls and results were lost.
  const std::string conv = conversation(*store);
  ContextEntry call = ContextEntry::assistant("");
  call.tool_calls = {ToolCall{"c1", "word_count", Json{{"text", "a b"}}}};
  call.provider_state = Json{{"thinking", "sig"}};
  std::vector<ContextEntry> exchange{ContextEntry::user("count"), call,
                                     ContextEntry::tool(ToolResult{"c1", "word_count", "2", false}),
                                     ContextEntry::assistant("two words")};
  ASSERT_TRUE(store->append_messages(conv, exchange));
  auto back = store->recent_messages(conv, 10);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, exchange);
}

TEST_F(MemorySqlite, AppendToUnknownConversationFailsAndSavesNothing) {
  auto r = store->append_messages("no-such-id", {ContextEntry::user("x")});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().describe(), HasSubstr("no conversation no-such-id"));
}

TEST_F(MemorySqlite, CompactionSummaryStoredAndReplaced) {
  const std::string conv = conversation(*store);
  EXPECT_FALSE(store->compaction_summary(conv).value());
  ASSERT_TRUE(store->save_compaction_summary(conv, {"first", 4}));
  ASSERT_TRUE(store->save_compaction_summary(conv, {"second", 6}));
  auto s = store->compaction_summary(conv);
  ASSERT_TRUE(s && *s);
  EXPECT_EQ((*s)->text, "second");
  EXPECT_EQ((*s)->covered_messages, 6u);
}

TEST_F(MemorySqlite, HistoryListsConversationsAndMessages) {
  const std::string conv = conversation(*store);
  ASSERT_TRUE(store->append_messages(conv, {ContextEntry::user("q"), ContextEntry::assistant("a")}));
  ASSERT_TRUE(store->close_conversation(conv, std::string("talked about q")));
  auto list = store->list_conversations({});
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, conv);
  EXPECT_EQ((*list)[0].status, "closed");
  EXPECT_EQ((*list)[0].summary, "talked about q");
  EXPECT_EQ((*list)[0].message_count, 2u);
  auto messages = store->conversation_messages(conv, 0, 10);
  ASSERT_TRUE(messages);
  ASSERT_EQ(messages->size(), 2u);
  EXPECT_LT((*messages)[0].seq, (*messages)[1].seq);
  auto after = store->conversation_messages(conv, (*messages)[0].seq, 10);
  ASSERT_EQ(after.value().size(), 1u);
  // The closed conversation's summary is offered to the next one.
  const std::string next = conversation(*store);
  auto summaries = store->recent_summaries({"cli", "alice", ""}, next, 3);
  ASSERT_TRUE(summaries);
  ASSERT_EQ(summaries->size(), 1u);
  EXPECT_EQ((*summaries)[0].text, "talked about q");
}

// ---- Recall ----

// A sender's recall finds only their own messages (and skips the search for a sender with none);
// without a sender it ranks every match.
TEST_F(MemorySqlite, RecallIsScopedToTheSenderEitherWay) {
  const std::string alice = conversation(*store);
  ASSERT_TRUE(store->append_messages(alice, {ContextEntry::user("the deploy failed on friday"),
                                             ContextEntry::assistant("the deploy failed, sorry")}));
  const std::string bob = conversation(*store, "bob");
  ASSERT_TRUE(store->append_messages(bob, {ContextEntry::user("my deploy failed twice"),
                                           ContextEntry::user("nothing to do with it")}));
  auto mine = store->recall({"deploy failed", "alice", 5, "", 0, std::nullopt});
  ASSERT_TRUE(mine) << mine.error().describe();
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].text, "the deploy failed on friday");
  auto everyone = store->recall({"deploy failed", "", 5, "", 0, std::nullopt});
  ASSERT_TRUE(everyone);
  EXPECT_EQ(everyone->size(), 2u);
  EXPECT_TRUE(store->recall({"deploy failed", "carol", 5, "", 0, std::nullopt}).value().empty());
  // Any word fills up after every word, for a sender too.
  auto any = store->recall({"friday deploy weekend", "alice", 5, "", 0, std::nullopt});
  ASSERT_TRUE(any);
  EXPECT_EQ(any->size(), 1u);
}

TEST_F(MemorySqlite, FtsOperatorQueriesSucceed) {
  const std::string conv = conversation(*store);
  ASSERT_TRUE(store->append_messages(conv, {ContextEntry::user("the build is NOT working again"),
                                            ContextEntry::user("say \"hello world\" to them"),
                                            ContextEntry::user("an error (crash) happened")}));
  const std::string other = conversation(*store, "alice", "p");
  for (const char* q : {"NOT working", "error (crash)", "work*", "say \"hello world\"", "AND OR", "NEAR(", "\"",
                        "col:umn", "^start", "a - b"}) {
    RecallQuery query{q, "alice", 5, other, 0, std::nullopt};
    auto hits = store->recall(query);
    EXPECT_TRUE(hits) << q << ": " << hits.error().describe();
  }
  auto hits = store->recall({"NOT working", "alice", 5, other, 0, std::nullopt});
  ASSERT_EQ(hits.value().size(), 1u);
  EXPECT_EQ((*hits)[0].source, "message");
  EXPECT_EQ((*hits)[0].conversation_id, conv);
  EXPECT_EQ((*hits)[0].text, "the build is NOT working again");
  EXPECT_EQ(store->recall({"error (crash)", "alice", 5, other, 0, std::nullopt}).value().size(), 1u);
  EXPECT_EQ(store->recall({"hello world", "alice", 5, other, 0, std::nullopt}).value().size(), 1u);
}

TEST_F(MemorySqlite, RecallRules) {
  const std::string old_conv = conversation(*store);
  ASSERT_TRUE(store->append_messages(old_conv, {ContextEntry::user("my cat is called Miso"),
                                                ContextEntry::assistant("Miso the cat, noted")}));
  ASSERT_TRUE(store->close_conversation(old_conv, std::string("The user's cat Miso likes tuna")));
  const std::string conv = conversation(*store);
  ASSERT_TRUE(store->append_messages(conv, {ContextEntry::user("tell me about Miso today")}));
  RecallQuery q{"Miso", "alice", 5, conv, 1, std::nullopt};
  auto hits = store->recall(q);
  ASSERT_TRUE(hits);
  // The user message and the summary; never the assistant's text; not the message in the window.
  ASSERT_EQ(hits->size(), 2u);
  std::set<std::string> sources{(*hits)[0].source, (*hits)[1].source};
  EXPECT_EQ(sources, (std::set<std::string>{"message", "summary"}));
  for (const auto& h : *hits) EXPECT_NE(h.text, "tell me about Miso today");
  // Outside the window, the current conversation's own older messages are recalled too.
  q.skip_newest = 0;
  EXPECT_EQ(store->recall(q).value().size(), 3u);
  // Another sender sees nothing; a short query does not search.
  EXPECT_TRUE(store->recall({"Miso", "bob", 5, "", 0, std::nullopt}).value().empty());
  EXPECT_TRUE(store->recall({"Mi", "alice", 5, "", 0, std::nullopt}).value().empty());
  // since: an hour ahead finds nothing, an hour back finds the hits.
  EXPECT_TRUE(store->recall({"Miso", "alice", 5, "", 0, now_plus(3600)}).value().empty());
  EXPECT_EQ(store->recall({"Miso", "alice", 5, "", 0, now_plus(-3600)}).value().size(), 3u);
  auto bad_since = store->recall({"Miso", "alice", 5, "", 0, std::string("yesterday")});
  ASSERT_FALSE(bad_since);
  EXPECT_THAT(bad_since.error().describe(), HasSubstr("recall since"));
}

// ---- Facts ----

TEST_F(MemorySqlite, FactsUpsertSoftDeleteAndComeBack) {
  ASSERT_TRUE(store->store_fact("alice", "name", "Alice"));
  ASSERT_TRUE(store->store_fact("alice", "name", "Ali"));
  ASSERT_TRUE(store->store_fact("alice", "city", "Lyon"));
  EXPECT_EQ(store->fact("alice", "name").value(), "Ali");
  EXPECT_EQ(store->facts("alice").value(),
            (std::vector<std::pair<std::string, std::string>>{{"city", "Lyon"}, {"name", "Ali"}}));
  EXPECT_TRUE(store->soft_delete_fact("alice", "name").value());
  EXPECT_FALSE(store->soft_delete_fact("alice", "name").value());  // idempotent
  EXPECT_FALSE(store->fact("alice", "name").value());
  EXPECT_EQ(store->facts("alice").value().size(), 1u);
  auto all = store->fact_records("alice", true).value();
  ASSERT_EQ(all.size(), 2u);
  // Re-storing un-deletes with the new value.
  ASSERT_TRUE(store->store_fact("alice", "name", "Alicia"));
  EXPECT_EQ(store->fact("alice", "name").value(), "Alicia");
  const auto restored = store->fact_records("alice", true).value();
  for (const auto& f : restored) EXPECT_FALSE(f.deleted_at) << f.key;
  ASSERT_TRUE(store->store_fact("alice", "job", "pilot"));
  EXPECT_EQ(store->soft_delete_facts("alice", std::string("job")).value(), 1u);
  EXPECT_EQ(store->soft_delete_facts("alice", std::nullopt).value(), 2u);
  EXPECT_EQ(store->fact_records("alice", true).value().size(), 3u);
  EXPECT_TRUE(store->fact_records("alice", false).value().empty());
  EXPECT_FALSE(store->store_fact("alice", "", "x"));
}

// ---- Tasks ----

TEST_F(MemorySqlite, TaskCreatedWithNormalisedDueTime) {
  auto id = store->create_task(task("Call John", "2026-12-31T15:00:00"));
  ASSERT_TRUE(id) << id.error().describe();
  auto tasks = store->pending_tasks("alice").value();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].id, *id);
  EXPECT_EQ(tasks[0].spec.due_at, "2026-12-31 15:00:00");
  EXPECT_FALSE(tasks[0].spec.repeat);
  EXPECT_EQ(tasks[0].spec.task_type, "reminder");
  auto bad = store->create_task(task("Call John", "tomorrow"));
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().describe(), HasSubstr("task due_at"));
  TaskSpec weird = task("x y z", "2026-01-01 00:00:00");
  weird.repeat = "fortnightly";
  EXPECT_FALSE(store->create_task(weird));
}

TEST_F(MemorySqlite, TaskExactAndFuzzyDedup) {
  auto a = store->create_task(task("Close all positions", "2026-03-01 10:00:00"));
  EXPECT_EQ(store->create_task(task("Close all positions", "2026-03-01 10:00:00")).value(), a.value());
  auto e = store->create_task(task("Send daily email to Adriana", "2026-02-22 07:00:00"));
  EXPECT_EQ(store->create_task(task("Send daily email to Adriana", "2026-02-22T07:00:00Z")).value(), e.value());
  EXPECT_EQ(store->create_task(task("Send daily love email to Adriana via gmail", "2026-02-22 07:05:00")).value(),
            e.value());
  EXPECT_NE(store->create_task(task("Send daily email to Adriana", "2026-02-22 07:00:00", "bob")).value(), e.value());
  auto h = store->create_task(task("Cancel Hostinger plan — expires March 17", "2026-03-16 09:00:00"));
  EXPECT_EQ(store->create_task(task("Cancel Hostinger VPS — last reminder, expires TOMORROW", "2026-03-16 09:10:00"))
                .value(),
            h.value());
  auto m = store->create_task(task("Send good morning message to the team", "2026-04-01 08:00:00"));
  EXPECT_NE(store->create_task(task("Cancel Hostinger plan and subscription", "2026-04-01 08:00:00")).value(), m.value());
  EXPECT_NE(store->create_task(task("Reminder task", "2026-05-01 08:00:00")).value(),
            store->create_task(task("Action task", "2026-05-01 08:00:00")).value());
}

TEST_F(MemorySqlite, ClaimTakesOnlyDueTasks) {
  auto past = store->create_task(task("past thing", "2020-01-01 00:00:00"));
  ASSERT_TRUE(store->create_task(task("future thing", "2099-01-01 00:00:00")));
  auto claimed = store->claim_due_tasks("w1", std::chrono::seconds(600), 10);
  ASSERT_TRUE(claimed);
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_EQ((*claimed)[0].id, past.value());
  EXPECT_EQ((*claimed)[0].status, "claimed");
  EXPECT_EQ((*claimed)[0].claimed_by, "w1");
  EXPECT_TRUE(store->claim_due_tasks("w2", std::chrono::seconds(600), 10).value().empty());
  // One-shot completion: delivered, no longer pending or due.
  EXPECT_FALSE(store->complete_task(past.value(), "w2").value());  // not w2's claim
  EXPECT_TRUE(store->complete_task(past.value(), "w1").value());
  EXPECT_EQ(store->task(past.value()).value()->status, "delivered");
  EXPECT_EQ(store->pending_tasks("alice").value().size(), 1u);
}

TEST_F(MemorySqlite, TwoStoresOnOneFileClaimOnce) {
  ASSERT_TRUE(store->create_task(task("due now", "2020-01-01 00:00:00")));
  auto second = open();
  auto a = store->claim_due_tasks("a", std::chrono::seconds(600), 10).value();
  auto b = second->claim_due_tasks("b", std::chrono::seconds(600), 10).value();
  EXPECT_EQ(a.size() + b.size(), 1u);
  EXPECT_TRUE(store->claim_due_tasks("a", std::chrono::seconds(600), 10).value().empty());
  EXPECT_TRUE(second->claim_due_tasks("b", std::chrono::seconds(600), 10).value().empty());
}

TEST_F(MemorySqlite, ExpiredLeaseIsReclaimedAndOldHolderLosesIt) {
  auto id = store->create_task(task("due now", "2020-01-01 00:00:00")).value();
  ASSERT_EQ(store->claim_due_tasks("dead-worker", std::chrono::seconds(0), 10).value().size(), 1u);
  auto again = store->claim_due_tasks("w2", std::chrono::seconds(600), 10).value();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].claimed_by, "w2");
  EXPECT_FALSE(store->complete_task(id, "dead-worker").value());
  EXPECT_TRUE(store->complete_task(id, "w2").value());
}

TEST_F(MemorySqlite, DefectOverdueRecurringTaskFiresOncePerCatchUp) {
  // kernex advanced a recurring task from its old due time: a daily task overdue since 2020
  // became due again at once, once per missed day. It now moves to its next time after now.
  auto id = store->create_task([&] {
    auto t = task("water the plants", "2020-01-01T09:00:00");
    t.repeat = "daily";
    return t;
  }()).value();
  ASSERT_EQ(store->claim_due_tasks("w", std::chrono::seconds(600), 10).value().size(), 1u);
  ASSERT_TRUE(store->complete_task(id, "w").value());
  auto t = store->task(id).value();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, "pending");
  EXPECT_FALSE(t->claimed_by);
  EXPECT_GT(t->spec.due_at, now_plus(0));
  EXPECT_LE(t->spec.due_at, now_plus(86400));
  EXPECT_EQ(t->spec.due_at.substr(11), "09:00:00");
  EXPECT_TRUE(store->claim_due_tasks("w", std::chrono::seconds(600), 10).value().empty());
}

TEST_F(MemorySqlite, RecurrenceSteps) {
  const auto make = [&](const char* repeat, const char* due) {
    auto t = task(std::string(repeat) + " " + std::string(repeat) + "-chore " + std::string(repeat) + "-errand", due);
    t.repeat = repeat;
    return store->create_task(t).value();
  };
  // Completing early (no claim, empty worker) moves one step.
  const auto friday = make("weekdays", "2099-01-02 08:00:00");  // a Friday
  const auto weekly = make("weekly", "2099-01-02 08:00:00");
  const auto monthly = make("monthly", "2099-01-31 08:00:00");
  ASSERT_TRUE(store->complete_task(friday, "").value());
  ASSERT_TRUE(store->complete_task(weekly, "").value());
  ASSERT_TRUE(store->complete_task(monthly, "").value());
  EXPECT_EQ(store->task(friday).value()->spec.due_at, "2099-01-05 08:00:00");  // Monday
  EXPECT_EQ(store->task(weekly).value()->spec.due_at, "2099-01-09 08:00:00");
  EXPECT_EQ(store->task(monthly).value()->spec.due_at, "2099-03-03 08:00:00");  // SQLite's month arithmetic
}

TEST_F(MemorySqlite, FailedTaskRetriesWithBackoffThenFails) {
  auto id = store->create_task(task("flaky job", "2020-01-01 00:00:00")).value();
  ASSERT_EQ(store->claim_due_tasks("w", std::chrono::seconds(600), 1).value().size(), 1u);
  EXPECT_TRUE(store->fail_task(id, "w", "boom 1").value());
  auto t = store->task(id).value();
  EXPECT_EQ(t->retry_count, 1u);
  EXPECT_EQ(t->last_error, "boom 1");
  EXPECT_EQ(t->status, "pending");
  EXPECT_FALSE(t->claimed_by);
  EXPECT_GT(t->spec.due_at, now_plus(60));  // backed off, not due at once
  EXPECT_TRUE(store->fail_task(id, "", "boom 2").value());
  EXPECT_GT(store->task(id).value()->spec.due_at, now_plus(180));  // the backoff grows
  EXPECT_FALSE(store->fail_task(id, "", "boom 3").value());
  EXPECT_EQ(store->task(id).value()->status, "failed");
  EXPECT_FALSE(store->fail_task("missing", "", "x"));
}

TEST_F(MemorySqlite, CancelByPrefixForItsSenderOnly) {
  auto id = store->create_task(task("Call John", "2026-12-31 15:00:00")).value();
  const std::string prefix = id.substr(0, 8);
  EXPECT_FALSE(store->cancel_task(prefix, "bob").value());
  EXPECT_EQ(store->pending_tasks("alice").value().size(), 1u);
  EXPECT_TRUE(store->cancel_task(prefix, "alice").value());
  EXPECT_TRUE(store->pending_tasks("alice").value().empty());
  EXPECT_TRUE(store->cancel_task(prefix, "alice").value());  // again: still cancelled
}

TEST_F(MemorySqlite, DefectLikeWildcardsInIdPrefix) {
  // kernex matched prefixes with LIKE: "%" cancelled whatever task came first.
  ASSERT_TRUE(store->create_task(task("Call John", "2026-12-31 15:00:00")));
  EXPECT_FALSE(store->cancel_task("%", "alice").value());
  EXPECT_FALSE(store->cancel_task("_", "alice").value());
  EXPECT_EQ(store->pending_tasks("alice").value().size(), 1u);
  EXPECT_TRUE(store->task_runs("%", 10).value().empty());
}

TEST_F(MemorySqlite, TaskRunHistory) {
  TaskRun first{"", "0123456789abcdef", "2026-01-01 10:00:00", "", "completed", "first result", std::nullopt, 1234};
  TaskRun second{"", "0123456789abcdef", "2026-01-01 11:00:00", "", "failed", std::nullopt, "provider exploded",
                 std::nullopt};
  ASSERT_TRUE(store->record_task_run(first));
  ASSERT_TRUE(store->record_task_run(second));
  auto runs = store->task_runs("01234567", 10).value();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].status, "failed");
  EXPECT_EQ(runs[0].error, "provider exploded");
  EXPECT_EQ(runs[1].result, "first result");
  EXPECT_EQ(runs[1].tokens, 1234u);
  EXPECT_EQ(store->task_runs("01234567", 1).value().size(), 1u);
  EXPECT_TRUE(store->task_runs("ffff", 10).value().empty());
  TaskRun bogus = first;
  bogus.status = "bogus";
  EXPECT_FALSE(store->record_task_run(bogus));
}

// ---- Learning ----

TEST_F(MemorySqlite, LessonsDedupCapAndReinforce) {
  ASSERT_TRUE(store->store_lesson({"alice", "trading", "Never risk more than 2%", "", 1, ""}));
  ASSERT_TRUE(store->store_lesson({"alice", "trading", "Never risk more than 2%", "", 1, ""}));
  auto one = store->lessons("alice", std::nullopt).value();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].occurrences, 2u);
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(store->store_lesson({"alice", "style", "Rule number " + std::to_string(i), "", 1, ""}));
  }
  // Reinforcing the oldest surviving rule moves it to the front; the cap then drops others.
  ASSERT_TRUE(store->store_lesson({"alice", "style", "Rule number 2", "", 1, ""}));
  ASSERT_TRUE(store->store_lesson({"alice", "style", "Rule number 12", "", 1, ""}));
  std::vector<std::string> rules;
  const auto listed = store->lessons("alice", std::nullopt).value();
  for (const auto& l : listed) {
    if (l.domain == "style") rules.push_back(l.rule);
  }
  ASSERT_EQ(rules.size(), 10u);
  EXPECT_EQ(rules[0], "Rule number 12");
  EXPECT_EQ(rules[1], "Rule number 2");
  for (const char* gone : {"Rule number 0", "Rule number 1", "Rule number 3"}) {
    EXPECT_EQ(std::find(rules.begin(), rules.end(), gone), rules.end()) << gone;
  }
  // Per project: the cap and dedup do not cross projects or senders; the project's rules come first.
  ASSERT_TRUE(store->store_lesson({"alice", "style", "Rule number 2", "my-trader", 1, ""}));
  ASSERT_TRUE(store->store_lesson({"bob", "style", "Rule number 2", "", 1, ""}));
  auto layered = store->lessons("alice", std::string("my-trader")).value();
  ASSERT_FALSE(layered.empty());
  EXPECT_EQ(layered[0].project, "my-trader");
  EXPECT_EQ(layered[0].occurrences, 1u);
  EXPECT_EQ(store->lessons("bob", std::nullopt).value().size(), 1u);
}

TEST_F(MemorySqlite, OutcomesByProjectAndPruned) {
  ASSERT_TRUE(store->store_outcome({"alice", "trading", 1, "good entry", "conversation", "my-trader", ""}));
  ASSERT_TRUE(store->store_outcome({"alice", "communication", -1, "too long", "conversation", "", ""}));
  EXPECT_EQ(store->recent_outcomes("alice", 15, std::nullopt).value().size(), 2u);
  auto trader = store->recent_outcomes("alice", 15, std::string("my-trader")).value();
  ASSERT_EQ(trader.size(), 1u);
  EXPECT_EQ(trader[0].domain, "trading");
  auto general = store->recent_outcomes("alice", 15, std::string("")).value();
  ASSERT_EQ(general.size(), 1u);
  EXPECT_EQ(general[0].domain, "communication");
  EXPECT_FALSE(store->store_outcome({"alice", "x", 2, "bad score", "conversation", "", ""}));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->store_outcome({"alice", "d", 0, "o" + std::to_string(i), "c", "", ""}));
  EXPECT_EQ(store->prune_outcomes(3).value(), 2u);
  auto kept = store->recent_outcomes("alice", 15, std::nullopt).value();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].lesson, "o2");
}

// ---- Usage and audit ----

TEST_F(MemorySqlite, UsageSummedByDayModelAndProvider) {
  const std::string conv = conversation(*store);
  ASSERT_TRUE(store->record_usage({conv, "alice", "claude-sonnet-4-6", "anthropic", Usage{100, 50, 1000, 200, 0.01}}));
  ASSERT_TRUE(store->record_usage({conv, "alice", "claude-sonnet-4-6", "anthropic", Usage{250, 100, 300, 0, 0.02}}));
  ASSERT_TRUE(store->record_usage({conv, "alice", "llama3.2", "ollama", Usage{10, 5, 0, 0, 0}}));
  auto rows = store->usage_by_day().value();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].model, "claude-sonnet-4-6");
  EXPECT_EQ(rows[0].requests, 2u);
  EXPECT_EQ(rows[0].usage, (Usage{350, 150, 1300, 200, 0.03}));
  EXPECT_EQ(rows[0].day, now_plus(0).substr(0, 10));
  EXPECT_EQ(rows[1].usage.cost_usd, 0.0);
}

TEST_F(MemorySqlite, AuditLogRoundTrip) {
  AuditRecord rec;
  rec.conversation_id = "c";
  rec.sender_id = "alice";
  rec.tool = "word_count";
  rec.arguments = Json{{"text", "a b"}};
  rec.result = "2";
  ASSERT_TRUE(store->record_tool_call(rec));
  rec.status = "maybe";
  EXPECT_FALSE(store->record_tool_call(rec));
  auto log = store->audit_log(10).value();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].tool, "word_count");
  EXPECT_EQ(log[0].arguments, (Json{{"text", "a b"}}));
  EXPECT_EQ(log[0].status, "ok");
  EXPECT_FALSE(log[0].timestamp.empty());
}

// ---- Backup ----

TEST_F(MemorySqlite, ExportImportRoundTrips) {
  const std::string conv = conversation(*store);
  ContextEntry call = ContextEntry::assistant("");
  call.tool_calls = {ToolCall{"c1", "calculate", Json{{"expression", "1+1"}}}};
  ASSERT_TRUE(store->append_messages(conv, {ContextEntry::user("add é 中"), call,
                                            ContextEntry::tool(ToolResult{"c1", "calculate", "2", false}),
                                            ContextEntry::assistant("2")}));
  ASSERT_TRUE(store->save_compaction_summary(conv, {"sum", 2}));
  ASSERT_TRUE(store->store_fact("alice", "name", "Alice"));
  ASSERT_TRUE(store->store_fact("alice", "gone", "x"));
  ASSERT_TRUE(store->soft_delete_fact("alice", "gone"));
  ASSERT_TRUE(store->store_lesson({"alice", "d", "r", "", 1, ""}));
  ASSERT_TRUE(store->store_outcome({"alice", "d", 1, "l", "conversation", "", ""}));
  ASSERT_TRUE(store->record_usage({conv, "alice", "m", "p", Usage{1, 2, 3, 4, 0.5}}));
  ASSERT_TRUE(store->record_tool_call({"", conv, "alice", "", "calculate", Json{{"expression", "1+1"}}, "2", "ok", ""}));
  auto t = task("Call John about the export", "2026-12-31 15:00:00");
  t.repeat = "weekly";
  auto id = store->create_task(t).value();
  ASSERT_TRUE(store->record_task_run({"", id, "2026-01-01 00:00:00", "", "completed", "done", std::nullopt, 7}));
  auto exported = store->export_json();
  ASSERT_TRUE(exported) << exported.error().describe();
  EXPECT_EQ((*exported)["messages"].size(), 4u);

  auto fresh = host.create_memory("sqlite", Json{{"path", (dir / "copy.db").string()}}).value();
  ASSERT_TRUE(fresh->import_json(*exported));
  EXPECT_EQ(fresh->export_json().value(), *exported);
  EXPECT_EQ(fresh->recent_messages(conv, 10).value(), store->recent_messages(conv, 10).value());
  // Recall works on imported data (the indexes are rebuilt by the import).
  EXPECT_EQ(fresh->recall({"add é", "alice", 5, "", 0, std::nullopt}).value().size(), 1u);
  // A second import collides on ids and imports nothing.
  auto again = fresh->import_json(*exported);
  ASSERT_FALSE(again);
  EXPECT_EQ(fresh->export_json().value(), *exported);
  auto junk = fresh->import_json(Json{{"format", "something"}});
  ASSERT_FALSE(junk);
  EXPECT_THAT(junk.error().describe(), HasSubstr("not a kernex memory export"));
  Json bad_column = *exported;
  bad_column["facts"][0]["colour"] = "red";
  auto empty = host.create_memory("sqlite", Json{{"path", (dir / "copy2.db").string()}}).value();
  auto rejected = empty->import_json(bad_column);
  ASSERT_FALSE(rejected);
  EXPECT_THAT(rejected.error().describe(), HasSubstr("unknown column 'colour'"));
  EXPECT_TRUE(empty->list_conversations({}).value().empty());  // nothing half-imported
}

// ---- Context assembly ----

TEST_F(MemorySqlite, ContextSectionsFromMemory) {
  const std::string old_conv = conversation(*store);
  ASSERT_TRUE(store->append_messages(old_conv, {ContextEntry::user("I keep forgetting the invoice for ACME"),
                                                ContextEntry::assistant("noted")}));
  ASSERT_TRUE(store->close_conversation(old_conv, std::string("Discussed the ACME invoice")));
  ASSERT_TRUE(store->store_fact("alice", "occupation", "pilot"));
  ASSERT_TRUE(store->store_fact("alice", "name", "Alice"));
  ASSERT_TRUE(store->store_fact("alice", "welcomed", "true"));
  ASSERT_TRUE(store->create_task(task("Send the ACME invoice", "2099-01-01 09:00:00")));
  ASSERT_TRUE(store->store_lesson({"alice", "style", "Be brief", "", 1, ""}));
  ASSERT_TRUE(store->store_outcome({"alice", "billing", 1, "invoice sent on time", "conversation", "", ""}));

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

TEST(MemorySections, RecallPreviewKeepsCharactersWhole) {
  std::string han;
  for (int i = 0; i < 100; ++i) han += "中";
  const std::string s = recall_section({RecallHit{"message", "c", 1, han, "2026-01-01 00:00:00"}});
  const std::string expected_preview = han.substr(0, 198) + "...";
  EXPECT_EQ(s, "Related past context:\n- [2026-01-01 00:00:00] User: " + expected_preview);
}

TEST(MemorySections, ProfileOrderAndSystemKeysHidden) {
  EXPECT_EQ(profile_section({{"active_project", "x"}, {"welcomed", "1"}}), "");
  EXPECT_EQ(profile_section({{"hobby", "chess"}, {"location", "Lyon"}, {"name", "Ana"}, {"pronouns", "she"}}),
            "User profile:\n- name: Ana\n- pronouns: she\n- location: Lyon\n- hobby: chess");
  Task t;
  t.id = "0123456789";
  t.spec.description = "deploy";
  t.spec.task_type = "action";
  t.spec.project = "web";
  t.spec.due_at = "2026-01-01 00:00:00";
  t.spec.repeat = "daily";
  EXPECT_EQ(tasks_section({t}), "User's scheduled tasks:\n- [01234567] deploy [action] (web) (due: 2026-01-01 00:00:00, daily)");
  EXPECT_EQ(outcomes_section({OutcomeRecord{"a", "d", -1, "l", "c", "", "2026-01-01 00:00:00"}}, "2026-01-03 01:00:00"),
            "Recent outcomes:\n- [-] d: l (2d ago)");
}

// ---- Through the kernel ----

class MemorySqliteKernel : public MemorySqlite {
 protected:
  std::unique_ptr<Kernel> kernel(const std::vector<std::string>& lines, Limits limits = {}, std::string project = "") {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.system_prompt = "BASE PROMPT";
    config.project = std::move(project);
    config.data_dir = dir / "kdata";
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                              {"record", (dir / "record.jsonl").string()}};
    config.memory = PluginRef{"sqlite", Json::object()};
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    config.limits = limits;
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    return k ? std::move(*k) : nullptr;
  }
  Json request(std::size_t i) { return Json::parse(testing::read_lines(dir / "record.jsonl").at(i)); }
  static std::string text(const std::string& t) { return Json{{"text", t}}.dump(); }
};

TEST_F(MemorySqliteKernel, DefectProjectKeyMismatch) {
  // kernex wrote exchanges under project "default" and read under "": no history, ever. The
  // store file lives in the kernel's data_dir, and a second kernel (a new process) sees it.
  {
    auto k = kernel({text("first answer")});
    ASSERT_TRUE(k->run(Request::from_text("u1", "hello")));
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "kdata" / "memory.db"));
  auto k = kernel({text("second answer")});
  ASSERT_TRUE(k->run(Request::from_text("u1", "again")));
  const Json messages = request(1)["messages"];
  ASSERT_EQ(messages.size(), 3u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "hello");
  EXPECT_EQ(messages[1]["content"], "first answer");
  EXPECT_EQ(messages[2]["content"], "again");
}

TEST_F(MemorySqliteKernel, DefectSummaryRecomputedEveryTurn) {
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  auto k = kernel({text("a1"), text("a2"), text("SUMMARY ONE"), text("a3"), text("SUMMARY TWO"), text("a4")}, limits);
  std::string conv;
  for (auto m : {"m1", "m2", "m3"}) conv = k->run(Request::from_text("u", m)).value().conversation_id;
  // Run 3 overflowed by two messages: summarised once, and the summary is kept in the store.
  EXPECT_NE(request(3)["system"].get<std::string>().find("[Earlier conversation summary]\nSUMMARY ONE"),
            std::string::npos);
  auto s = host.create_memory("sqlite", Json{{"path", (dir / "kdata" / "memory.db").string()}}).value();
  auto stored = s->compaction_summary(conv).value();
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->text, "SUMMARY ONE");
  EXPECT_EQ(stored->covered_messages, 2u);
  // Run 4 overflows by two more: only those are summarised, on top of the stored summary.
  ASSERT_TRUE(k->run(Request::from_text("u", "m4")));
  const std::string input = request(4)["messages"][0]["content"];
  EXPECT_NE(input.find("Summary so far:\nSUMMARY ONE"), std::string::npos) << input;
  EXPECT_EQ(input.find("m1"), std::string::npos) << input;
  EXPECT_EQ(s->compaction_summary(conv).value()->text, "SUMMARY TWO");
}

TEST_F(MemorySqliteKernel, ToolCallsSavedAuditedAndUsageRecorded) {
  Json call{{"tool_calls", {{{"id", "c1"}, {"name", "word_count"}, {"arguments", {{"text", "a b c"}}}}}},
            {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}};
  auto k = kernel({call.dump(), Json{{"text", "three"}, {"usage", {{"input_tokens", 20}, {"output_tokens", 2}}}}.dump()});
  auto run = k->run(Request::from_text("u", "count a b c"));
  ASSERT_TRUE(run) << run.error().describe();
  k.reset();
  auto s = host.create_memory("sqlite", Json{{"path", (dir / "kdata" / "memory.db").string()}}).value();
  auto messages = s->conversation_messages(run->conversation_id, 0, 10).value();
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1].entry.tool_calls.at(0).name, "word_count");
  ASSERT_TRUE(messages[2].entry.tool_result);
  EXPECT_EQ(messages[3].entry.content, "three");
  auto audit = s->audit_log(10).value();
  ASSERT_EQ(audit.size(), 1u);
  EXPECT_EQ(audit[0].tool, "word_count");
  EXPECT_EQ(audit[0].conversation_id, run->conversation_id);
  auto usage = s->usage_by_day().value();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].usage.input_tokens, 30u);
  EXPECT_EQ(usage[0].provider, "replay");
}

}  // namespace
}  // namespace kernex

namespace kernex {
namespace {

// `kernex run` twice in one data dir, then the memory subcommands over what it saved.
class MemoryCli : public ::testing::Test {
 protected:
  std::string sh(const std::string& args, int* status = nullptr) {
    const std::string cmd = std::string(KERNEX_CLI) + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int rc = ::pclose(p);
    if (status) *status = WEXITSTATUS(rc);
    return out;
  }
  std::string run(const std::string& script, const std::string& message) {
    return sh("run --config " KERNEX_SOURCE_DIR "/examples/demo/kernex.yaml --data-dir " + data.string() +
              " --provider-opt script=" KERNEX_SOURCE_DIR "/examples/demo/" + script + " '" + message + "'");
  }
  std::string memory(const std::string& args, const std::filesystem::path& d) {
    return sh("memory --config " KERNEX_SOURCE_DIR "/examples/demo/kernex.yaml --data-dir " + d.string() + " " + args);
  }
  TempDir dir;
  std::filesystem::path data = dir / "data";
};

TEST_F(MemoryCli, RunRemembersAndExportRoundTrips) {
  ASSERT_THAT(run("script.jsonl", "How many words are in a b c?"), HasSubstr("9 words"));
  ASSERT_THAT(run("followup.jsonl", "What did I ask you before?"), HasSubstr("earlier"));
  Json history = Json::parse(memory("history --json", data));
  ASSERT_EQ(history.size(), 1u) << history.dump();
  const Json& messages = history[0]["messages"];
  ASSERT_EQ(messages.size(), 6u);
  EXPECT_EQ(messages[0]["content"], "How many words are in a b c?");
  EXPECT_EQ(messages[1]["tool_calls"][0]["name"], "word_count");
  EXPECT_EQ(messages[4]["content"], "What did I ask you before?");

  Json hits = Json::parse(memory("search 'how many words' --json", data));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0]["source"], "message");
  EXPECT_EQ(Json::parse(memory("usage --json", data))[0]["requests"], 2);
  EXPECT_EQ(Json::parse(memory("facts --json", data)), Json::array());

  const std::string exported = memory("export --json", data);
  dir.write("backup.json", exported);
  int status = -1;
  sh("memory --data-dir " + (dir / "copy").string() + " import " + (dir / "backup.json").string(), &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(memory("export --json", dir / "copy"), exported);
  const std::string again = sh("memory --data-dir " + (dir / "copy").string() + " import " +
                               (dir / "backup.json").string(), &status);
  EXPECT_EQ(status, 8) << again;
  EXPECT_THAT(again, HasSubstr("nothing was"));
}

}  // namespace
}  // namespace kernex
