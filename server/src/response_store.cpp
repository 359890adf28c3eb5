#include "response_store.hpp"

#include "kernex/log.hpp"
#include "sqlite_db.hpp"
#include "stored_json.hpp"

namespace kernex::server {
Result<std::unique_ptr<SqliteResponseStore>> SqliteResponseStore::open(
    const std::filesystem::path& file) {
  KERNEX_ASSIGN_OR_RETURN(
      sqlite3 * db,
      open_serve_db(file,
                    {"CREATE TABLE IF NOT EXISTS openai_responses (id TEXT PRIMARY KEY, tenant "
                     "TEXT NOT NULL, session TEXT NOT NULL, response TEXT NOT NULL, conversation "
                     "TEXT NOT NULL)",
                     "CREATE INDEX IF NOT EXISTS openai_responses_by_session ON "
                     "openai_responses(tenant, session)"}));
  auto writer = ServeWriter::of(file);
  if (!writer) {
    close_serve_db(db);
    return std::unexpected(writer.error());
  }
  return std::unique_ptr<SqliteResponseStore>(new SqliteResponseStore(db, std::move(*writer)));
}

SqliteResponseStore::~SqliteResponseStore() { close_serve_db(db_); }

Result<void> SqliteResponseStore::put(const StoredResponse& r) {
  const std::string response = stored_text(r.response), conversation = stored_text(r.conversation);
  return writer_->write([&](sqlite3* db) -> Result<void> {
    // An id another tenant holds is not taken over: the row stays theirs.
    Statement st(db,
                 "INSERT INTO openai_responses (id, tenant, session, response, conversation) "
                 "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET session = "
                 "excluded.session, response = excluded.response, conversation = "
                 "excluded.conversation WHERE tenant = excluded.tenant");
    if (!st.ok()) return db_error(db, "store response");
    st.bind(1, r.id).bind(2, r.tenant).bind(3, r.session).bind(4, response).bind(5, conversation);
    if (st.step() != SQLITE_DONE) return db_error(db, "store response");
    if (sqlite3_changes(db) == 0)
      return fail(ErrorCode::Usage, "response id " + r.id + " belongs to another tenant");
    return {};
  });
}

Result<std::optional<StoredResponse>> SqliteResponseStore::get(const std::string& tenant,
                                                               const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st(db_,
               "SELECT session, response, conversation FROM openai_responses WHERE tenant = ? AND "
               "id = ?");
  if (!st.ok()) return db_error(db_, "read response");
  st.bind(1, tenant).bind(2, id);
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<StoredResponse>();
  if (rc != SQLITE_ROW) return db_error(db_, "read response");
  return StoredResponse{id, tenant, st.text(0), stored_json(st.text(1)), stored_json(st.text(2)),
                        ""};
}

Result<bool> SqliteResponseStore::remove(const std::string& tenant, const std::string& id) {
  bool removed = false;  // set by the item, which may run again: it only overwrites
  KERNEX_RETURN_IF_ERROR(writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db, "DELETE FROM openai_responses WHERE tenant = ? AND id = ?");
    if (!st.ok()) return db_error(db, "delete response");
    st.bind(1, tenant).bind(2, id);
    if (st.step() != SQLITE_DONE) return db_error(db, "delete response");
    removed = sqlite3_changes(db) > 0;
    return {};
  }));
  return removed;
}

Result<void> SqliteResponseStore::delete_session(const std::string& tenant,
                                                 const std::string& session) {
  KERNEX_RETURN_IF_ERROR(writer_->write([&](sqlite3* db) -> Result<void> {
    Statement st(db, "DELETE FROM openai_responses WHERE tenant = ? AND session = ?");
    if (!st.ok()) return db_error(db, "delete responses");
    st.bind(1, tenant).bind(2, session);
    if (st.step() != SQLITE_DONE) return db_error(db, "delete responses");
    return {};
  }));
  // Deleted rows are zeroed (secure_delete); older copies of their pages may be in the WAL.
  std::lock_guard lock(mutex_);
  if (auto r = truncate_wal(db_); !r) log(LogLevel::Warn, "serve: " + r.error().describe());
  return {};
}

}  // namespace kernex::server
