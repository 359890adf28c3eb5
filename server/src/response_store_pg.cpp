// The Responses API's stored responses in PostgreSQL, for nodes that share their runs there
// (cluster mode): any node reads back or continues a response another node made. Writes go through
// a pg::Writer: the responses of concurrent runs share batched commits, each returned once its
// batch committed.
#include <algorithm>

#include "cluster_ops_schema.hpp"
#include "kernex/pg/pool.hpp"
#include "kernex/pg/writer.hpp"
#include "response_store.hpp"
#include "stored_json.hpp"

namespace kernex::server {
namespace {

using pg::Connection;

// Its own table beside serve_runs, created once under an advisory lock (nodes starting at once).
Result<bool> create_table(Connection& c) {
  KERNEX_RETURN_IF_ERROR(lock_schema(c, 7291033));
  KERNEX_RETURN_IF_ERROR(
      c.script("CREATE TABLE IF NOT EXISTS serve_responses (id TEXT PRIMARY KEY, tenant TEXT NOT "
               "NULL, session TEXT NOT NULL, response TEXT NOT NULL, conversation TEXT NOT NULL, "
               "created_at TIMESTAMPTZ NOT NULL DEFAULT now()); CREATE INDEX IF NOT EXISTS "
               "serve_responses_by_session ON serve_responses (tenant, session)"));
  return true;
}

class PgStore final : public ResponseStore {
 public:
  PgStore(const pg::Options& options, std::size_t pool_size)
      : pool_(options, pool_size), writer_(pool_) {}
  Result<void> open() {
    KERNEX_RETURN_IF_ERROR(pool_.transaction<bool>(create_table));
    return {};
  }

  Result<void> put(const StoredResponse& r) override {
    // The id is the tenant's: another tenant's row of the same id is left as it is. Fenced by
    // the run's row, which the put holds (FOR KEY SHARE) until its batch commits: a DELETE of the
    // session deletes the runs' rows first and its responses after (Api::delete_session), so a
    // put either commits before the runs' delete and is deleted with the responses, or waits for
    // it and finds no run, storing nothing.
    return writer_.write(
        {{{"INSERT INTO serve_responses (id, tenant, session, response, conversation) SELECT $1, "
           "$2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM serve_runs WHERE id = $6 AND tenant = $2 "
           "FOR KEY SHARE) ON CONFLICT (id) DO UPDATE SET response = EXCLUDED.response, "
           "conversation = EXCLUDED.conversation WHERE serve_responses.tenant = EXCLUDED.tenant",
           {r.id, r.tenant, r.session, stored_text(r.response), stored_text(r.conversation),
            r.run_id}}},
         {}});
  }
  Result<std::optional<StoredResponse>> get(const std::string& tenant,
                                            const std::string& id) override {
    KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(auto rows, lease->exec("SELECT session, response, conversation FROM "
                                                   "serve_responses WHERE tenant = $1 AND id = $2",
                                                   {tenant, id}));
    if (rows.empty()) return std::optional<StoredResponse>();
    return StoredResponse{
        id, tenant, rows.text(0, 0), stored_json(rows.text(0, 1)), stored_json(rows.text(0, 2)),
        ""};
  }
  Result<bool> remove(const std::string& tenant, const std::string& id) override {
    auto removed = std::make_shared<bool>(false);  // set on the writer's thread
    KERNEX_RETURN_IF_ERROR(writer_.write(
        {{{"DELETE FROM serve_responses WHERE tenant = $1 AND id = $2", {tenant, id}}},
         [removed](const std::vector<pg::Rows>& rows) -> Result<bool> {
           *removed = !rows.empty() && rows[0].affected() > 0;
           return true;
         }}));
    return *removed;
  }
  Result<void> delete_session(const std::string& tenant, const std::string& session) override {
    return writer_.write(
        {{{"DELETE FROM serve_responses WHERE tenant = $1 AND session = $2", {tenant, session}}},
         {}});
  }

 private:
  pg::Pool pool_;
  pg::Writer writer_;  // after pool_ (it leases from it when KERNEX_GROUP_COMMIT=off)
};

}  // namespace

Result<std::unique_ptr<ResponseStore>> PgResponseStore::open(const pg::Options& options,
                                                             std::size_t pool_size) {
  auto store = std::make_unique<PgStore>(options, std::max<std::size_t>(1, pool_size / 4));
  KERNEX_RETURN_IF_ERROR(store->open());
  return std::unique_ptr<ResponseStore>(std::move(store));
}

}  // namespace kernex::server
