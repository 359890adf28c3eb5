#include "openai_parked.hpp"

#include "sqlite_db.hpp"
#include "webhook_outbox.hpp"  // unix_ms_now

namespace kernex::server {
namespace {

// The calls of one run go in together: a restart never finds half of them.
Result<void> insert_all(sqlite3* db, const std::string& tenant, const std::string& session,
                        const std::string& run_id, const std::vector<std::string>& call_ids,
                        std::int64_t expires) {
  Statement st(db,
               "INSERT OR REPLACE INTO openai_parked (tenant, session, call_id, run_id, "
               "expires_ms) VALUES (?, ?, ?, ?, ?)");
  if (!st.ok()) return db_error(db, "park calls");
  for (const auto& id : call_ids) {
    st.reset();
    st.bind(1, tenant).bind(2, session).bind(3, id).bind(4, run_id).bind(5, expires);
    if (st.step() != SQLITE_DONE) return db_error(db, "park calls");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SqliteParkedStore>> SqliteParkedStore::open(
    const std::filesystem::path& file, std::chrono::seconds ttl) {
  KERNEX_ASSIGN_OR_RETURN(
      sqlite3 * db,
      open_serve_db(file, {"CREATE TABLE IF NOT EXISTS openai_parked (tenant TEXT NOT NULL, "
                           "session TEXT NOT NULL, call_id TEXT NOT NULL, run_id TEXT NOT NULL, "
                           "expires_ms INTEGER NOT NULL, PRIMARY KEY (tenant, session, call_id))",
                           "CREATE INDEX IF NOT EXISTS openai_parked_expiry ON "
                           "openai_parked(expires_ms)"}));
  auto writer = ServeWriter::of(file);
  if (!writer) {
    close_serve_db(db);
    return std::unexpected(writer.error());
  }
  return std::unique_ptr<SqliteParkedStore>(new SqliteParkedStore(db, std::move(*writer), ttl));
}

SqliteParkedStore::~SqliteParkedStore() { close_serve_db(db_); }

Result<void> SqliteParkedStore::park(const std::string& tenant, const std::string& session,
                                     const std::string& run_id,
                                     const std::vector<std::string>& call_ids) {
  if (call_ids.empty()) return {};
  const std::int64_t expires =
      unix_ms_now() + std::chrono::duration_cast<std::chrono::milliseconds>(ttl_).count();
  // One item of a batch: its savepoint keeps the run's calls together.
  return writer_->write(
      [&](sqlite3* db) { return insert_all(db, tenant, session, run_id, call_ids, expires); });
}

Result<std::size_t> SqliteParkedStore::prune_expired() {
  std::size_t pruned = 0;
  const std::int64_t now = unix_ms_now();
  KERNEX_RETURN_IF_ERROR(writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db, "DELETE FROM openai_parked WHERE expires_ms <= ?");
    if (!st.ok()) return db_error(db, "prune parked calls");
    st.bind(1, now);
    if (st.step() != SQLITE_DONE) return db_error(db, "prune parked calls");
    pruned = static_cast<std::size_t>(sqlite3_changes(db));
    return {};
  }));
  return pruned;
}

Result<void> SqliteParkedStore::delete_session(const std::string& tenant,
                                               const std::string& session) {
  return writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db, "DELETE FROM openai_parked WHERE tenant = ? AND session = ?");
    if (!st.ok()) return db_error(db, "forget parked calls");
    st.bind(1, tenant).bind(2, session);
    if (st.step() != SQLITE_DONE) return db_error(db, "forget parked calls");
    return {};
  });
}

Result<std::optional<std::string>> SqliteParkedStore::run_for(const std::string& tenant,
                                                              const std::string& session,
                                                              const std::string& call_id) {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               "SELECT run_id FROM openai_parked WHERE tenant = ? AND session = ? AND call_id = ? "
               "AND expires_ms > ?");
  if (!st.ok()) return db_error(db_, "read parked call");
  st.bind(1, tenant).bind(2, session).bind(3, call_id).bind(4, unix_ms_now());
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return db_error(db_, "read parked call");
  return std::optional<std::string>(st.text(0));
}

}  // namespace kernex::server
