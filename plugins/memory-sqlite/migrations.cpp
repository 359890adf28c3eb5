#include "migrations.hpp"

#include <set>
#include <string>

namespace kernex::sqlite {
namespace {

struct Migration {
  const char* name;
  const char* sql;
};

// Appended to, never edited: a file that applied a migration keeps its name in `_migrations`.
constexpr Migration kMigrations[] = {
    {"001_conversations", R"sql(
CREATE TABLE conversations (
  id TEXT PRIMARY KEY,
  channel TEXT NOT NULL,
  sender_id TEXT NOT NULL,
  project TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
  started_at TEXT NOT NULL DEFAULT (datetime('now')),
  last_activity TEXT NOT NULL DEFAULT (datetime('now')),
  message_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX conversations_scope ON conversations (channel, sender_id, project, status, last_activity);
CREATE INDEX conversations_sender ON conversations (sender_id, last_activity);
-- seq, not a timestamp, orders messages: a user/assistant pair saved within one second keeps its order.
CREATE TABLE messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  conversation_id TEXT NOT NULL REFERENCES conversations (id),
  role TEXT NOT NULL,
  content TEXT NOT NULL,
  tool_calls TEXT,
  tool_result TEXT,
  provider_state TEXT,
  created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX messages_conversation ON messages (conversation_id, seq);
CREATE TABLE summaries (
  id INTEGER PRIMARY KEY,
  conversation_id TEXT NOT NULL UNIQUE REFERENCES conversations (id),
  text TEXT NOT NULL,
  covered_messages INTEGER NOT NULL DEFAULT 0,
  updated_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE TABLE facts (
  sender_id TEXT NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  updated_at TEXT NOT NULL DEFAULT (datetime('now')),
  deleted_at TEXT,
  PRIMARY KEY (sender_id, key)
);
CREATE TABLE token_usage (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  conversation_id TEXT NOT NULL,
  sender_id TEXT NOT NULL,
  model TEXT NOT NULL,
  provider TEXT NOT NULL,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens INTEGER NOT NULL DEFAULT 0,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0,
  cost_usd REAL NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX token_usage_time ON token_usage (created_at);
CREATE TABLE audit_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  conversation_id TEXT NOT NULL,
  sender_id TEXT NOT NULL,
  agent TEXT NOT NULL DEFAULT '',
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  result TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL CHECK (status IN ('ok', 'error', 'denied')),
  reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_time ON audit_log (created_at);
)sql"},
    {"002_recall", R"sql(
-- Recall indexes user messages (assistant text repeats the model, not the user) and summaries.
CREATE VIRTUAL TABLE messages_fts USING fts5 (content, content = 'messages', content_rowid = 'seq');
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
CREATE VIRTUAL TABLE summaries_fts USING fts5 (text, content = 'summaries', content_rowid = 'id');
CREATE TRIGGER summaries_fts_insert AFTER INSERT ON summaries BEGIN
  INSERT INTO summaries_fts (rowid, text) VALUES (NEW.id, NEW.text);
END;
CREATE TRIGGER summaries_fts_delete AFTER DELETE ON summaries BEGIN
  INSERT INTO summaries_fts (summaries_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text);
END;
CREATE TRIGGER summaries_fts_update AFTER UPDATE OF text ON summaries BEGIN
  INSERT INTO summaries_fts (summaries_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text);
  INSERT INTO summaries_fts (rowid, text) VALUES (NEW.id, NEW.text);
END;
)sql"},
    {"003_tasks", R"sql(
CREATE TABLE scheduled_tasks (
  id TEXT PRIMARY KEY,
  channel TEXT NOT NULL,
  sender_id TEXT NOT NULL,
  reply_target TEXT NOT NULL,
  description TEXT NOT NULL,
  due_at TEXT NOT NULL,
  repeat TEXT,
  task_type TEXT NOT NULL DEFAULT 'reminder',
  project TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'claimed', 'delivered', 'failed', 'cancelled')),
  retry_count INTEGER NOT NULL DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 3,
  last_error TEXT,
  claimed_by TEXT,
  lease_until TEXT,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  delivered_at TEXT
);
CREATE INDEX scheduled_tasks_due ON scheduled_tasks (status, due_at);
CREATE INDEX scheduled_tasks_lease ON scheduled_tasks (status, lease_until);
CREATE INDEX scheduled_tasks_sender ON scheduled_tasks (sender_id, status);
CREATE TABLE task_runs (
  id TEXT PRIMARY KEY,
  task_id TEXT NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT NOT NULL DEFAULT (datetime('now')),
  status TEXT NOT NULL CHECK (status IN ('completed', 'failed')),
  result TEXT,
  error TEXT,
  tokens INTEGER
);
CREATE INDEX task_runs_task ON task_runs (task_id, started_at DESC);
)sql"},
    {"004_learning", R"sql(
-- recency orders rules: a reinforced rule moves to the front even within the same second.
CREATE TABLE lessons (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sender_id TEXT NOT NULL,
  domain TEXT NOT NULL,
  rule TEXT NOT NULL,
  project TEXT NOT NULL DEFAULT '',
  occurrences INTEGER NOT NULL DEFAULT 1,
  recency INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  updated_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX lessons_scope ON lessons (sender_id, domain, project, recency);
CREATE INDEX lessons_sender ON lessons (sender_id, project, recency);
CREATE TABLE outcomes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  sender_id TEXT NOT NULL,
  domain TEXT NOT NULL,
  score INTEGER NOT NULL CHECK (score IN (-1, 0, 1)),
  lesson TEXT NOT NULL,
  source TEXT NOT NULL DEFAULT 'conversation',
  project TEXT NOT NULL DEFAULT ''
);
CREATE INDEX outcomes_sender ON outcomes (sender_id, project, id);
)sql"},
    {"005_task_retry_at", R"sql(
-- A failed attempt's retry time, apart from the scheduled occurrence in due_at (fail_task moved
-- due_at itself before, so a recurring task kept the retry's time of day). NULL: no retry pending.
-- A task that drifted before this migration keeps its time: the original one was not recorded.
ALTER TABLE scheduled_tasks ADD COLUMN retry_at TEXT;
CREATE INDEX scheduled_tasks_retry ON scheduled_tasks (status, retry_at) WHERE retry_at IS NOT NULL;
)sql"},
    {"006_outcomes_newest", R"sql(
-- A sender's newest outcomes of every project, read each turn straight from this index (the
-- (sender_id, project, id) one sorted them in a temporary b-tree).
CREATE INDEX outcomes_sender_newest ON outcomes (sender_id, id);
)sql"},
    {"007_tenants", R"sql(
-- Every row belongs to one tenant; rows written before tenants existed are the local tenant's.
-- Messages and summaries belong to their conversation's tenant. Indexes lead with the tenant,
-- so a scoped query reads only its tenant's rows.
ALTER TABLE conversations ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
DROP INDEX conversations_scope;
DROP INDEX conversations_sender;
CREATE INDEX conversations_scope ON conversations (tenant, channel, sender_id, project, status, last_activity);
CREATE INDEX conversations_sender ON conversations (tenant, sender_id, last_activity);
CREATE TABLE facts_scoped (
  tenant TEXT NOT NULL DEFAULT 'local',
  sender_id TEXT NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  updated_at TEXT NOT NULL DEFAULT (datetime('now')),
  deleted_at TEXT,
  PRIMARY KEY (tenant, sender_id, key)
);
INSERT INTO facts_scoped (tenant, sender_id, key, value, created_at, updated_at, deleted_at)
  SELECT 'local', sender_id, key, value, created_at, updated_at, deleted_at FROM facts;
DROP TABLE facts;
ALTER TABLE facts_scoped RENAME TO facts;
ALTER TABLE token_usage ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
CREATE INDEX token_usage_tenant ON token_usage (tenant, created_at);
ALTER TABLE audit_log ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
CREATE INDEX audit_log_tenant ON audit_log (tenant, id);
ALTER TABLE scheduled_tasks ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
DROP INDEX scheduled_tasks_due;
DROP INDEX scheduled_tasks_lease;
DROP INDEX scheduled_tasks_sender;
DROP INDEX scheduled_tasks_retry;
CREATE INDEX scheduled_tasks_due ON scheduled_tasks (tenant, status, due_at);
CREATE INDEX scheduled_tasks_lease ON scheduled_tasks (tenant, status, lease_until);
CREATE INDEX scheduled_tasks_sender ON scheduled_tasks (tenant, sender_id, status);
CREATE INDEX scheduled_tasks_retry ON scheduled_tasks (tenant, status, retry_at) WHERE retry_at IS NOT NULL;
ALTER TABLE task_runs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
DROP INDEX task_runs_task;
CREATE INDEX task_runs_task ON task_runs (tenant, task_id, started_at DESC);
ALTER TABLE lessons ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
DROP INDEX lessons_scope;
DROP INDEX lessons_sender;
CREATE INDEX lessons_scope ON lessons (tenant, sender_id, domain, project, recency);
CREATE INDEX lessons_sender ON lessons (tenant, sender_id, project, recency);
ALTER TABLE outcomes ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
DROP INDEX outcomes_sender;
DROP INDEX outcomes_sender_newest;
CREATE INDEX outcomes_sender ON outcomes (tenant, sender_id, project, id);
CREATE INDEX outcomes_sender_newest ON outcomes (tenant, sender_id, id);
-- kernex serve kept each tenant's conversations on channel 'serve/<tenant>' before tenants were a
-- column: those rows (and their usage and audit rows) go to that tenant, not to 'local', so the
-- tenant still reads and forgets them and 'local' never recalls them.
UPDATE conversations SET tenant = substr(channel, 7)
 WHERE channel LIKE 'serve/%' AND length(channel) BETWEEN 7 AND 70
   AND substr(channel, 7) NOT GLOB '*[^A-Za-z0-9_.-]*';
UPDATE token_usage SET tenant = (SELECT c.tenant FROM conversations c WHERE c.id = conversation_id)
 WHERE conversation_id IN (SELECT id FROM conversations WHERE tenant <> 'local');
UPDATE audit_log SET tenant = (SELECT c.tenant FROM conversations c WHERE c.id = conversation_id)
 WHERE conversation_id IN (SELECT id FROM conversations WHERE tenant <> 'local');
)sql"},
    {"008_saved_exchanges", R"sql(
-- The keys of saved exchanges (ExchangeRecord::idempotency_key): a host saving a run's exchange
-- again after a crash finds it saved. They go with their conversation.
CREATE TABLE saved_exchanges (
  tenant TEXT NOT NULL,
  key TEXT NOT NULL,
  conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
  PRIMARY KEY (tenant, key)
);
CREATE INDEX saved_exchanges_conversation ON saved_exchanges (conversation_id);
)sql"},
    {"009_no_unread_time_indexes", R"sql(
-- Usage and audit rows are read by tenant (token_usage_tenant, audit_log_tenant) or by
-- conversation; nothing reads them by time alone. These two cost every turn two index inserts.
DROP INDEX IF EXISTS token_usage_time;
DROP INDEX IF EXISTS audit_log_time;
)sql"},
    {"010_turn_writes", R"sql(
-- A turn wrote 19 pages, 6 of them the full-text index of its one user message (FTS5 writes a
-- segment, its structure record and its size rows per transaction). User messages are now
-- indexed in batches: every user message with seq <= recall_watermark.seq is in messages_fts,
-- none above it is. The store indexes those above it every few dozen messages, and before a
-- recall that could match one of them (outside the asking conversation's history window); a
-- crash leaves them above the mark, indexed later. A row written below the mark (an import
-- restoring old seqs) is indexed at once by the trigger, as before.
CREATE TABLE recall_watermark (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL);
INSERT INTO recall_watermark (id, seq) SELECT 1, coalesce(max(seq), 0) FROM messages;
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update_old;
DROP TRIGGER messages_fts_update_new;
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
  WHEN NEW.role = 'user' AND NEW.seq <= (SELECT seq FROM recall_watermark) BEGIN
  INSERT INTO messages_fts (rowid, content) VALUES (NEW.seq, NEW.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
  WHEN OLD.role = 'user' AND OLD.seq <= (SELECT seq FROM recall_watermark) BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', OLD.seq, OLD.content);
END;
CREATE TRIGGER messages_fts_update_old AFTER UPDATE OF content, role ON messages
  WHEN OLD.role = 'user' AND OLD.seq <= (SELECT seq FROM recall_watermark) BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', OLD.seq, OLD.content);
END;
CREATE TRIGGER messages_fts_update_new AFTER UPDATE OF content, role ON messages
  WHEN NEW.role = 'user' AND NEW.seq <= (SELECT seq FROM recall_watermark) BEGIN
  INSERT INTO messages_fts (rowid, content) VALUES (NEW.seq, NEW.content);
END;
-- A new conversation wrote three index entries: the sender's queries (recall's source check, a
-- sender's summaries) lead with the same columns as the scope's once the sender comes first.
DROP INDEX conversations_sender;
DROP INDEX conversations_scope;
CREATE INDEX conversations_scope ON conversations (tenant, sender_id, channel, project, status, last_activity);
)sql"},
};

Result<std::set<std::string>> applied(Db& db) {
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db.prepare("SELECT name FROM _migrations"));
  std::set<std::string> names;
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
    if (!row) break;
    names.insert(stmt.text(0));
  }
  return names;
}

}  // namespace

Result<void> migrate(Db& db) {
  if (auto r = db.exec("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, "
                       "applied_at TEXT NOT NULL DEFAULT (datetime('now')))");
      !r) {
    return r;
  }
  KERNEX_ASSIGN_OR_RETURN(auto done, applied(db));
  for (const auto& m : kMigrations) {
    if (done.contains(m.name)) continue;
    auto r = db.write<void>([&]() -> Result<void> {
      // Another process may have applied it since we looked: check under the write lock.
      KERNEX_ASSIGN_OR_RETURN(auto check, db.prepare("SELECT 1 FROM _migrations WHERE name = ?"));
      check.bind(1, m.name);
      KERNEX_ASSIGN_OR_RETURN(auto exists, check.step());
      if (exists) return {};
      if (auto ran = db.exec(m.sql); !ran) return ran;
      KERNEX_ASSIGN_OR_RETURN(auto record, db.prepare("INSERT INTO _migrations (name) VALUES (?)"));
      record.bind(1, m.name);
      KERNEX_RETURN_IF_ERROR(record.run());
      return {};
    });
    if (!r)
      return fail(ErrorCode::Memory, std::string("memory-sqlite: migration ") + m.name + " failed",
                  r.error());
  }
  return {};
}

}  // namespace kernex::sqlite
