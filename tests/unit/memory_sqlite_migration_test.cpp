// The SQLite store's migrations on files an older kernex wrote: before tenants existed (the file
// opens, keeps every row, and every row is tenant local's: no other tenant sees any of it), and
// before batched recall indexing (010: recall still finds every old message).
#include <sqlite3.h>

#include <gtest/gtest.h>

#include "kernex/plugin_host.hpp"
#include "sqlite_raw.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::raw_int;

// The file's schema as migrations 001-006 left it: 007's tenant columns and indexes dropped, facts
// keyed by sender and key, and 007 not recorded as applied.
constexpr const char* kBeforeTenants = R"sql(
DROP INDEX conversations_scope;
DROP INDEX conversations_sender;
DROP INDEX token_usage_tenant;
DROP INDEX audit_log_tenant;
DROP INDEX scheduled_tasks_due;
DROP INDEX scheduled_tasks_lease;
DROP INDEX scheduled_tasks_sender;
DROP INDEX scheduled_tasks_retry;
DROP INDEX task_runs_task;
DROP INDEX lessons_scope;
DROP INDEX lessons_sender;
DROP INDEX outcomes_sender;
DROP INDEX outcomes_sender_newest;
ALTER TABLE conversations DROP COLUMN tenant;
ALTER TABLE token_usage DROP COLUMN tenant;
ALTER TABLE audit_log DROP COLUMN tenant;
ALTER TABLE scheduled_tasks DROP COLUMN tenant;
ALTER TABLE task_runs DROP COLUMN tenant;
ALTER TABLE lessons DROP COLUMN tenant;
ALTER TABLE outcomes DROP COLUMN tenant;
CREATE TABLE facts_old (
  sender_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')), updated_at TEXT NOT NULL DEFAULT (datetime('now')),
  deleted_at TEXT, PRIMARY KEY (sender_id, key));
INSERT INTO facts_old SELECT sender_id, key, value, created_at, updated_at, deleted_at FROM facts;
DROP TABLE facts;
ALTER TABLE facts_old RENAME TO facts;
CREATE INDEX conversations_scope ON conversations (channel, sender_id, project, status, last_activity);
CREATE INDEX conversations_sender ON conversations (sender_id, last_activity);
CREATE INDEX scheduled_tasks_due ON scheduled_tasks (status, due_at);
CREATE INDEX scheduled_tasks_lease ON scheduled_tasks (status, lease_until);
CREATE INDEX scheduled_tasks_sender ON scheduled_tasks (sender_id, status);
CREATE INDEX scheduled_tasks_retry ON scheduled_tasks (status, retry_at) WHERE retry_at IS NOT NULL;
CREATE INDEX task_runs_task ON task_runs (task_id, started_at DESC);
CREATE INDEX lessons_scope ON lessons (sender_id, domain, project, recency);
CREATE INDEX lessons_sender ON lessons (sender_id, project, recency);
CREATE INDEX outcomes_sender ON outcomes (sender_id, project, id);
CREATE INDEX outcomes_sender_newest ON outcomes (sender_id, id);
DELETE FROM _migrations WHERE name = '007_tenants';
)sql";

// The file's schema as migrations 001-009 left it: every user message in the full-text index (the
// ones waiting above the watermark indexed first), 002's triggers, 007's conversation indexes, and
// 010 not recorded as applied.
constexpr const char* kBeforeTurnWrites = R"sql(
INSERT INTO messages_fts (rowid, content) SELECT seq, content FROM messages
  WHERE seq > (SELECT seq FROM recall_watermark) AND role = 'user';
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update_old;
DROP TRIGGER messages_fts_update_new;
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN NEW.role = 'user' BEGIN
  INSERT INTO messages_fts (rowid, content) VALUES (NEW.seq, NEW.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN OLD.role = 'user' BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', OLD.seq, OLD.content);
END;
CREATE TRIGGER messages_fts_update_old AFTER UPDATE OF content, role ON messages WHEN OLD.role = 'user' BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', OLD.seq, OLD.content);
END;
CREATE TRIGGER messages_fts_update_new AFTER UPDATE OF content, role ON messages WHEN NEW.role = 'user' BEGIN
  INSERT INTO messages_fts (rowid, content) VALUES (NEW.seq, NEW.content);
END;
DROP TABLE recall_watermark;
DROP INDEX conversations_scope;
CREATE INDEX conversations_scope ON conversations (tenant, channel, sender_id, project, status, last_activity);
CREATE INDEX conversations_sender ON conversations (tenant, sender_id, last_activity);
DELETE FROM _migrations WHERE name = '010_turn_writes';
)sql";

void run_sql(const std::filesystem::path& path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

// Rewrites the file at `path` to the schema migrations 001-009 left (kBeforeTurnWrites).
void put_back_before_turn_writes(const std::filesystem::path& path) {
  ASSERT_NO_FATAL_FAILURE(run_sql(path, kBeforeTurnWrites));
}

// Rewrites the file at `path` to the schema migrations 001-006 left (kBeforeTenants).
void put_back_before_tenants(const std::filesystem::path& path) {
  ASSERT_NO_FATAL_FAILURE(put_back_before_turn_writes(path));
  ASSERT_NO_FATAL_FAILURE(run_sql(path, kBeforeTenants));
}

TEST(MemorySqliteMigration, RowsWrittenBeforeTenantsAreLocals) {
  testing::TempDir dir;
  const auto path = dir.path() / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  const Json options{{"path", path.string()}};
  const MemoryScope local = MemoryScope::local();
  std::string conv, task;
  {
    auto s = host.create_memory("sqlite", options).value();
    conv = s->open_conversation(local, {"cli", "alice", ""}, std::chrono::minutes(60)).value();
    ASSERT_TRUE(s->append_messages(local, conv, {ContextEntry::user("the old quokka words")}));
    ASSERT_TRUE(s->store_fact(local, "alice", "pet", "quokka"));
    ASSERT_TRUE(s->store_lesson(local, Lesson{"alice", "pets", "ask about the quokka", "", 1, ""}));
    ASSERT_TRUE(s->store_outcome(
        local, OutcomeRecord{"alice", "pets", 1, "quokka liked", "conversation", "", ""}));
    ASSERT_TRUE(s->record_usage(local, UsageRecord{conv, "alice", "m", "p", Usage{5, 1}}));
    TaskSpec t;
    t.channel = "cli";
    t.sender_id = "alice";
    t.reply_target = "chat";
    t.description = "feed the quokka";
    t.due_at = "2099-01-01 00:00:00";
    task = s->create_task(local, t).value();
  }
  ASSERT_NO_FATAL_FAILURE(put_back_before_tenants(path));

  auto s = host.create_memory("sqlite", options);
  ASSERT_TRUE(s) << s.error().describe();
  MemoryStore& store = **s;
  EXPECT_EQ(store.message_count(local, conv).value(), 1u);
  EXPECT_EQ(store.open_conversation(local, {"cli", "alice", ""}, std::chrono::minutes(60)).value(),
            conv);
  EXPECT_EQ(store.fact(local, "alice", "pet").value(), "quokka");
  EXPECT_EQ(store.lessons(local, "alice", std::nullopt).value().size(), 1u);
  EXPECT_EQ(store.recent_outcomes(local, "alice", 5, std::nullopt).value().size(), 1u);
  EXPECT_EQ(store.usage_by_day(local).value().size(), 1u);
  EXPECT_TRUE(store.task(local, task).value());
  EXPECT_EQ(store.recall(local, RecallQuery{"quokka words", "alice", 5, "", 0, std::nullopt})
                .value()
                .size(),
            1u);
  // The facts table keys by tenant now: another tenant's fact of the same sender and key is apart.
  const MemoryScope other = MemoryScope::of("alpha").value();
  ASSERT_TRUE(store.store_fact(other, "alice", "pet", "wombat"));
  EXPECT_EQ(store.fact(local, "alice", "pet").value(), "quokka");
  EXPECT_FALSE(store.message_count(other, conv));
  EXPECT_FALSE(store.task(other, task).value());
  EXPECT_TRUE(store.export_json(other).value().dump().find("quokka") == std::string::npos);
}

// kernex serve kept a tenant's conversations on channel "serve/<tenant>" before tenants were a
// column: the migration gives them (and their usage) to that tenant, so the tenant still reads and
// forgets its history, and local, the CLI's scope, never recalls it.
TEST(MemorySqliteMigration, ServeConversationsGoToTheirTenant) {
  testing::TempDir dir;
  const auto path = dir.path() / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  const Json options{{"path", path.string()}};
  const MemoryScope local = MemoryScope::local();
  std::string serve_conv, cli_conv;
  {
    auto s = host.create_memory("sqlite", options).value();
    serve_conv =
        s->open_conversation(local, {"serve/acme", "support", ""}, std::chrono::minutes(60))
            .value();
    ASSERT_TRUE(s->append_messages(local, serve_conv, {ContextEntry::user("acme card wombat")}));
    ASSERT_TRUE(s->record_usage(local, UsageRecord{serve_conv, "support", "m", "p", Usage{5, 1}}));
    cli_conv =
        s->open_conversation(local, {"cli", "support", ""}, std::chrono::minutes(60)).value();
    ASSERT_TRUE(s->append_messages(local, cli_conv, {ContextEntry::user("local card numbat")}));
  }
  ASSERT_NO_FATAL_FAILURE(put_back_before_tenants(path));

  auto s = host.create_memory("sqlite", options);
  ASSERT_TRUE(s) << s.error().describe();
  MemoryStore& store = **s;
  const MemoryScope acme = MemoryScope::of("acme").value();
  EXPECT_EQ(store.message_count(acme, serve_conv).value(), 1u);
  EXPECT_FALSE(store.message_count(local, serve_conv));
  EXPECT_EQ(store.message_count(local, cli_conv).value(), 1u);
  EXPECT_EQ(store.usage_by_day(acme).value().size(), 1u);
  EXPECT_TRUE(store.usage_by_day(local).value().empty());
  EXPECT_TRUE(
      store.recall(local, RecallQuery{"card", "support", 5, "", 0, std::nullopt}).value().size() ==
      1u);
  ASSERT_TRUE(store.delete_conversation(acme, serve_conv));
  EXPECT_TRUE(store.export_json(acme).value().dump().find("wombat") == std::string::npos);
}

// A file of migrations 001-009, its messages indexed by 002's triggers (one written by an older
// kernex after the others), upgrades to batched indexing: the watermark starts above every message,
// recall finds the old messages and the new, and the sender's queries lost no index.
TEST(MemorySqliteMigration, TurnWritesKeepRecallOfEveryOldMessage) {
  testing::TempDir dir;
  const auto path = dir.path() / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  const Json options{{"path", path.string()}};
  const MemoryScope local = MemoryScope::local();
  const ConversationKey alice{"cli", "alice", ""};
  std::string conv;
  {
    auto s = host.create_memory("sqlite", options).value();
    conv = s->open_conversation(local, alice, std::chrono::minutes(60)).value();
    ASSERT_TRUE(s->append_messages(local, conv, {ContextEntry::user("the old ibis words")}));
  }
  ASSERT_NO_FATAL_FAILURE(put_back_before_turn_writes(path));
  ASSERT_EQ(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'recall_watermark'"), 0);
  const std::string older_kernex =
      "INSERT INTO messages (conversation_id, role, content) VALUES ('" + conv +
      "', 'user', 'an egret before the upgrade')";
  ASSERT_EQ(raw_int(path, older_kernex), 0);

  auto s = host.create_memory("sqlite", options);
  ASSERT_TRUE(s) << s.error().describe();
  MemoryStore& store = **s;
  EXPECT_EQ(raw_int(path, "SELECT seq FROM recall_watermark"),
            raw_int(path, "SELECT max(seq) FROM messages"));
  EXPECT_EQ(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'conversations_sender'"),
            0);
  ASSERT_TRUE(store.close_conversation(local, conv, std::nullopt));
  const std::string next = store.open_conversation(local, alice, std::chrono::minutes(60)).value();
  ASSERT_TRUE(store.append_messages(local, next, {ContextEntry::user("a stork after it")}));
  const auto found = [&](const char* text, const std::string& current) {
    return store.recall(local, RecallQuery{text, "alice", 5, current, 0, std::nullopt})
        .value()
        .size();
  };
  EXPECT_EQ(found("ibis words", next), 1u);
  EXPECT_EQ(found("egret upgrade", next), 1u);
  EXPECT_EQ(found("stork", conv), 1u);
  EXPECT_EQ(store.recent_summaries(local, alice, next, 3).value().size(), 0u);
  ASSERT_TRUE(store.delete_conversation(local, conv));
  EXPECT_EQ(found("ibis words", next), 0u);
  EXPECT_EQ(raw_int(path, "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')"), 0);
}

// EXPLAIN QUERY PLAN of `sql`, one detail per line.
std::string query_plan(const std::filesystem::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  std::string plan;
  if (sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &st, nullptr) != SQLITE_OK)
    plan = std::string("prepare failed: ") + sqlite3_errmsg(db);
  while (st != nullptr && sqlite3_step(st) == SQLITE_ROW)
    plan += reinterpret_cast<const char*>(sqlite3_column_text(st, 3)) + std::string("\n");
  sqlite3_finalize(st);
  sqlite3_close(db);
  return plan;
}

// Migration 010 dropped conversations_sender: the queries that used it (a sender's conversations,
// with or without the channel) and the ones a turn runs still search an index, none scans a table.
TEST(MemorySqliteMigration, TheSendersQueriesStillSearchAnIndex) {
  testing::TempDir dir;
  const auto path = dir.path() / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  ASSERT_TRUE(host.create_memory("sqlite", Json{{"path", path.string()}}));
  const char* queries[] = {
      // open_conversation
      "SELECT id FROM conversations WHERE tenant = ? AND channel = ? AND sender_id = ? AND project "
      "= ? AND status = 'active' AND last_activity > datetime('now', ?) ORDER BY last_activity "
      "DESC, rowid DESC LIMIT 1",
      // recent_summaries
      "SELECT s.conversation_id, s.text FROM summaries s JOIN conversations c ON c.id = "
      "s.conversation_id WHERE c.tenant = ? AND c.channel = ? AND c.sender_id = ? AND "
      "s.conversation_id != ?",
      // recall's check of the sources worth searching
      "SELECT EXISTS (SELECT 1 FROM conversations c JOIN messages m ON m.conversation_id = c.id "
      "WHERE c.tenant = ?3 AND c.sender_id = ?1 AND m.role = 'user'), EXISTS (SELECT 1 FROM "
      "conversations c JOIN summaries s ON s.conversation_id = c.id WHERE c.tenant = ?3 AND "
      "c.sender_id = ?1 AND c.id != ?2)",
      // recall's check of the messages waiting above the watermark
      "SELECT EXISTS (SELECT 1 FROM messages m CROSS JOIN conversations c ON c.id = "
      "m.conversation_id WHERE m.seq > (SELECT seq FROM recall_watermark) AND m.role = 'user' AND "
      "c.tenant = ?1 AND (?2 = '' OR c.sender_id = ?2) AND NOT (m.conversation_id = ?3 AND m.seq "
      ">= ?4))",
      // list_conversations
      "SELECT c.id FROM conversations c LEFT JOIN summaries s ON s.conversation_id = c.id WHERE "
      "c.tenant = ?4 AND (?1 IS NULL OR c.channel = ?1) AND (?2 IS NULL OR c.sender_id = ?2) "
      "ORDER BY c.last_activity DESC, c.rowid DESC LIMIT ?3",
  };
  for (const char* sql : queries) {
    const std::string plan = query_plan(path, sql);
    EXPECT_EQ(plan.find("prepare failed"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("SCAN c"), std::string::npos) << sql << "\n" << plan;
    EXPECT_EQ(plan.find("SCAN m"), std::string::npos) << sql << "\n" << plan;
    EXPECT_EQ(plan.find("SCAN s"), std::string::npos) << sql << "\n" << plan;
  }
  EXPECT_NE(query_plan(path, queries[2]).find("conversations_scope (tenant=? AND sender_id=?)"),
            std::string::npos);
}

}  // namespace
}  // namespace kernex
