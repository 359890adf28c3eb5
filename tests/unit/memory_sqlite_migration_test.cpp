// The SQLite store's tenant migration on a file written before tenants existed: the file opens,
// keeps every row, and every row is tenant local's (no other tenant sees any of it).
#include <sqlite3.h>

#include <gtest/gtest.h>

#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

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

// Rewrites the file at `path` to the schema migrations 001-006 left (kBeforeTenants).
void put_back_before_tenants(const std::filesystem::path& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, kBeforeTenants, nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message;
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

}  // namespace
}  // namespace kernex
