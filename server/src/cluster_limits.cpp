#include "cluster_limits.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cluster_ops_schema.hpp"
#include "kernex/log.hpp"

namespace kernex::server {
namespace {

// Today on the database's clock (UTC), the same day for every node.
constexpr const char* kToday = "(clock_timestamp() AT TIME ZONE 'UTC')::date";

constexpr const char* kUnfinished =
    "SELECT count(*) FROM serve_runs WHERE tenant = $1 AND status NOT IN ('done', 'failed', "
    "'cancelled')";

}  // namespace

Result<std::shared_ptr<ClusterLimits>> ClusterLimits::open(const pg::Options& options,
                                                           LimitFor limit_for) {
  std::shared_ptr<ClusterLimits> limits(new ClusterLimits(options, std::move(limit_for)));
  KERNEX_RETURN_IF_ERROR(limits->pool_.transaction<bool>(migrate_cluster_ops));
  return limits;
}

void ClusterLimits::add_to(ClusterHooks& hooks, std::shared_ptr<ClusterLimits> limits) {
  hooks.admit = [limits](pg::Connection& c, const std::string& tenant) {
    return limits->admit_in(c, tenant);
  };
}

Result<std::optional<LimitRefusal>> ClusterLimits::admit_in(pg::Connection& c,
                                                            const std::string& tenant) {
  const TenantLimit limit = limit_for_(tenant);
  if (!limit.max_concurrent_runs && !limit.tokens_per_day && !limit.cost_per_day_usd)
    return std::nullopt;
  // Held to the commit: the next submit of this tenant, on any node, counts this run too.
  KERNEX_RETURN_IF_ERROR(
      c.exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 7293))", {"limits\n" + tenant}));
  if (limit.max_concurrent_runs) {
    KERNEX_ASSIGN_OR_RETURN(auto n, c.exec(kUnfinished, {tenant}));
    if (n.int64(0, 0) >= static_cast<std::int64_t>(*limit.max_concurrent_runs)) {
      return LimitRefusal{refusal_message(Admission::Refusal::Concurrent, tenant, limit,
                                          static_cast<std::uint32_t>(n.int64(0, 0))),
                          std::chrono::seconds(1)};
    }
  }
  if (!limit.tokens_per_day && !limit.cost_per_day_usd) return std::nullopt;
  KERNEX_ASSIGN_OR_RETURN(
      auto used, c.exec(std::string("SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), 0), "
                                    "GREATEST(1, CEIL(EXTRACT(EPOCH FROM (date_trunc('day', "
                                    "clock_timestamp() AT TIME ZONE 'UTC') + interval '1 day') - "
                                    "(clock_timestamp() AT TIME ZONE 'UTC'))))::bigint FROM "
                                    "serve_tenant_usage WHERE tenant = $1 AND day = ") +
                            kToday,
                        {tenant}));
  const auto tokens = static_cast<std::uint64_t>(used.int64(0, 0));
  const double cost = used.real(0, 1);
  const std::chrono::seconds midnight(used.int64(0, 2));
  if (limit.tokens_per_day && tokens >= *limit.tokens_per_day) {
    return LimitRefusal{refusal_message(Admission::Refusal::Tokens, tenant, limit, 0), midnight};
  }
  if (limit.cost_per_day_usd && !(cost < *limit.cost_per_day_usd)) {
    return LimitRefusal{refusal_message(Admission::Refusal::Cost, tenant, limit, 0), midnight};
  }
  return std::nullopt;
}

Result<void> ClusterLimits::record(const std::string& tenant, std::uint64_t tokens,
                                   double cost_usd) {
  if (!std::isfinite(cost_usd) || cost_usd < 0) cost_usd = 0;  // a bad price never frees budget
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  tokens = std::min(tokens, kMax);
  if (tokens == 0 && cost_usd == 0) return {};
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_RETURN_IF_ERROR(conn->exec(
      std::string("INSERT INTO serve_tenant_usage (tenant, day, tokens, cost_usd) VALUES ($1, ") +
          kToday +
          ", $2::bigint, $3::double precision) ON CONFLICT (tenant, day) DO UPDATE SET tokens = "
          "LEAST(serve_tenant_usage.tokens::numeric + EXCLUDED.tokens, 9223372036854775807)"
          "::bigint, cost_usd = serve_tenant_usage.cost_usd + EXCLUDED.cost_usd",
      {tenant, tokens, cost_usd}));
  return {};
}

void ClusterLimits::release(const std::string& tenant, std::uint64_t tokens, double cost_usd) {
  if (auto r = record(tenant, tokens, cost_usd); !r)
    log(LogLevel::Error,
        "serve: tenant usage of '" + tenant + "' not recorded: " + r.error().describe());
}

Result<TenantUsage> ClusterLimits::usage(const std::string& tenant) {
  KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(auto n, conn->exec(kUnfinished, {tenant}));
  KERNEX_ASSIGN_OR_RETURN(
      auto used, conn->exec(std::string("SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), "
                                        "0) FROM serve_tenant_usage WHERE tenant = $1 AND day = ") +
                                kToday,
                            {tenant}));
  return TenantUsage{static_cast<std::uint32_t>(n.int64(0, 0)),
                     static_cast<std::uint64_t>(used.int64(0, 0)), used.real(0, 1)};
}

}  // namespace kernex::server
