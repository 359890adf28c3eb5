#include "cluster_ops_schema.hpp"

#include <iterator>

namespace kernex::server {
namespace {

struct Migration {
  int version;
  const char* sql;
};
// Times a row is judged by (due, claimed, max age) are the database's clock, the same for every
// node; created_ms is the event's own (it is in the body the receiver sees).
constexpr Migration kMigrations[] = {{1, R"SQL(
CREATE TABLE serve_webhook_outbox (
  id BIGSERIAL PRIMARY KEY,
  tenant TEXT NOT NULL,
  event_id TEXT NOT NULL,
  endpoint TEXT NOT NULL,
  stream TEXT NOT NULL,
  type TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending',
  attempts INTEGER NOT NULL DEFAULT 0,
  created_ms BIGINT NOT NULL,
  window_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  next_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  delivered_at TIMESTAMPTZ,
  last_error TEXT NOT NULL DEFAULT '',
  claimed_by TEXT,
  claim_until TIMESTAMPTZ);
CREATE INDEX serve_webhook_outbox_due ON serve_webhook_outbox (endpoint, next_at)
  WHERE status = 'pending';
CREATE INDEX serve_webhook_outbox_stream ON serve_webhook_outbox (endpoint, stream, id)
  WHERE status = 'pending';
CREATE INDEX serve_webhook_outbox_tenant ON serve_webhook_outbox (tenant, stream);
CREATE INDEX serve_webhook_outbox_delivered ON serve_webhook_outbox (delivered_at)
  WHERE status = 'delivered';
CREATE TABLE serve_tenant_usage (
  tenant TEXT NOT NULL,
  day DATE NOT NULL,
  tokens BIGINT NOT NULL DEFAULT 0,
  cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant, day));
)SQL"},
                                     // Runs parked on the client's tool calls (openai_parked.hpp);
                                     // an event made twice under one id (approvals announced again
                                     // by a resumed run) is one row per endpoint.
                                     {2, R"SQL(
CREATE TABLE serve_openai_parked (
  tenant TEXT NOT NULL,
  session TEXT NOT NULL,
  call_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (tenant, session, call_id));
CREATE INDEX serve_openai_parked_expiry ON serve_openai_parked (expires_at);
CREATE UNIQUE INDEX serve_webhook_outbox_event ON serve_webhook_outbox (event_id, endpoint);
)SQL"}};

}  // namespace

Result<void> lock_schema(pg::Connection& c, std::int64_t key) {
  KERNEX_RETURN_IF_ERROR(c.exec("SET LOCAL statement_timeout = 120000"));
  KERNEX_RETURN_IF_ERROR(c.exec("SELECT pg_advisory_xact_lock($1::bigint)", {key}));
  return {};
}

Result<bool> migrate_cluster_ops(pg::Connection& c) {
  KERNEX_RETURN_IF_ERROR(lock_schema(c, 7291002));
  KERNEX_RETURN_IF_ERROR(
      c.script("CREATE TABLE IF NOT EXISTS serve_ops_schema_version (version INT PRIMARY KEY, "
               "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"));
  KERNEX_ASSIGN_OR_RETURN(auto have,
                          c.exec("SELECT COALESCE(MAX(version), 0) FROM serve_ops_schema_version"));
  const std::int64_t current = have.int64(0, 0);
  const int newest = kMigrations[std::size(kMigrations) - 1].version;
  if (current > newest) {
    return fail(ErrorCode::Memory, "serve cluster tables: the database's schema is version " +
                                       std::to_string(current) + ", newer than this kernex (" +
                                       std::to_string(newest) + "): upgrade kernex");
  }
  for (const auto& m : kMigrations) {
    if (m.version <= current) continue;
    KERNEX_RETURN_IF_ERROR(c.script(m.sql));
    KERNEX_RETURN_IF_ERROR(
        c.exec("INSERT INTO serve_ops_schema_version (version) VALUES ($1::int)", {m.version}));
  }
  return true;
}

Result<void> forget_session_outbox(pg::Connection& c, const std::string& tenant,
                                   const std::string& session) {
  constexpr const char* kRuns = "(SELECT id FROM serve_runs WHERE tenant = $1 AND session = $2)";
  KERNEX_RETURN_IF_ERROR(c.exec(
      std::string("UPDATE serve_webhook_outbox SET body = json_build_object('type', type, 'id', "
                  "event_id, 'created_at', created_at, 'data', json_build_object('run_id', "
                  "stream, 'forgotten', true))::text WHERE tenant = $1 AND status <> 'delivered' "
                  "AND stream IN ") +
          kRuns,
      {tenant, session}));
  KERNEX_RETURN_IF_ERROR(
      c.exec(std::string("DELETE FROM serve_webhook_outbox WHERE tenant = $1 AND status = "
                         "'delivered' AND stream IN ") +
                 kRuns,
             {tenant, session}));
  return {};
}

}  // namespace kernex::server
