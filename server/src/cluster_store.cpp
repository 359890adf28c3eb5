#include "cluster_store.hpp"

#include "cluster_ops_schema.hpp"
#include "run_executor.hpp"
#include "stored_json.hpp"

namespace kernex::server {
namespace {

using pg::Connection;
using pg::Rows;

// Versioned like the memory store's schema: migration N runs once, in order, under an advisory
// lock, and a database newer than this server is refused (approvals and the webhook outbox come
// as later versions).
struct ClusterMigration {
  int version;
  const char* sql;
};
constexpr ClusterMigration kClusterMigrations[] = {{1, R"SQL(
CREATE TABLE serve_runs (
  seq BIGSERIAL UNIQUE,
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  session TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at TEXT NOT NULL,
  request TEXT NOT NULL,
  result TEXT,
  node TEXT,
  attempt INTEGER NOT NULL DEFAULT 0,
  lease_until TIMESTAMPTZ,
  cancel_requested BOOLEAN NOT NULL DEFAULT false,
  enqueued_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  started_at TIMESTAMPTZ,
  ended_at TIMESTAMPTZ);
CREATE INDEX serve_runs_by_session ON serve_runs (tenant, session, seq);
CREATE INDEX serve_runs_queued ON serve_runs (seq) WHERE status = 'queued';
CREATE INDEX serve_runs_leases ON serve_runs (lease_until) WHERE status = 'running';
CREATE INDEX serve_runs_by_node ON serve_runs (node) WHERE status = 'running';
CREATE UNIQUE INDEX serve_runs_one_running ON serve_runs (tenant, session)
  WHERE status = 'running' AND session <> '';
CREATE TABLE serve_run_events (
  run_id TEXT NOT NULL REFERENCES serve_runs (id) ON DELETE CASCADE,
  seq BIGINT NOT NULL,
  name TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (run_id, seq));
)SQL"},
                                                   {2, R"SQL(
CREATE TABLE serve_run_responses (
  tenant TEXT NOT NULL,
  run_id TEXT NOT NULL REFERENCES serve_runs (id) ON DELETE CASCADE,
  turn INTEGER NOT NULL,
  response TEXT NOT NULL,
  PRIMARY KEY (run_id, turn));
CREATE TABLE serve_run_tools (
  tenant TEXT NOT NULL,
  run_id TEXT NOT NULL REFERENCES serve_runs (id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  call TEXT NOT NULL,
  result TEXT,
  PRIMARY KEY (run_id, key));
CREATE TABLE serve_approvals (
  seq BIGSERIAL UNIQUE,
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  session TEXT NOT NULL,
  run_id TEXT NOT NULL REFERENCES serve_runs (id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  reason TEXT NOT NULL,
  status TEXT NOT NULL,
  decision TEXT NOT NULL DEFAULT '',
  decision_reason TEXT NOT NULL DEFAULT '',
  edited_arguments TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  resolved_at BIGINT NOT NULL DEFAULT 0,
  UNIQUE (run_id, key));
CREATE INDEX serve_approvals_by_session ON serve_approvals (tenant, session, status);
CREATE INDEX serve_approvals_pending ON serve_approvals (expires_at) WHERE status = 'pending';
CREATE TABLE serve_approval_grants (
  tenant TEXT NOT NULL,
  session TEXT NOT NULL,
  tool TEXT NOT NULL,
  PRIMARY KEY (tenant, session, tool));
)SQL"}};

Result<bool> migrate(Connection& c) {
  KERNEX_RETURN_IF_ERROR(lock_schema(c, 7291000));
  if (auto r = c.script("CREATE TABLE IF NOT EXISTS serve_schema_version (version INT PRIMARY KEY, "
                        "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
      !r) {
    return std::unexpected(r.error());
  }
  KERNEX_ASSIGN_OR_RETURN(auto have,
                          c.exec("SELECT COALESCE(MAX(version), 0) FROM serve_schema_version"));
  const std::int64_t current = have.int64(0, 0);
  const int newest = kClusterMigrations[std::size(kClusterMigrations) - 1].version;
  if (current > newest) {
    return fail(ErrorCode::Memory, "serve run store: the database's schema is version " +
                                       std::to_string(current) + ", newer than this kernex (" +
                                       std::to_string(newest) + "): upgrade kernex");
  }
  for (const auto& m : kClusterMigrations) {
    if (m.version <= current) continue;
    KERNEX_RETURN_IF_ERROR(c.script(m.sql));
    if (auto r = c.exec("INSERT INTO serve_schema_version (version) VALUES ($1::int)", {m.version});
        !r) {
      return std::unexpected(r.error());
    }
  }
  return true;
}

constexpr const char* kRunColumns =
    "id, tenant, session, status, created_at, COALESCE(node, ''), attempt, cancel_requested, "
    "request, "
    "COALESCE(result, '')";

SharedRun read_run(const Rows& r, int row) {
  SharedRun s;
  s.id = r.text(row, 0);
  s.tenant = r.text(row, 1);
  s.session = r.text(row, 2);
  s.status = r.text(row, 3);
  s.created_at = r.text(row, 4);
  s.node = r.text(row, 5);
  s.attempt = static_cast<int>(r.int64(row, 6));
  s.cancel_requested = r.boolean(row, 7);
  s.request = stored_json(r.text(row, 8));
  s.result = stored_json(r.text(row, 9));
  return s;
}

std::vector<RunEvent> read_events(const Rows& r) {
  std::vector<RunEvent> out;
  for (int i = 0; i < r.size(); ++i) {
    Json data = stored_json(r.text(i, 2));
    out.push_back(RunEvent{static_cast<std::uint64_t>(r.int64(i, 0)), r.text(i, 1),
                           data.is_null() ? Json::object() : std::move(data)});
  }
  return out;
}

// A text[] literal: {"a","b"} with quotes and backslashes escaped.
std::string text_array(const std::vector<std::string>& items) {
  std::string out = "{";
  for (const auto& item : items) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char ch : item) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  return out + "}";
}

// One JSON array parameter instead of a statement per event: [{seq, name, data(text)}].
pg::Statement events_statement(const std::string& id, const std::vector<RunEvent>& events) {
  Json rows = Json::array();
  for (const auto& e : events)
    rows.push_back({{"seq", e.id}, {"name", e.name}, {"data", stored_text(e.data)}});
  return {
      "INSERT INTO serve_run_events (run_id, seq, name, data) "
      "SELECT $1, (e->>'seq')::bigint, e->>'name', e->>'data' "
      "FROM json_array_elements($2::json) e "
      "ON CONFLICT (run_id, seq) DO NOTHING",
      {id, stored_text(rows)}};
}

Result<void> insert_events(Connection& c, const std::string& id,
                           const std::vector<RunEvent>& events) {
  if (events.empty()) return {};
  const pg::Statement st = events_statement(id, events);
  KERNEX_RETURN_IF_ERROR(c.exec(st.sql, st.params));
  return {};
}

// An event after the stored ones, from whoever is not the run's executor (cancel, reaper).
Result<void> append_one(Connection& c, const std::string& id, const std::string& name,
                        const Json& data) {
  KERNEX_RETURN_IF_ERROR(
      c.exec("INSERT INTO serve_run_events (run_id, seq, name, data) "
             "SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3 FROM serve_run_events WHERE run_id = $1",
             {id, name, stored_text(data)}));
  return {};
}

Result<void> notify(Connection& c, const char* channel, const std::string& payload) {
  KERNEX_RETURN_IF_ERROR(c.exec("SELECT pg_notify($1, $2)", {channel, payload}));
  return {};
}

// Cancels one queued run, or one awaiting approval (row locked by the caller): status, result,
// its run_end event, and its pending approvals denied.
Result<void> cancel_queued(Connection& c, const std::string& id, const std::string& session,
                           const ClusterHooks& hooks) {
  const Json body = cancelled_result(id, session);
  if (hooks.run_end) KERNEX_RETURN_IF_ERROR(hooks.run_end(c, id, RunStatus::Cancelled, body));
  KERNEX_RETURN_IF_ERROR(
      c.exec(std::string("UPDATE serve_approvals SET status = 'denied', decision = 'deny', "
                         "decision_reason = 'the run was cancelled', resolved_at = ") +
                 ClusterStore::kEpochNow + " WHERE run_id = $1 AND status = 'pending'",
             {id}));
  KERNEX_RETURN_IF_ERROR(
      c.exec("UPDATE serve_runs SET status = 'cancelled', result = $2, "
             "ended_at = clock_timestamp() WHERE "
             "id = $1",
             {id, stored_text(body)}));
  if (auto e = append_one(c, id, "run_end", body); !e) return e;
  return notify(c, ClusterStore::kEventsChannel, id);
}

Result<void> lock_session(Connection& c, const std::string& tenant, const std::string& session) {
  auto r =
      c.exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 7291))", {tenant + '\n' + session});
  if (!r) return std::unexpected(r.error());
  return {};
}

// Cancels the session's queued runs and flags its running one (the session lock is held).
Result<void> interrupt_session(Connection& c, const std::string& tenant, const std::string& session,
                               const ClusterHooks& hooks) {
  KERNEX_ASSIGN_OR_RETURN(
      auto active,
      c.exec("SELECT id, status FROM serve_runs WHERE tenant = $1 AND session = $2 "
             "AND status IN ('queued', 'running', 'awaiting_approval') ORDER BY seq FOR UPDATE",
             {tenant, session}));
  for (int i = 0; i < active.size(); ++i) {
    const std::string id = active.text(i, 0);
    if (active.text(i, 1) != "running") {
      if (auto r = cancel_queued(c, id, session, hooks); !r) return r;
      continue;
    }
    if (auto r = c.exec("UPDATE serve_runs SET cancel_requested = true WHERE id = $1", {id}); !r) {
      return std::unexpected(r.error());
    }
    if (auto r = notify(c, ClusterStore::kCancelChannel, id); !r) return r;
  }
  return {};
}

}  // namespace

pg::Statement requeue_statement(const std::string& run_id) {
  return {
      "WITH q AS (UPDATE serve_runs SET status = 'queued' WHERE id = $1 AND status = "
      "'awaiting_approval' AND NOT EXISTS (SELECT 1 FROM serve_approvals a WHERE "
      "a.run_id = $1 AND a.status = 'pending') RETURNING id) "
      "SELECT pg_notify($2, id), pg_notify($3, '') FROM q",
      {run_id, ClusterStore::kEventsChannel, ClusterStore::kQueueChannel}};
}

Result<bool> requeue_if_decided(Connection& c, const std::string& run_id) {
  const pg::Statement st = requeue_statement(run_id);
  KERNEX_ASSIGN_OR_RETURN(auto r, c.exec(st.sql, st.params));
  return !r.empty();
}

Result<std::unique_ptr<ClusterStore>> ClusterStore::open(const pg::Options& options,
                                                         std::size_t pool_size) {
  std::unique_ptr<ClusterStore> store(new ClusterStore(options, pool_size));
  KERNEX_RETURN_IF_ERROR(store->pool_.transaction<bool>(migrate));
  KERNEX_RETURN_IF_ERROR(store->pool_.transaction<bool>(migrate_cluster_ops));
  return store;
}

// A run's creation as one write of the run path's batches: the session's lock, the busy check and
// the row in one statement (its NOTIFY only when the row went in). The lock is held to the batch's
// commit, so another node deciding for the session waits for it, as with a transaction of its own.
Result<ClusterStore::Admitted> ClusterStore::submit_batched(const SharedRun& run, IfBusy if_busy) {
  pg::Write w;
  if (!run.session.empty()) {
    w.statements.push_back({"SELECT pg_advisory_xact_lock(hashtextextended($1, 7291))",
                            {run.tenant + '\n' + run.session}});
  }
  const bool reject = if_busy == IfBusy::Reject && !run.session.empty();
  w.statements.push_back(
      {std::string("WITH ins AS (INSERT INTO serve_runs (id, tenant, session, status, created_at, "
                   "request) SELECT $1, $2, $3, 'queued', $4, $5") +
           (reject ? " WHERE NOT EXISTS (SELECT 1 FROM serve_runs WHERE tenant = $2 AND session = "
                     "$3 AND status IN ('queued', 'running', 'awaiting_approval'))"
                   : "") +
           " RETURNING id) SELECT pg_notify($6, '') FROM ins",
       {run.id, run.tenant, run.session, run.created_at, stored_text(run.request), kQueueChannel}});
  // Set by the check on the writer's thread, read here once the write returned. A busy session
  // keeps the write (nothing went in): no rerun of the batch for it.
  auto inserted = std::make_shared<bool>(false);
  w.check = [inserted](const std::vector<pg::Rows>& rows) -> Result<bool> {
    *inserted = !rows.empty() && !rows.back().empty();
    return true;
  };
  KERNEX_RETURN_IF_ERROR(writer_.write(w));
  return *inserted ? Admitted::Queued : Admitted::Busy;
}

Result<ClusterStore::Admitted> ClusterStore::submit(const SharedRun& run, IfBusy if_busy,
                                                    LimitRefusal* refused) {
  // Limits decide in C++ on what they read under their lock, and interrupting cancels runs one by
  // one through the run-end hook (the webhook outbox): both need a transaction of their own.
  if (!hooks_.admit && if_busy != IfBusy::Interrupt) return submit_batched(run, if_busy);
  return pool_.transaction<Admitted>([&](Connection& c) -> Result<Admitted> {
    if (!run.session.empty()) {
      KERNEX_RETURN_IF_ERROR(lock_session(c, run.tenant, run.session));
      if (if_busy == IfBusy::Reject) {
        auto busy = c.exec(
            "SELECT 1 FROM serve_runs WHERE tenant = $1 AND session = $2 "
            "AND status IN ('queued', 'running', 'awaiting_approval') LIMIT 1",
            {run.tenant, run.session});
        if (!busy) return std::unexpected(busy.error());
        if (!busy->empty()) return Admitted::Busy;
      } else if (if_busy == IfBusy::Interrupt) {
        KERNEX_RETURN_IF_ERROR(interrupt_session(c, run.tenant, run.session, hooks_));
      }
    }
    if (hooks_.admit) {
      KERNEX_ASSIGN_OR_RETURN(auto refusal, hooks_.admit(c, run.tenant));
      if (refusal) {
        if (refused) *refused = std::move(*refusal);
        return Admitted::Limited;
      }
    }
    KERNEX_RETURN_IF_ERROR(
        c.exec("INSERT INTO serve_runs (id, tenant, session, status, created_at, request) "
               "VALUES ($1, $2, $3, 'queued', $4, $5)",
               {run.id, run.tenant, run.session, run.created_at, stored_text(run.request)}));
    KERNEX_RETURN_IF_ERROR(notify(c, kQueueChannel, ""));
    return Admitted::Queued;
  });
}

Result<std::optional<ClaimedRun>> ClusterStore::claim(const std::string& node,
                                                      std::chrono::seconds lease) {
  // One transaction: a claim whose earlier events could not be read is not taken.
  using Claim = std::optional<ClaimedRun>;
  return pool_.transaction<Claim>([&](Connection& c) -> Result<Claim> {
    // The subquery skips rows other claimers hold; the outer status check re-reads the row once
    // locked. The unique index settles two nodes claiming two runs of one session at once.
    auto claimed = c.exec(
        std::string(
            "UPDATE serve_runs SET status = 'running', node = $1, attempt = attempt + 1, "
            "lease_until = clock_timestamp() + make_interval(secs => $2::double precision), "
            "started_at = clock_timestamp() "
            "WHERE id = (SELECT r.id FROM serve_runs r WHERE r.status = 'queued' AND (r.session = "
            "'' OR "
            "NOT EXISTS (SELECT 1 FROM serve_runs b WHERE b.tenant = r.tenant AND b.session = "
            "r.session "
            "AND (b.status IN ('running', 'awaiting_approval') OR (b.status = 'queued' AND b.seq < "
            "r.seq)))) "
            "ORDER BY r.seq LIMIT 1 FOR UPDATE SKIP LOCKED) AND status = 'queued' RETURNING ") +
            kRunColumns,
        {node, static_cast<std::int64_t>(lease.count())});
    if (!claimed) {
      if (c.last_sqlstate() == pg::kUniqueViolation) {
        return Claim();  // lost a race (rolled back): try again later
      }
      return std::unexpected(claimed.error());
    }
    if (claimed->empty()) return Claim();
    ClaimedRun out{read_run(*claimed, 0), {}};
    auto events =
        c.exec("SELECT seq, name, data FROM serve_run_events WHERE run_id = $1 ORDER BY seq",
               {out.run.id});
    if (!events) return std::unexpected(events.error());
    out.events = read_events(*events);
    return Claim(std::move(out));
  });
}

Result<std::vector<HeldClaim>> ClusterStore::renew(const std::string& node,
                                                   std::chrono::seconds lease,
                                                   const std::vector<std::string>& ids) {
  if (ids.empty()) return std::vector<HeldClaim>{};
  KERNEX_ASSIGN_OR_RETURN(auto conn, control_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r,
      (conn)->exec(
          "UPDATE serve_runs SET lease_until = clock_timestamp() + make_interval(secs => "
          "$2::double "
          "precision) "
          "WHERE node = $1 AND status = 'running' AND id = ANY($3::text[]) RETURNING id, attempt, "
          "cancel_requested",
          {node, static_cast<std::int64_t>(lease.count()), text_array(ids)}));
  std::vector<HeldClaim> out;
  for (int i = 0; i < r.size(); ++i) {
    out.push_back(HeldClaim{r.text(i, 0), static_cast<int>(r.int64(i, 1)), r.boolean(i, 2)});
  }
  return out;
}

Result<std::vector<std::string>> ClusterStore::reap(const ClusterConfig& cluster) {
  return control_.transaction<std::vector<std::string>>([&](Connection& c)
                                                            -> Result<std::vector<std::string>> {
    KERNEX_ASSIGN_OR_RETURN(
        auto lost,
        c.exec(
            "SELECT id, session, attempt, cancel_requested, COALESCE(node, '') FROM serve_runs "
            "WHERE status = 'running' AND lease_until < clock_timestamp() ORDER BY seq LIMIT 100 "
            "FOR UPDATE SKIP LOCKED"));
    std::vector<std::string> ids;
    for (int i = 0; i < lost.size(); ++i) {
      const std::string id = lost.text(i, 0), session = lost.text(i, 1), node = lost.text(i, 4);
      const int attempt = static_cast<int>(lost.int64(i, 2));
      const std::string why = "node " + node + " stopped renewing its lease";
      Result<void> done;
      if (lost.boolean(i, 3)) {
        done = cancel_queued(c, id, session, hooks_);
      } else if (cluster.retry_lost && attempt < static_cast<int>(cluster.max_attempts)) {
        KERNEX_RETURN_IF_ERROR(c.exec(
            "UPDATE serve_runs SET status = 'queued', lease_until = NULL WHERE id = $1", {id}));
        done = append_one(c, id, "run_retry",
                          {{"run_id", id}, {"attempt", attempt + 1}, {"reason", why}});
        if (done) done = notify(c, kEventsChannel, id);
      } else {
        const Json error{{"run_id", id},
                         {"code", "interrupted"},
                         {"message", why + " (attempt " + std::to_string(attempt) + " of " +
                                         std::to_string(cluster.max_attempts) + ")"}};
        KERNEX_RETURN_IF_ERROR(
            c.exec("UPDATE serve_runs SET status = 'failed', result = $2, lease_until = NULL, "
                   "ended_at = clock_timestamp() WHERE id = $1",
                   {id, stored_text(error)}));
        if (hooks_.run_end) done = hooks_.run_end(c, id, RunStatus::Failed, error);
        if (done) done = append_one(c, id, "error", error);
        if (done) done = notify(c, kEventsChannel, id);
      }
      if (!done) return std::unexpected(done.error());
      ids.push_back(id);
    }
    // Approvals past their expiry (the database's clock) deny; their runs are queued again.
    KERNEX_ASSIGN_OR_RETURN(
        auto expired,
        c.exec(std::string("UPDATE serve_approvals SET status = 'expired', decision = 'deny', "
                           "decision_reason = 'approval expired', resolved_at = ") +
               kEpochNow + " WHERE status = 'pending' AND expires_at <= " + kEpochNow +
               " RETURNING run_id"));
    for (int i = 0; i < expired.size(); ++i) {
      KERNEX_ASSIGN_OR_RETURN(const bool queued, requeue_if_decided(c, expired.text(i, 0)));
      if (queued) ids.push_back(expired.text(i, 0));
    }
    if (!ids.empty()) {
      KERNEX_RETURN_IF_ERROR(notify(c, kQueueChannel, ""));
    }
    return ids;
  });
}

namespace {

// Locks the run's row while (node, attempt) still holds it; false when the claim is gone.
Result<bool> hold(Connection& c, const std::string& id, const std::string& node, int attempt,
                  const char* lock) {
  auto r = c.exec(
      std::string("SELECT 1 FROM serve_runs WHERE id = $1 AND node = $2 AND attempt = $3::int "
                  "AND status = 'running' ") +
          lock,
      {id, node, attempt});
  if (!r) return std::unexpected(r.error());
  return !r->empty();
}

// Writes `w` on the run path's batches; its first statement finds the run's claim or nothing.
// True when it found it; without it the check undoes the whole write.
Result<bool> write_fenced(pg::Writer& writer, pg::Write w) {
  // Set by the check on the writer's thread, read here once the write returned.
  auto held = std::make_shared<bool>(false);
  w.check = [held](const std::vector<pg::Rows>& rows) -> Result<bool> {
    *held = !rows.empty() && !rows[0].empty();
    return *held;
  };
  KERNEX_RETURN_IF_ERROR(writer.write(w));
  return *held;
}

}  // namespace

// One write of the run path's batches: the claim is locked and checked, and the events and their
// NOTIFY are undone with the claim gone.
Result<bool> ClusterStore::append_events(const std::string& id, const std::string& node,
                                         int attempt, const std::vector<RunEvent>& events) {
  pg::Write w;
  w.statements.push_back(
      {"SELECT 1 FROM serve_runs WHERE id = $1 AND node = $2 AND attempt = "
       "$3::int AND status = 'running' FOR SHARE",
       {id, node, attempt}});
  if (!events.empty()) w.statements.push_back(events_statement(id, events));
  w.statements.push_back({"SELECT pg_notify($1, $2)", {kEventsChannel, id}});
  return write_fenced(writer_, std::move(w));
}

Result<bool> ClusterStore::finish(const std::string& id, const std::string& node, int attempt,
                                  RunStatus status, const Json& result,
                                  const std::vector<RunEvent>& events) {
  // The webhook outbox's hook builds its rows in C++ from a read of the run in the end's
  // transaction: with it the end keeps a transaction of its own.
  auto stored = hooks_.run_end ? finish_alone(id, node, attempt, status, result, events)
                               : finish_batched(id, node, attempt, status, result, events);
  if (stored && *stored && hooks_.after_run_end) hooks_.after_run_end();
  return stored;
}

// The end as one write of the run path's batches, fenced like the events: the status UPDATE finds
// the claim or nothing, and without it the check undoes the write (events, journal deletes and
// NOTIFYs with it).
Result<bool> ClusterStore::finish_batched(const std::string& id, const std::string& node,
                                          int attempt, RunStatus status, const Json& result,
                                          const std::vector<RunEvent>& events) {
  pg::Write w;
  w.statements.push_back(
      {"UPDATE serve_runs SET status = $4, result = $5, lease_until = NULL, ended_at = "
       "clock_timestamp() WHERE id = $1 AND node = $2 AND attempt = $3::int AND status = "
       "'running' RETURNING 1",
       {id, node, attempt, std::string(to_string(status)), stored_text(result)}});
  if (!events.empty()) w.statements.push_back(events_statement(id, events));
  // Finished for good: its journal (model answers, tool results) is no longer needed.
  w.statements.push_back({"DELETE FROM serve_run_responses WHERE run_id = $1", {id}});
  w.statements.push_back({"DELETE FROM serve_run_tools WHERE run_id = $1", {id}});
  w.statements.push_back(
      {"SELECT pg_notify($1, $2), pg_notify($3, '')", {kEventsChannel, id, kQueueChannel}});
  return write_fenced(writer_, std::move(w));
}

Result<bool> ClusterStore::finish_alone(const std::string& id, const std::string& node, int attempt,
                                        RunStatus status, const Json& result,
                                        const std::vector<RunEvent>& events) {
  return pool_.transaction<bool>([&](Connection& c) -> Result<bool> {
    auto held = hold(c, id, node, attempt, "FOR UPDATE");
    if (!held || !*held) return held;
    KERNEX_RETURN_IF_ERROR(insert_events(c, id, events));
    KERNEX_RETURN_IF_ERROR(
        c.exec("UPDATE serve_runs SET status = $2, result = $3, lease_until = NULL, ended_at = "
               "clock_timestamp() "
               "WHERE id = $1",
               {id, std::string(to_string(status)), stored_text(result)}));
    if (hooks_.run_end) KERNEX_RETURN_IF_ERROR(hooks_.run_end(c, id, status, result));
    KERNEX_RETURN_IF_ERROR(c.exec("DELETE FROM serve_run_responses WHERE run_id = $1", {id}));
    KERNEX_RETURN_IF_ERROR(c.exec("DELETE FROM serve_run_tools WHERE run_id = $1", {id}));
    KERNEX_RETURN_IF_ERROR(notify(c, kEventsChannel, id));
    KERNEX_RETURN_IF_ERROR(notify(c, kQueueChannel, ""));
    return true;
  });
}

Result<std::optional<RunStatus>> ClusterStore::release(const std::string& id,
                                                       const std::string& node, int attempt,
                                                       const std::vector<RunEvent>& events) {
  using Released = std::optional<RunStatus>;
  return pool_.transaction<Released>([&](Connection& c) -> Result<Released> {
    KERNEX_ASSIGN_OR_RETURN(
        auto row,
        c.exec("SELECT session, cancel_requested FROM serve_runs WHERE id = $1 AND node = $2 AND "
               "attempt = $3::int AND status = 'running' FOR UPDATE",
               {id, node, attempt}));
    if (row.empty()) return Released();
    KERNEX_RETURN_IF_ERROR(insert_events(c, id, events));
    if (row.boolean(0, 1)) {  // cancelled meanwhile: it ends here, nobody resumes it
      KERNEX_RETURN_IF_ERROR(cancel_queued(c, id, row.text(0, 0), hooks_));
      KERNEX_RETURN_IF_ERROR(notify(c, kQueueChannel, ""));
      return Released(RunStatus::Cancelled);
    }
    KERNEX_ASSIGN_OR_RETURN(
        auto set, c.exec("UPDATE serve_runs SET lease_until = NULL, status = CASE WHEN EXISTS "
                         "(SELECT 1 FROM serve_approvals a WHERE a.run_id = $1 AND a.status = "
                         "'pending') THEN 'awaiting_approval' ELSE 'queued' END WHERE id = $1 "
                         "RETURNING status",
                         {id}));
    KERNEX_RETURN_IF_ERROR(notify(c, kEventsChannel, id));
    KERNEX_RETURN_IF_ERROR(notify(c, kQueueChannel, ""));
    return Released(parse_run_status(set.text(0, 0)).value_or(RunStatus::Queued));
  });
}

Result<bool> ClusterStore::holds(const std::string& id, const std::string& node, int attempt) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  return hold(*conn, id, node, attempt, "");
}

Result<ClusterStore::CancelOutcome> ClusterStore::cancel(const std::string& tenant,
                                                         const std::string& id) {
  return pool_.transaction<CancelOutcome>([&](Connection& c) -> Result<CancelOutcome> {
    auto row =
        c.exec("SELECT status, session FROM serve_runs WHERE id = $1 AND tenant = $2 FOR UPDATE",
               {id, tenant});
    if (!row) return std::unexpected(row.error());
    if (row->empty()) return CancelOutcome::NotFound;
    const std::string status = row->text(0, 0);
    if (status == "queued") {
      KERNEX_RETURN_IF_ERROR(cancel_queued(c, id, row->text(0, 1), hooks_));
      return CancelOutcome::CancelledQueued;
    }
    if (status == "awaiting_approval") {  // no node holds it: it ends here
      KERNEX_RETURN_IF_ERROR(cancel_queued(c, id, row->text(0, 1), hooks_));
      KERNEX_RETURN_IF_ERROR(notify(c, kQueueChannel, ""));
      return CancelOutcome::CancelledQueued;
    }
    if (status != "running") return CancelOutcome::Finished;
    if (auto r = c.exec("UPDATE serve_runs SET cancel_requested = true WHERE id = $1", {id}); !r) {
      return std::unexpected(r.error());
    }
    KERNEX_RETURN_IF_ERROR(notify(c, kCancelChannel, id));
    return CancelOutcome::Requested;
  });
}

Result<void> ClusterStore::cancel_session(const std::string& tenant, const std::string& session) {
  KERNEX_RETURN_IF_ERROR(pool_.transaction<bool>([&](Connection& c) -> Result<bool> {
    if (auto r = lock_session(c, tenant, session); !r) return std::unexpected(r.error());
    if (auto r = interrupt_session(c, tenant, session, hooks_); !r)
      return std::unexpected(r.error());
    return true;
  }));
  return {};
}

Result<bool> ClusterStore::session_running(const std::string& tenant, const std::string& session) {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
  auto r = (lease)->exec(
      "SELECT 1 FROM serve_runs WHERE tenant = $1 AND session = $2 AND status = 'running' LIMIT 1",
      {tenant, session});
  if (!r) return std::unexpected(r.error());
  return !r->empty();
}

Result<bool> ClusterStore::session_has_runs(const std::string& tenant, const std::string& session) {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
  auto r = (lease)->exec("SELECT 1 FROM serve_runs WHERE tenant = $1 AND session = $2 LIMIT 1",
                         {tenant, session});
  if (!r) return std::unexpected(r.error());
  return !r->empty();
}

Result<void> ClusterStore::delete_session(const std::string& tenant, const std::string& session) {
  // Under the session's lock, like submit and cancel_session: no run of it is admitted meanwhile.
  KERNEX_RETURN_IF_ERROR(pool_.transaction<bool>([&](Connection& c) -> Result<bool> {
    if (auto r = lock_session(c, tenant, session); !r) return std::unexpected(r.error());
    if (auto r = forget_session_outbox(c, tenant, session); !r) return std::unexpected(r.error());
    auto r = c.exec("DELETE FROM serve_runs WHERE tenant = $1 AND session = $2", {tenant, session});
    if (!r) return std::unexpected(r.error());
    // Journals and approvals went with their runs (ON DELETE CASCADE); grants are the session's.
    r = c.exec("DELETE FROM serve_approval_grants WHERE tenant = $1 AND session = $2",
               {tenant, session});
    if (!r) return std::unexpected(r.error());
    return true;
  }));
  return {};
}

Result<std::optional<SharedRun>> ClusterStore::find(const std::string& tenant,
                                                    const std::string& id) {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(auto r,
                          (lease)->exec(std::string("SELECT ") + kRunColumns +
                                            " FROM serve_runs WHERE id = $1 AND tenant = $2",
                                        {id, tenant}));
  if (r.empty()) return std::nullopt;
  return read_run(r, 0);
}

Result<std::vector<RunEvent>> ClusterStore::events_after(const std::string& id,
                                                         std::uint64_t after) {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r,
      (lease)->exec(
          "SELECT seq, name, data FROM serve_run_events WHERE run_id = $1 AND seq > $2::bigint "
          "ORDER BY seq",
          {id, static_cast<std::uint64_t>(after)}));
  return read_events(r);
}

Result<std::vector<SharedRun>> ClusterStore::session_runs(const std::string& tenant,
                                                          const std::string& session,
                                                          std::size_t limit) {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(auto r,
                          (lease)->exec(std::string("SELECT ") + kRunColumns +
                                            " FROM serve_runs WHERE tenant = $1 AND session = $2 "
                                            "ORDER BY seq DESC LIMIT $3::bigint",
                                        {tenant, session, static_cast<std::uint64_t>(limit)}));
  std::vector<SharedRun> out;
  for (int i = 0; i < r.size(); ++i) out.push_back(read_run(r, i));
  return out;
}

Result<std::uint64_t> ClusterStore::queued_count() {
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(auto r,
                          (lease)->exec("SELECT count(*) FROM serve_runs WHERE status = 'queued'"));
  return static_cast<std::uint64_t>(r.int64(0, 0));
}

}  // namespace kernex::server
