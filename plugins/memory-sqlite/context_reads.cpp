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

SqliteStore::Hold::Hold(SqliteStore& store, Mode mode) : store_(store) {
  if (!store_.reading_here()) {
    store_.mutex_.lock();
    return;
  }
  if (mode == Mode::Read) {
    reading_ = true;  // the bracket holds mutex_ already
    return;
  }
  // A write in a transaction of its own: out of the bracket's, then mutex_ as any other thread.
  saved_depth_ = store_.pause_reads();
  store_.mutex_.lock();
  resume_after_ = true;
}

SqliteStore::Hold::~Hold() {
  if (held_ && !reading_) store_.mutex_.unlock();
  if (reading_ && !held_) store_.resume_reads(saved_depth_);
  if (resume_after_) store_.resume_reads(saved_depth_);
}

void SqliteStore::Hold::unlock() {
  held_ = false;
  if (reading_)
    saved_depth_ = store_.pause_reads();
  else
    store_.mutex_.unlock();
}

void SqliteStore::Hold::lock() {
  if (reading_)
    store_.resume_reads(saved_depth_);
  else
    store_.mutex_.lock();
  held_ = true;
}

bool SqliteStore::context_reads_in_one() {
  static const bool one = one_transaction_from_env();
  return one;
}

// reader_ and reader_depth_ change only while this thread holds mutex_.
void SqliteStore::begin_context_reads() {
  if (!context_reads_in_one()) return;
  if (reading_here()) {
    ++reader_depth_;
    return;
  }
  mutex_.lock();
  resume_transaction(1);
}

void SqliteStore::end_context_reads() {
  if (!reading_here() || --reader_depth_ > 0) return;
  (void)pause_reads();
}

void SqliteStore::resume_transaction(int depth) {
  reader_.store(std::this_thread::get_id());
  reader_depth_ = depth;
  // Should BEGIN fail, each read is its own transaction, as without the bracket. Cached, not
  // exec: a parse of BEGIN and of COMMIT a turn was 5 % of the server's CPU in bench/serve's rps
  // phase (SQLite's parser allocates kilobytes, and that malloc consolidated the heap's fastbins).
  (void)db_->run_cached("BEGIN");
}

int SqliteStore::pause_reads() {
  if (sqlite3_get_autocommit(db_->handle()) == 0 && !db_->run_cached("COMMIT"))
    (void)db_->exec("ROLLBACK");
  const int depth = reader_depth_;
  reader_depth_ = 0;
  reader_.store(std::thread::id{});
  mutex_.unlock();
  return depth;
}

void SqliteStore::resume_reads(int depth) {
  mutex_.lock();
  resume_transaction(depth);
}

Result<void> SqliteStore::write(GroupCommit::Work work) {
  if (!reading_here()) return writer_->write(std::move(work));
  Hold out(*this);  // inside the bracket: takes nothing
  out.unlock();     // out of the transaction and mutex_ while the writer commits (it takes both)
  return writer_->write(std::move(work));
}  // ~Hold: back in

}  // namespace kernex::sqlite
