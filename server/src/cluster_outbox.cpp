#include "cluster_outbox.hpp"

#include <algorithm>

#include "cluster_ops_schema.hpp"
#include "random_id.hpp"

namespace kernex::server {
namespace {

using pg::Connection;
using pg::Rows;

// Rows claimed at once: each may take the endpoint's timeout, and the claim must outlast them.
constexpr std::size_t kClaimBatch = 4;

constexpr const char* kPgOutboxColumns =
    "id, event_id, endpoint, stream, type, body, status, attempts, created_ms, "
    "(EXTRACT(EPOCH FROM window_at) * 1000)::bigint, (EXTRACT(EPOCH FROM next_at) * 1000)::bigint, "
    "COALESCE((EXTRACT(EPOCH FROM delivered_at) * 1000)::bigint, 0), last_error";

// The head of its stream at its endpoint: no earlier row of the same run is still pending.
constexpr const char* kHead =
    "NOT EXISTS (SELECT 1 FROM serve_webhook_outbox p WHERE p.endpoint = o.endpoint AND "
    "p.stream = o.stream AND p.status = 'pending' AND p.id < o.id)";

std::vector<OutboxRow> read_rows(const Rows& r) {
  std::vector<OutboxRow> out;
  for (int i = 0; i < r.size(); ++i) {
    OutboxRow row;
    row.id = r.int64(i, 0);
    row.event_id = r.text(i, 1);
    row.endpoint = r.text(i, 2);
    row.stream = r.text(i, 3);
    row.type = r.text(i, 4);
    row.body = r.text(i, 5);
    row.status = r.text(i, 6);
    row.attempts = r.int64(i, 7);
    row.created_ms = r.int64(i, 8);
    row.window_ms = r.int64(i, 9);
    row.next_ms = r.int64(i, 10);
    row.delivered_ms = r.int64(i, 11);
    row.last_error = r.text(i, 12);
    out.push_back(std::move(row));
  }
  return out;
}

// "{1,2,3}"
std::string bigint_array(const std::vector<std::int64_t>& ids) {
  std::string out = "{";
  for (auto id : ids) out += (out.size() > 1 ? "," : "") + std::to_string(id);
  return out + "}";
}

}  // namespace

ClusterOutbox::ClusterOutbox(const pg::Options& options, std::chrono::milliseconds claim_for)
    : pool_(options, 2), claimer_(random_id("whk")), claim_for_(claim_for) {}

Result<std::unique_ptr<ClusterOutbox>> ClusterOutbox::open(const pg::Options& options,
                                                           std::chrono::milliseconds claim_for) {
  std::unique_ptr<ClusterOutbox> outbox(new ClusterOutbox(options, claim_for));
  KERNEX_RETURN_IF_ERROR(outbox->pool_.transaction<bool>(migrate_cluster_ops));
  return outbox;
}

Result<void> ClusterOutbox::enqueue(Connection& c, const WebhookEvent& event,
                                    const std::vector<std::string>& endpoints,
                                    const std::string& tenant) {
  if (endpoints.empty()) return {};
  // The body's created_at, for a tombstone that replaces the body (forget_session_outbox).
  const Json body = parse_untrusted(event.body);
  const std::string when =
      body.is_object() && body.contains("created_at") && body["created_at"].is_string()
          ? body["created_at"].get<std::string>()
          : iso_utc(unix_ms_now());
  const Json list = endpoints;
  KERNEX_RETURN_IF_ERROR(c.exec(
      "INSERT INTO serve_webhook_outbox (tenant, event_id, endpoint, stream, type, body, "
      "created_at, created_ms) SELECT $1, $2, e, $3, $4, $5, $6, $7::bigint "
      "FROM json_array_elements_text($8::json) e ON CONFLICT (event_id, endpoint) DO NOTHING",
      {tenant, event.id, event.stream, event.type, event.body, when, unix_ms_now(), list.dump()}));
  return {};
}

Result<void> ClusterOutbox::put(const WebhookEvent& event,
                                const std::vector<std::string>& endpoints,
                                const std::string& tenant) {
  // One statement: every endpoint's row or none.
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  return enqueue(*conn, event, endpoints, tenant);
}

Result<std::vector<OutboxRow>> ClusterOutbox::take_due(const std::string& endpoint,
                                                       std::size_t limit) {
  const std::size_t n = std::clamp<std::size_t>(limit, 1, kClaimBatch);
  const auto lease = claim_for_ * static_cast<long>(n + 1);
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  // The CTE locks the rows it picks, skipping those another node is claiming this instant; a
  // row claimed meanwhile is re-checked once locked (its claim_until excludes it).
  KERNEX_ASSIGN_OR_RETURN(
      auto r,
      conn->exec(std::string("WITH picked AS (SELECT o.id AS pick FROM serve_webhook_outbox o "
                             "WHERE o.endpoint = $1 AND o.status = 'pending' AND "
                             "o.next_at <= clock_timestamp() AND (o.claim_until IS NULL "
                             "OR o.claim_until < clock_timestamp()) AND ") +
                     kHead +
                     " ORDER BY o.id LIMIT $2::bigint FOR UPDATE SKIP LOCKED) "
                     "UPDATE serve_webhook_outbox t SET claimed_by = $3, claim_until = "
                     "clock_timestamp() + make_interval(secs => $4::double precision / "
                     "1000) FROM picked WHERE t.id = picked.pick RETURNING " +
                     kPgOutboxColumns,
                 {endpoint, static_cast<std::int64_t>(n), claimer_,
                  static_cast<std::int64_t>(lease.count())}));
  auto rows = read_rows(r);
  std::sort(rows.begin(), rows.end(),
            [](const OutboxRow& a, const OutboxRow& b) { return a.id < b.id; });
  return rows;
}

Result<std::optional<std::int64_t>> ClusterOutbox::wait_ms(const std::string& endpoint) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r, conn->exec(std::string("SELECT (EXTRACT(EPOCH FROM MIN(GREATEST(next_at, "
                                     "COALESCE(claim_until, next_at))) - clock_timestamp()) * 1000)"
                                     "::bigint FROM serve_webhook_outbox o WHERE endpoint = $1 AND "
                                     "status = 'pending' AND ") +
                             kHead,
                         {endpoint}));
  if (r.empty() || r.null(0, 0)) return std::nullopt;
  return r.int64(0, 0);
}

Result<void> ClusterOutbox::mark_delivered(const OutboxRow& row) {
  // Not fenced by the claim: it was delivered, whoever holds the row now.
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_RETURN_IF_ERROR(
      conn->exec("UPDATE serve_webhook_outbox SET status = 'delivered', attempts = attempts + 1, "
                 "delivered_at = clock_timestamp(), last_error = '', claimed_by = NULL, "
                 "claim_until = NULL WHERE id = $1::bigint AND status = 'pending'",
                 {row.id}));
  return {};
}

Result<bool> ClusterOutbox::mark_failed(const OutboxRow& row, std::int64_t backoff_ms,
                                        std::int64_t max_age_ms, const std::string& error) {
  // Fenced: once the claim passed to another node, that node's attempt decides.
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r,
      conn->exec("UPDATE serve_webhook_outbox SET attempts = attempts + 1, last_error = $3, "
                 "claimed_by = NULL, claim_until = NULL, next_at = clock_timestamp() + "
                 "make_interval(secs => $4::double precision / 1000), status = CASE WHEN "
                 "clock_timestamp() + make_interval(secs => $4::double precision / 1000) - "
                 "window_at > make_interval(secs => $5::double precision / 1000) THEN 'failed' "
                 "ELSE 'pending' END WHERE id = $1::bigint AND claimed_by = $2 AND status = "
                 "'pending' RETURNING status",
                 {row.id, claimer_, error, backoff_ms, max_age_ms}));
  return !r.empty() && r.text(0, 0) == "failed";
}

Result<void> ClusterOutbox::hurry_now(const std::string& endpoint) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_RETURN_IF_ERROR(
      conn->exec("UPDATE serve_webhook_outbox SET next_at = clock_timestamp() WHERE endpoint = $1 "
                 "AND status = 'pending' AND next_at > clock_timestamp()",
                 {endpoint}));
  return {};
}

Result<std::size_t> ClusterOutbox::prune_older(std::chrono::milliseconds delivered_before) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r, conn->exec("DELETE FROM serve_webhook_outbox WHERE status = 'delivered' AND "
                         "delivered_at < clock_timestamp() - make_interval(secs => "
                         "$1::double precision / 1000)",
                         {static_cast<std::int64_t>(delivered_before.count())}));
  return static_cast<std::size_t>(r.affected());
}

Result<std::vector<OutboxRow>> ClusterOutbox::list(bool failed_only, std::size_t limit) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r, conn->exec(std::string("SELECT ") + kPgOutboxColumns + " FROM serve_webhook_outbox" +
                             (failed_only ? " WHERE status = 'failed'" : "") +
                             " ORDER BY id DESC LIMIT $1::bigint",
                         {static_cast<std::int64_t>(limit)}));
  return read_rows(r);
}

Result<std::size_t> ClusterOutbox::retry_now(const std::vector<std::int64_t>& ids) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r, conn->exec("UPDATE serve_webhook_outbox SET status = 'pending', attempts = 0, "
                         "next_at = clock_timestamp(), window_at = clock_timestamp(), "
                         "claimed_by = NULL, claim_until = NULL WHERE status = 'failed' AND "
                         "(cardinality($1::bigint[]) = 0 OR id = ANY($1::bigint[]))",
                         {bigint_array(ids)}));
  return static_cast<std::size_t>(r.affected());
}

void add_webhook_hooks(ClusterHooks& hooks, Webhooks::Sink sink) {
  hooks.run_end = [wanting = sink.wanting](Connection& c, const std::string& run_id,
                                           RunStatus status, const Json& result) -> Result<void> {
    const std::string type = status == RunStatus::Failed ? "run.failed" : "run.completed";
    const auto urls = wanting(type);
    if (urls.empty()) return {};
    KERNEX_ASSIGN_OR_RETURN(
        auto row, c.exec("SELECT tenant, session FROM serve_runs WHERE id = $1", {run_id}));
    if (row.empty()) return {};  // a run forgotten meanwhile: nothing to tell
    const std::string tenant = row.text(0, 0);
    const Json data = run_event_data(run_id, tenant, row.text(0, 1), status, result);
    return ClusterOutbox::enqueue(c, make_webhook_event(type, data), urls, tenant);
  };
  hooks.after_run_end = std::move(sink.wake);
}

}  // namespace kernex::server
