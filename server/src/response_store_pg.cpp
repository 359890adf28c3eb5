// The Responses API's stored responses in PostgreSQL, for nodes that share their runs there
// (cluster mode): any node reads back or continues a response another node made.
#include <algorithm>

#include "cluster_ops_schema.hpp"
#include "kernex/pg/pool.hpp"
#include "response_store.hpp"

namespace kernex::server {
namespace {

using pg::Connection;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json parse_or_null(const std::string& text) {
  Json j = parse_untrusted(text);
  return j.is_discarded() ? Json(nullptr) : j;
}

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
  PgStore(const pg::Options& options, std::size_t pool_size) : pool_(options, pool_size) {}
  Result<void> open() {
    KERNEX_RETURN_IF_ERROR(pool_.transaction<bool>(create_table));
    return {};
  }

  Result<void> put(const StoredResponse& r) override {
    KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
    KERNEX_RETURN_IF_ERROR(lease->exec(
        "INSERT INTO serve_responses (id, tenant, session, response, conversation) VALUES ($1, "
        "$2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET response = EXCLUDED.response, "
        "conversation = EXCLUDED.conversation WHERE serve_responses.tenant = EXCLUDED.tenant",
        {r.id, r.tenant, r.session, dump(r.response), dump(r.conversation)}));
    return {};
  }
  Result<std::optional<StoredResponse>> get(const std::string& tenant,
                                            const std::string& id) override {
    KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(auto rows, lease->exec("SELECT session, response, conversation FROM "
                                                   "serve_responses WHERE tenant = $1 AND id = $2",
                                                   {tenant, id}));
    if (rows.empty()) return std::optional<StoredResponse>();
    return StoredResponse{id, tenant, rows.text(0, 0), parse_or_null(rows.text(0, 1)),
                          parse_or_null(rows.text(0, 2))};
  }
  Result<bool> remove(const std::string& tenant, const std::string& id) override {
    KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(
        auto rows,
        lease->exec("DELETE FROM serve_responses WHERE tenant = $1 AND id = $2", {tenant, id}));
    return rows.affected() > 0;
  }
  Result<void> delete_session(const std::string& tenant, const std::string& session) override {
    KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
    KERNEX_RETURN_IF_ERROR(lease->exec(
        "DELETE FROM serve_responses WHERE tenant = $1 AND session = $2", {tenant, session}));
    return {};
  }

 private:
  pg::Pool pool_;
};

}  // namespace

Result<std::unique_ptr<ResponseStore>> PgResponseStore::open(const pg::Options& options,
                                                             std::size_t pool_size) {
  auto store = std::make_unique<PgStore>(options, std::max<std::size_t>(1, pool_size / 4));
  KERNEX_RETURN_IF_ERROR(store->open());
  return std::unique_ptr<ResponseStore>(std::move(store));
}

}  // namespace kernex::server
