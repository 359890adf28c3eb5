#include "approval_store.hpp"

#include <chrono>

#include "run_executor.hpp"
#include "serve_writer.hpp"
#include "sqlite_db.hpp"
#include "stored_json.hpp"

namespace kernex::server {
namespace {

// Text columns first, then the JSON ones, then the times: read_approval takes them in this order.
constexpr const char* kApprovalColumns =
    "id, tenant, session, run_id, key, tool, reason, status, decision, decision_reason, "
    "arguments, edited_arguments, created_at, expires_at, resolved_at";

StoredApproval read_approval(const Statement& st) {
  using A = StoredApproval;
  A a;
  int col = 0;
  for (auto text : {&A::id, &A::tenant, &A::session, &A::run_id, &A::key, &A::tool, &A::reason,
                    &A::status, &A::decision, &A::decision_reason})
    a.*text = st.text(col++);
  a.arguments = parse_untrusted(st.text(col++));
  if (!a.arguments.is_object()) a.arguments = Json::object();
  if (Json edited = parse_untrusted(st.text(col++)); edited.is_object())
    a.edited_arguments = std::move(edited);
  for (auto time : {&A::created_at, &A::expires_at, &A::resolved_at}) a.*time = st.integer(col++);
  return a;
}

class SqliteApprovalStore final : public ApprovalStore {
 public:
  SqliteApprovalStore(sqlite3* db, std::shared_ptr<ServeWriter> writer)
      : db_(db), writer_(std::move(writer)) {}
  ~SqliteApprovalStore() override { close_serve_db(db_); }
  SqliteApprovalStore(const SqliteApprovalStore&) = delete;
  SqliteApprovalStore& operator=(const SqliteApprovalStore&) = delete;

  Result<std::int64_t> now() override {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
#include "approval_store_overrides.inc"

 private:
  Result<std::vector<StoredApproval>> select(const std::string& where,
                                             const std::vector<std::string>& params);
  // Durable: the batch is fsynced before the write returns.
  Result<void> write(const ServeWriter::Work& work) { return writer_->write(work, true); }
  std::mutex mutex_;  // db_: the reads' connection
  sqlite3* db_;
  std::shared_ptr<ServeWriter> writer_;  // every write
};

}  // namespace

Json StoredApproval::to_json() const {
  Json j{{"approval_id", id},
         {"run_id", run_id},
         {"session_id", session},
         {"tool", tool},
         {"arguments", arguments},
         {"reason", reason},
         {"status", status},
         {"created_at", utc_time(created_at)},
         {"expires_at", utc_time(expires_at)}};
  if (status == "pending") return j;
  j["decision"] = decision;
  if (edited_arguments) j["edited_arguments"] = *edited_arguments;
  if (!decision_reason.empty()) j["decision_reason"] = decision_reason;
  j["resolved_at"] = utc_time(resolved_at);
  return j;
}

Result<std::unique_ptr<ApprovalStore>> ApprovalStore::open(const std::filesystem::path& file) {
  KERNEX_ASSIGN_OR_RETURN(
      sqlite3 * db,
      open_serve_db(
          file,
          {"CREATE TABLE IF NOT EXISTS approvals (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, "
           "session TEXT NOT NULL, run_id TEXT NOT NULL, key TEXT NOT NULL, tool TEXT NOT NULL, "
           "arguments TEXT NOT NULL, reason TEXT NOT NULL, status TEXT NOT NULL, decision TEXT, "
           "edited_arguments TEXT, decision_reason TEXT, created_at INTEGER NOT NULL, expires_at "
           "INTEGER NOT NULL, resolved_at INTEGER, UNIQUE (run_id, key))",
           "CREATE INDEX IF NOT EXISTS approvals_by_session ON approvals(tenant, session, status)",
           "CREATE TABLE IF NOT EXISTS approval_grants (tenant TEXT NOT NULL, session TEXT NOT "
           "NULL, tool TEXT NOT NULL, PRIMARY KEY (tenant, session, tool))"}));
  auto writer = ServeWriter::of(file);
  if (!writer) {
    close_serve_db(db);
    return std::unexpected(writer.error());
  }
  return std::make_unique<SqliteApprovalStore>(db, std::move(*writer));
}

Result<StoredApproval> SqliteApprovalStore::insert(const StoredApproval& a) {
  const std::string arguments = stored_text(a.arguments);
  KERNEX_RETURN_IF_ERROR(write([&](sqlite3* db) -> Result<void> {
    Statement st(db,
                 "INSERT INTO approvals (id, tenant, session, run_id, key, tool, arguments, "
                 "reason, status, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                 "'pending', ?, ?)");
    if (!st.ok()) return db_error(db, "approval insert");
    st.bind(1, a.id).bind(2, a.tenant).bind(3, a.session).bind(4, a.run_id).bind(5, a.key);
    st.bind(6, a.tool).bind(7, arguments).bind(8, a.reason);
    st.bind(9, a.created_at).bind(10, a.expires_at);
    if (st.step() != SQLITE_DONE) return db_error(db, "approval insert");
    return {};
  }));
  return a;
}

Result<std::vector<StoredApproval>> SqliteApprovalStore::select(
    const std::string& where, const std::vector<std::string>& params) {
  std::lock_guard lock(mutex_);
  Statement st(db_, (std::string("SELECT ") + kApprovalColumns + " FROM approvals WHERE " + where +
                     " ORDER BY created_at, rowid")
                        .c_str());
  if (!st.ok()) return db_error(db_, "approval read");
  for (std::size_t i = 0; i < params.size(); ++i) st.bind(static_cast<int>(i + 1), params[i]);
  std::vector<StoredApproval> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_approval(st));
  if (rc != SQLITE_DONE) return db_error(db_, "approval read");
  return out;
}

Result<std::optional<StoredApproval>> SqliteApprovalStore::by_id(const std::string& tenant,
                                                                 const std::string& id) {
  const std::vector<std::string> params{id, tenant};
  KERNEX_ASSIGN_OR_RETURN(auto rows, select("id = ? AND tenant = ?", params));
  if (rows.empty()) return std::nullopt;
  return rows.front();
}

Result<std::optional<StoredApproval>> SqliteApprovalStore::by_key(const std::string& tenant,
                                                                  const std::string& run_id,
                                                                  const std::string& key) {
  KERNEX_ASSIGN_OR_RETURN(auto rows,
                          select("tenant = ? AND run_id = ? AND key = ?", {tenant, run_id, key}));
  if (rows.empty()) return std::nullopt;
  return rows.front();
}

Result<std::vector<StoredApproval>> SqliteApprovalStore::pending(const std::string& tenant,
                                                                 const std::string& session) {
  return select("tenant = ? AND session = ? AND status = 'pending'", {tenant, session});
}

Result<bool> SqliteApprovalStore::resolve(const StoredApproval& a) {
  const std::string edited = a.edited_arguments ? stored_text(*a.edited_arguments) : std::string();
  bool won = false;  // set by the item, which may run again: it only overwrites
  KERNEX_RETURN_IF_ERROR(write([&](sqlite3* db) -> Result<void> {
    Statement st(db,
                 "UPDATE approvals SET status = ?, decision = ?, edited_arguments = ?, "
                 "decision_reason = ?, resolved_at = ? WHERE id = ? AND tenant = ? AND status = "
                 "'pending'");
    if (!st.ok()) return db_error(db, "approval resolve");
    st.bind(1, a.status).bind(2, a.decision).bind(3, edited);
    st.bind(4, a.decision_reason).bind(5, a.resolved_at).bind(6, a.id).bind(7, a.tenant);
    if (st.step() != SQLITE_DONE) return db_error(db, "approval resolve");
    won = sqlite3_changes(db) == 1;
    return {};
  }));
  return won;
}

Result<bool> SqliteApprovalStore::granted(const std::string& tenant, const std::string& session,
                                          const std::string& tool) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT 1 FROM approval_grants WHERE tenant = ? AND session = ? AND tool = ?");
  if (!st.ok()) return db_error(db_, "grant read");
  st.bind(1, tenant).bind(2, session).bind(3, tool);
  const int rc = st.step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_error(db_, "grant read");
  return rc == SQLITE_ROW;
}

Result<void> SqliteApprovalStore::grant(const std::string& tenant, const std::string& session,
                                        const std::string& tool) {
  return write([&](sqlite3* db) -> Result<void> {
    Statement st(db,
                 "INSERT OR IGNORE INTO approval_grants (tenant, session, tool) VALUES (?, ?, ?)");
    if (!st.ok()) return db_error(db, "grant write");
    st.bind(1, tenant).bind(2, session).bind(3, tool);
    if (st.step() != SQLITE_DONE) return db_error(db, "grant write");
    return {};
  });
}

Result<void> SqliteApprovalStore::delete_session(const std::string& tenant,
                                                 const std::string& session) {
  return write([&](sqlite3* db) -> Result<void> {
    for (const char* sql : {"DELETE FROM approvals WHERE tenant = ? AND session = ?",
                            "DELETE FROM approval_grants WHERE tenant = ? AND session = ?"}) {
      Statement st(db, sql);
      if (!st.ok() || (st.bind(1, tenant).bind(2, session), st.step()) != SQLITE_DONE)
        return db_error(db, "approval delete");
    }
    return {};
  });
}

}  // namespace kernex::server
