// The parked-calls index in PostgreSQL (cluster mode): a turn parked on one node is resumed by the
// request that reaches any node, also after that node's kill -9. Expiry is the database's clock.
#include <algorithm>

#include "cluster_ops_schema.hpp"
#include "kernex/json.hpp"
#include "kernex/pg/pool.hpp"
#include "kernex/pg/writer.hpp"
#include "openai_parked.hpp"

namespace kernex::server {
namespace {

class PgParked final : public ParkedStore {
 public:
  PgParked(const pg::Options& options, std::chrono::seconds ttl)
      : pool_(options, 2), writer_(pool_), ttl_(ttl) {}
  Result<void> open() {
    KERNEX_RETURN_IF_ERROR(pool_.transaction<bool>(migrate_cluster_ops));
    return {};
  }

  Result<void> park(const std::string& tenant, const std::string& session,
                    const std::string& run_id, const std::vector<std::string>& call_ids) override {
    if (call_ids.empty()) return {};
    const Json ids = call_ids;
    // Every call of the run in one statement, or none (expired rows go in prune_expired()): one
    // write of the writer's batches, returned once committed. Its expiry counts from the batch's
    // start (now()), not the statement's. Fenced by the run's row, held until the batch commits
    // (as PgResponseStore's put): a DELETE of the session removes the runs first, these after.
    return writer_.write(
        {{{"INSERT INTO serve_openai_parked (tenant, session, call_id, run_id, expires_at) SELECT "
           "$1, $2, c, $3, now() + make_interval(secs => $4::double precision) FROM "
           "(SELECT DISTINCT c FROM json_array_elements_text($5::json) c) d WHERE EXISTS (SELECT "
           "1 FROM serve_runs WHERE id = $3 AND tenant = $1 FOR KEY SHARE) ON CONFLICT (tenant, "
           "session, call_id) DO UPDATE SET run_id = EXCLUDED.run_id, expires_at = "
           "EXCLUDED.expires_at",
           {tenant, session, run_id, static_cast<std::int64_t>(ttl_.count()), ids.dump()}}},
         {}});
  }

  Result<std::size_t> prune_expired() override {
    KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(
        auto rows,
        conn->exec("WITH gone AS (DELETE FROM serve_openai_parked WHERE expires_at <= now() "
                   "RETURNING 1) SELECT count(*) FROM gone"));
    return rows.empty() ? std::size_t{0} : static_cast<std::size_t>(std::stoll(rows.text(0, 0)));
  }

  Result<void> delete_session(const std::string& tenant, const std::string& session) override {
    return writer_.write({{{"DELETE FROM serve_openai_parked WHERE tenant = $1 AND session = $2",
                            {tenant, session}}},
                          {}});
  }

  Result<std::optional<std::string>> run_for(const std::string& tenant, const std::string& session,
                                             const std::string& call_id) override {
    KERNEX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(
        auto rows, conn->exec("SELECT run_id FROM serve_openai_parked WHERE tenant = $1 AND "
                              "session = $2 AND call_id = $3 AND expires_at > now()",
                              {tenant, session, call_id}));
    if (rows.empty()) return std::optional<std::string>();
    return std::optional<std::string>(rows.text(0, 0));
  }

 private:
  pg::Pool pool_;
  pg::Writer writer_;  // after pool_
  std::chrono::seconds ttl_;
};

}  // namespace

Result<std::unique_ptr<ParkedStore>> PgParkedStore::open(const pg::Options& options,
                                                         std::chrono::seconds ttl) {
  auto store = std::make_unique<PgParked>(options, ttl);
  KERNEX_RETURN_IF_ERROR(store->open());
  return std::unique_ptr<ParkedStore>(std::move(store));
}

}  // namespace kernex::server
