// Tenant limits counted in the database every node shares, so a quota holds at any node count.
// Concurrent runs are the tenant's unfinished runs (queued, running, awaiting approval) in
// serve_runs, counted inside submit's transaction under a per-tenant advisory lock: two nodes
// admitting at once are serialized, and the limit is never passed. Tokens and cost per UTC day
// (the database's day) live in serve_tenant_usage, added when a run ends; a budget refuses new
// runs once used up, and as on one node the runs already admitted may pass it, since a run's
// tokens are known only at its end (at most the tenant's concurrent runs' worth).
#pragma once

#include <functional>
#include <memory>

#include "cluster_hooks.hpp"
#include "kernex/pg/pool.hpp"
#include "kernex/server/tenant_limits.hpp"
#include "runs.hpp"

namespace kernex::server {

class ClusterLimits final : public RunAdmission {
 public:
  using LimitFor = std::function<TenantLimit(const std::string& tenant)>;
  static Result<std::shared_ptr<ClusterLimits>> open(const pg::Options& options,
                                                     LimitFor limit_for);

  // Submit's check, on its connection inside its transaction (ClusterHooks::admit).
  Result<std::optional<LimitRefusal>> admit_in(pg::Connection& c, const std::string& tenant);
  // Sets hooks.admit to admit_in (the hook keeps this object alive).
  static void add_to(ClusterHooks& hooks, std::shared_ptr<ClusterLimits> limits);

  // RunAdmission, as ClusterRuns calls it: admission happened in submit; a run's end adds its
  // usage to today's.
  std::optional<ApiError> admit(const std::string&) override { return std::nullopt; }
  void release(const std::string& tenant, std::uint64_t tokens, double cost_usd) override;
  Result<void> record(const std::string& tenant, std::uint64_t tokens, double cost_usd);

  // Today's tokens and cost, and the unfinished runs (inspection, tests).
  Result<TenantUsage> usage(const std::string& tenant);

 private:
  ClusterLimits(const pg::Options& options, LimitFor limit_for)
      : pool_(options, 1), limit_for_(std::move(limit_for)) {}
  pg::Pool pool_;
  LimitFor limit_for_;
};

}  // namespace kernex::server
