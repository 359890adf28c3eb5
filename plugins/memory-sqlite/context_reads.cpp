// A context build's reads in one read transaction, and the hot history that spares a hot session
// reading its history again. In WAL mode every statement outside a transaction opens and closes
// its own read transaction (a lock and an unlock on the -shm file each, and a look at the WAL
// index): one per build instead of one per statement.
#include "message_columns.hpp"
#include "sqlite_store.hpp"

namespace kernex::sqlite {

SqliteStore::Hold::Hold(SqliteStore& store) : store_(store), reading_(store.reading_here()) {
  if (!reading_) store_.mutex_.lock();
}

SqliteStore::Hold::~Hold() {
  if (reading_) {
    if (!held_) store_.resume_reads();
  } else if (held_) {
    store_.mutex_.unlock();
  }
}

void SqliteStore::Hold::unlock() {
  held_ = false;
  if (reading_)
    store_.pause_reads();
  else
    store_.mutex_.unlock();
}

void SqliteStore::Hold::lock() {
  if (reading_)
    store_.resume_reads();
  else
    store_.mutex_.lock();
  held_ = true;
}

void SqliteStore::begin_context_reads() {
  if (!hot_on_) return;
  if (reading_here()) {
    ++reader_depth_;
    return;
  }
  reader_lock_ = std::unique_lock(mutex_);
  reader_ = std::this_thread::get_id();
  reader_depth_ = 1;
  if (auto begin = db_->prepare("BEGIN"); begin) (void)begin->run();  // else: a statement each
}

void SqliteStore::end_context_reads() {
  if (!reading_here() || --reader_depth_ > 0) return;
  if (sqlite3_get_autocommit(db_->handle()) == 0) {
    if (auto commit = db_->prepare("COMMIT"); !commit || !commit->run())
      sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  reader_ = std::thread::id{};
  if (reader_lock_.owns_lock()) reader_lock_.unlock();
}

void SqliteStore::pause_reads() {
  if (sqlite3_get_autocommit(db_->handle()) == 0) {
    if (auto commit = db_->prepare("COMMIT"); !commit || !commit->run())
      sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  reader_lock_.unlock();
}

void SqliteStore::resume_reads() {
  reader_lock_.lock();
  if (auto begin = db_->prepare("BEGIN"); begin) (void)begin->run();
}

Result<void> SqliteStore::write(GroupCommit::Work work) {
  if (!reading_here()) return writer_->write(std::move(work));
  pause_reads();
  auto r = writer_->write(std::move(work));
  resume_reads();
  return r;
}

void SqliteStore::check_hot() {
  if (!hot_on_) return;  // hot_ keeps nothing then
  std::int64_t version = -1;
  if (auto stmt = db_->prepare("PRAGMA data_version"); stmt) {
    if (auto row = stmt->step(); row && *row) version = stmt->integer(0);
  }
  // Another connection committed (or the version could not be read): what hot_ holds may be old.
  if (version < 0 || version != data_version_) hot_.clear();
  data_version_ = version;
}

std::optional<std::vector<ContextEntry>> SqliteStore::as_stored(
    const std::vector<ContextEntry>& in) {
  std::vector<ContextEntry> out;
  out.reserve(in.size());
  for (const auto& e : in) {
    if (e.tool_calls.empty() && !e.tool_result && e.provider_state.is_null()) {
      out.push_back(e);  // no JSON column: stored and read back as it is
      continue;
    }
    auto columns = encode_columns(e);
    if (!columns) return std::nullopt;
    auto back = decode_columns({0, e.role, e.content, columns->calls, columns->result,
                                columns->state},
                               "memory-sqlite");
    if (!back) return std::nullopt;
    out.push_back(std::move(*back));
  }
  return out;
}

Result<void> SqliteStore::save_messages(const MemoryScope& scope,
                                        const std::string& conversation_id,
                                        std::optional<std::vector<ContextEntry>> stored,
                                        GroupCommit::Work work) {
  {
    Hold lock(*this);
    hot_.saving(scope.tenant(), conversation_id);
  }
  Result<void> r = fail(ErrorCode::Internal, "memory-sqlite: the save threw");
  try {
    r = write(std::move(work));
  } catch (...) {
    Hold lock(*this);
    hot_.saved(scope.tenant(), conversation_id, std::nullopt);
    throw;
  }
  Hold lock(*this);
  hot_.saved(scope.tenant(), conversation_id, r ? std::move(stored) : std::nullopt);
  return r;
}

}  // namespace kernex::sqlite
