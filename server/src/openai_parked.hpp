// Runs that stopped on the client's tool calls ("parked"), by call id: the client's next request
// carrying the results finds the run, whose stored result holds the turn so far (the run's own
// tool results included), and goes on from there. The index is durable beside the runs (serve.db,
// or PostgreSQL in cluster mode), so a restart or another node resumes the turn. Rows belong to a
// tenant and a session (a lookup that names another finds nothing) and expire after
// serve.openai.parked_ttl_s; a request whose calls are not found is taken as plain context
// (OpenAI's own behaviour).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "serve_writer.hpp"

namespace kernex::pg {
struct Options;
}

namespace kernex::server {

class ParkedStore {
 public:
  virtual ~ParkedStore() = default;
  // `run_id` of `tenant` in `session` ("" without one) stopped on `call_ids`. A call id parked
  // again (models reuse ids like "call_0") names the newest run. In PostgreSQL only while the
  // run's row exists (as ResponseStore::put): no row outlives a DELETE of the session.
  virtual Result<void> park(const std::string& tenant, const std::string& session,
                            const std::string& run_id,
                            const std::vector<std::string>& call_ids) = 0;
  // The run parked on `call_id` in the tenant's session, unless expired.
  virtual Result<std::optional<std::string>> run_for(const std::string& tenant,
                                                     const std::string& session,
                                                     const std::string& call_id) = 0;
  // Deletes the expired rows of every tenant (run_for never finds them): called periodically by
  // the server (server.cpp), not by every park. How many went.
  virtual Result<std::size_t> prune_expired() = 0;
  // The session's rows, when it is forgotten (DELETE of the session).
  virtual Result<void> delete_session(const std::string& tenant, const std::string& session) = 0;
};

// In <data_dir>/serve.db (table openai_parked), expiry on this process's clock. Writes ride
// serve.db's batches (serve_writer.hpp); reads use the store's own connection.
class SqliteParkedStore final : public ParkedStore {
 public:
  static Result<std::unique_ptr<SqliteParkedStore>> open(const std::filesystem::path& file,
                                                         std::chrono::seconds ttl);
  ~SqliteParkedStore() override;
  Result<void> park(const std::string& tenant, const std::string& session,
                    const std::string& run_id, const std::vector<std::string>& call_ids) override;
  Result<std::optional<std::string>> run_for(const std::string& tenant, const std::string& session,
                                             const std::string& call_id) override;
  Result<std::size_t> prune_expired() override;
  Result<void> delete_session(const std::string& tenant, const std::string& session) override;

 private:
  SqliteParkedStore(sqlite3* db, std::shared_ptr<ServeWriter> writer, std::chrono::seconds ttl)
      : db_(db), writer_(std::move(writer)), ttl_(ttl) {}
  std::mutex mutex_;  // db_: the reads' connection
  sqlite3* db_;
  std::shared_ptr<ServeWriter> writer_;
  std::chrono::seconds ttl_;
};

// In PostgreSQL (serve_openai_parked, cluster_ops_schema.cpp), expiry on the database's clock:
// any node resumes a turn another node parked.
struct PgParkedStore {
  static Result<std::unique_ptr<ParkedStore>> open(const pg::Options& options,
                                                   std::chrono::seconds ttl);
};

}  // namespace kernex::server
