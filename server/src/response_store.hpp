// The Responses API's stored responses (`store`, the default): what GET /v1/responses/{id}
// returns and what `previous_response_id` continues from. Rows belong to one tenant: a lookup
// with another tenant's id finds nothing. A response made in a named session goes when the
// session is forgotten.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "serve_writer.hpp"

struct sqlite3;

namespace kernex::pg {
struct Options;
}

namespace kernex::server {

struct StoredResponse {
  std::string id, tenant, session;
  Json response;      // the response object, as the client got it
  Json conversation;  // the ContextEntry list a continuation starts from (input and output)
  // The run that made it. In PostgreSQL a put is stored only while the run's row is there: in a
  // cluster the end that puts it can run on one node after another node's DELETE of the session
  // found the run ended and deleted its rows, and the response must not outlive that DELETE.
  // A put's fence only: not stored, so empty in what get() returns.
  std::string run_id;
};

class ResponseStore {
 public:
  virtual ~ResponseStore() = default;
  // Stored, or replaced for the same tenant; in PostgreSQL only while `run_id`'s row exists.
  virtual Result<void> put(const StoredResponse& response) = 0;
  virtual Result<std::optional<StoredResponse>> get(const std::string& tenant,
                                                    const std::string& id) = 0;
  // Whether a row was deleted.
  virtual Result<bool> remove(const std::string& tenant, const std::string& id) = 0;
  virtual Result<void> delete_session(const std::string& tenant, const std::string& session) = 0;
};

// In <data_dir>/serve.db (table openai_responses), beside the runs.
class SqliteResponseStore final : public ResponseStore {
 public:
  static Result<std::unique_ptr<SqliteResponseStore>> open(const std::filesystem::path& file);
  ~SqliteResponseStore() override;
  Result<void> put(const StoredResponse& response) override;
  Result<std::optional<StoredResponse>> get(const std::string& tenant,
                                            const std::string& id) override;
  Result<bool> remove(const std::string& tenant, const std::string& id) override;
  Result<void> delete_session(const std::string& tenant, const std::string& session) override;

 private:
  SqliteResponseStore(sqlite3* db, std::shared_ptr<ServeWriter> writer)
      : db_(db), writer_(std::move(writer)) {}
  std::mutex mutex_;  // db_: the reads' connection
  sqlite3* db_;
  std::shared_ptr<ServeWriter> writer_;  // every write: serve.db's batches
};

// In PostgreSQL (table serve_responses), for nodes sharing their runs there.
struct PgResponseStore {
  static Result<std::unique_ptr<ResponseStore>> open(const pg::Options& options,
                                                     std::size_t pool_size);
};

}  // namespace kernex::server
