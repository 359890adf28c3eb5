#include "run_journal_store.hpp"

#include <mutex>

#include "serve_writer.hpp"
#include "sqlite_db.hpp"
#include "stored_json.hpp"

namespace kernex::server {
namespace {

class SqliteJournalStore final : public JournalStore {
 public:
  SqliteJournalStore(sqlite3* db, std::shared_ptr<ServeWriter> writer)
      : db_(db), writer_(std::move(writer)) {}
  ~SqliteJournalStore() override { close_serve_db(db_); }
  SqliteJournalStore(const SqliteJournalStore&) = delete;
  SqliteJournalStore& operator=(const SqliteJournalStore&) = delete;

  std::shared_ptr<RunJournal> journal(const std::string& tenant, const std::string& run_id,
                                      bool empty) override;
  Result<void> forget(const std::string& tenant, const std::string& run_id) override;

  Result<std::optional<Response>> response(const std::string& run_id, std::uint32_t turn);
  Result<void> record_response(const std::string& run_id, std::uint32_t turn,
                               const Response& response);
  Result<RunJournal::ToolEntry> tool(const std::string& run_id, const std::string& key);
  Result<void> tool_started(const std::string& run_id, const std::string& key,
                            const ToolCall& call);
  Result<void> tool_finished(const std::string& run_id, const std::string& key,
                             const ToolResult& result);

 private:
  std::mutex mutex_;  // db_: the reads' connection
  sqlite3* db_;
  // Writes ride serve.db's batches. A tool's start and end are fsynced (durable): they decide
  // whether a tool runs again, even after a power loss. A model's answer is queued without a wait
  // or an fsync: the queue and the WAL keep their order, so the durable start of the first tool it
  // asks for (or the approval it needs, or the run's end) commits and fsyncs the answer too, and a
  // crash before that loses an answer no tool acted on, which a resumed run asks the model for
  // again.
  std::shared_ptr<ServeWriter> writer_;
};

// One run's view of the store. Run ids are random and unique across tenants in serve.db.
// `empty` (a new run's first attempt): reads answer nothing without a read transaction until this
// journal records something; from then on they ask the store as usual.
class StoredJournal final : public RunJournal {
 public:
  StoredJournal(SqliteJournalStore& store, std::string run_id, bool empty)
      : store_(store), run_id_(std::move(run_id)), empty_(empty) {}
  Result<std::optional<Response>> response(std::uint32_t turn) override {
    if (empty_) return std::nullopt;
    return store_.response(run_id_, turn);
  }
  Result<void> record_response(std::uint32_t turn, const Response& response) override {
    empty_ = false;
    return store_.record_response(run_id_, turn, response);
  }
  Result<ToolEntry> tool(const std::string& key) override {
    if (empty_) return ToolEntry{};
    return store_.tool(run_id_, key);
  }
  Result<void> tool_started(const std::string& key, const ToolCall& call) override {
    empty_ = false;
    return store_.tool_started(run_id_, key, call);
  }
  Result<void> tool_finished(const std::string& key, const ToolResult& result) override {
    empty_ = false;
    return store_.tool_finished(run_id_, key, result);
  }

 private:
  SqliteJournalStore& store_;
  std::string run_id_;
  bool empty_;  // one run's thread at a time uses a journal
};

}  // namespace

Result<std::unique_ptr<JournalStore>> JournalStore::open(const std::filesystem::path& file) {
  KERNEX_ASSIGN_OR_RETURN(
      sqlite3 * db,
      open_serve_db(file,
                    {"CREATE TABLE IF NOT EXISTS run_responses (run_id TEXT NOT NULL, turn "
                     "INTEGER NOT NULL, response TEXT NOT NULL, PRIMARY KEY (run_id, turn))",
                     "CREATE TABLE IF NOT EXISTS run_tools (run_id TEXT NOT NULL, key TEXT "
                     "NOT NULL, call TEXT NOT NULL, result TEXT, PRIMARY KEY (run_id, key))"}));
  auto writer = ServeWriter::of(file);
  if (!writer) {
    close_serve_db(db);
    return std::unexpected(writer.error());
  }
  return std::make_unique<SqliteJournalStore>(db, std::move(*writer));
}

std::shared_ptr<RunJournal> SqliteJournalStore::journal(const std::string&,
                                                        const std::string& run_id, bool empty) {
  return std::make_shared<StoredJournal>(*this, run_id, empty);
}

// Queued behind the run's end, not waited on: a journal only resumes an unfinished run, so one
// that a kill -9 leaves behind a finished run is never read (and goes with its session).
Result<void> SqliteJournalStore::forget(const std::string&, const std::string& run_id) {
  writer_->submit(
      [run_id](sqlite3* db) -> Result<void> {
        for (const char* sql : {"DELETE FROM run_responses WHERE run_id = ?",
                                "DELETE FROM run_tools WHERE run_id = ?"}) {
          Statement st(db, sql);
          if (!st.ok() || (st.bind(1, run_id), st.step()) != SQLITE_DONE)
            return db_error(db, "journal forget");
        }
        return {};
      },
      "journal of run " + run_id);
  return {};
}

Result<std::optional<Response>> SqliteJournalStore::response(const std::string& run_id,
                                                             std::uint32_t turn) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT response FROM run_responses WHERE run_id = ? AND turn = ?");
  if (!st.ok()) return db_error(db_, "journal read");
  st.bind(1, run_id).bind(2, static_cast<std::int64_t>(turn));
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) return db_error(db_, "journal read");
  Json j = parse_untrusted(st.text(0));
  try {
    return j.get<Response>();
  } catch (const std::exception& e) {
    return fail(ErrorCode::Io, "serve.db: run " + run_id + " turn " + std::to_string(turn) +
                                   ": unreadable answer: " + e.what());
  }
}

Result<void> SqliteJournalStore::record_response(const std::string& run_id, std::uint32_t turn,
                                                 const Response& response) {
  // Queued, not waited on (see writer_): the first durable write after it (a tool's start, an
  // approval asked, the run's end) commits it in order, and a kill -9 before that loses an answer
  // nothing acted on yet. A run that ends on this answer pays one commit for both.
  writer_->submit(
      [run_id, turn, text = stored_text(Json(response))](sqlite3* db) -> Result<void> {
        Statement st(
            db, "INSERT OR REPLACE INTO run_responses (run_id, turn, response) VALUES (?, ?, ?)");
        if (!st.ok()) return db_error(db, "journal write");
        st.bind(1, run_id).bind(2, static_cast<std::int64_t>(turn)).bind(3, text);
        if (st.step() != SQLITE_DONE) return db_error(db, "journal write");
        return {};
      },
      "answer of run " + run_id);
  return {};
}

Result<RunJournal::ToolEntry> SqliteJournalStore::tool(const std::string& run_id,
                                                       const std::string& key) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT result FROM run_tools WHERE run_id = ? AND key = ?");
  if (!st.ok()) return db_error(db_, "journal read");
  st.bind(1, run_id).bind(2, key);
  const int rc = st.step();
  RunJournal::ToolEntry entry;
  if (rc == SQLITE_DONE) return entry;
  if (rc != SQLITE_ROW) return db_error(db_, "journal read");
  entry.started = true;
  const std::string text = st.text(0);
  if (text.empty()) return entry;
  try {
    entry.result = parse_untrusted(text).get<ToolResult>();
  } catch (const std::exception&) {
    // Started, its result unreadable: reported as interrupted, never run again.
  }
  return entry;
}

Result<void> SqliteJournalStore::tool_started(const std::string& run_id, const std::string& key,
                                              const ToolCall& call) {
  const std::string text = stored_text(Json(call));
  return writer_->write(
      [&](sqlite3* db) -> Result<void> {
        // A key is started once: a second start (it cannot happen in one run) must not erase a
        // result.
        Statement st(db, "INSERT OR IGNORE INTO run_tools (run_id, key, call) VALUES (?, ?, ?)");
        if (!st.ok()) return db_error(db, "journal write");
        st.bind(1, run_id).bind(2, key).bind(3, text);
        if (st.step() != SQLITE_DONE) return db_error(db, "journal write");
        return {};
      },
      true);
}

Result<void> SqliteJournalStore::tool_finished(const std::string& run_id, const std::string& key,
                                               const ToolResult& result) {
  const std::string text = stored_text(Json(result));
  return writer_->write(
      [&](sqlite3* db) -> Result<void> {
        Statement st(db, "UPDATE run_tools SET result = ? WHERE run_id = ? AND key = ?");
        if (!st.ok()) return db_error(db, "journal write");
        st.bind(1, text).bind(2, run_id).bind(3, key);
        if (st.step() != SQLITE_DONE) return db_error(db, "journal write");
        return {};
      },
      true);
}

}  // namespace kernex::server
