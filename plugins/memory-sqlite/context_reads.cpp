// A context build's reads in one read transaction (kernex/context_reads.hpp). In WAL mode every
// statement outside a transaction opens and closes its own read transaction: a read mark locked
// and unlocked on the -shm file (two fcntl calls) and a look at the WAL index, about twenty
// fcntl calls a turn. Inside the bracket the reading thread holds mutex_ and one transaction, so
// its calls take no lock of their own (Hold); a write asked for meanwhile steps out of both
// (commit, release) while it waits on the writer, and back in after.
#include <cstdlib>
#include <string_view>

#include "sqlite_store.hpp"

namespace kernex::sqlite {
namespace {

// KERNEX_CONTEXT_READS=each: every read its own transaction, as before (the benches' baseline).
bool one_transaction_from_env() {
  const char* v = std::getenv("KERNEX_CONTEXT_READS");
  return v == nullptr || std::string_view(v) != "each";
}

}  // namespace

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

bool SqliteStore::context_reads_in_one() {
  static const bool one = one_transaction_from_env();
  return one;
}

void SqliteStore::begin_context_reads() {
  if (!context_reads_in_one()) return;
  if (reading_here()) {
    ++reader_depth_;
    return;
  }
  reader_lock_ = std::unique_lock(mutex_);
  reader_depth_ = 1;
  resume_transaction();
}

void SqliteStore::end_context_reads() {
  if (!reading_here() || --reader_depth_ > 0) return;
  pause_reads();
}

void SqliteStore::resume_transaction() {
  reader_.store(std::this_thread::get_id());
  // Should BEGIN fail, each read is its own transaction, as without the bracket.
  (void)db_->exec("BEGIN");
}

void SqliteStore::pause_reads() {
  if (sqlite3_get_autocommit(db_->handle()) == 0 && !db_->exec("COMMIT"))
    (void)db_->exec("ROLLBACK");
  reader_.store(std::thread::id{});
  reader_lock_.unlock();
}

void SqliteStore::resume_reads() {
  reader_lock_.lock();
  resume_transaction();
}

Result<void> SqliteStore::write(GroupCommit::Work work) {
  if (!reading_here()) return writer_->write(std::move(work));
  Hold out(*this);  // inside the bracket: takes nothing
  out.unlock();     // out of the transaction and mutex_ while the writer commits (it takes both)
  return writer_->write(std::move(work));
}  // ~Hold: back in

}  // namespace kernex::sqlite
