// The PostgreSQL memory store: the SQLite store's behaviour on a server that many kernel
// processes share. Every call leases one pooled connection (so the store is thread-safe and a
// broken connection is replaced on the next call); writes that must be atomic run in one
// transaction; the writes a turn makes (exchange, usage, audit, facts, outcomes) go through one
// pg::Writer, so the turns of concurrent runs share batched commits; times are the server's clock,
// kept as UTC text "YYYY-MM-DD HH:MM:SS" like SQLite's, so comparisons are text comparisons and an
// export reads the same from either store.
#pragma once

#include <memory>

#include "kernex/memory.hpp"
#include "kernex/pg/pool.hpp"
#include "kernex/pg/writer.hpp"

namespace kernex::postgres {

struct StoreOptions {
  pg::Options connection;
  std::size_t pool_size = 4;
  std::size_t max_message_bytes = 4u << 20;  // one message's content, tool data included
};

class PgStore final : public MemoryStore {
 public:
  static Result<std::shared_ptr<PgStore>> open(const StoreOptions& options);

  // Every member of MemoryStore.
#include "kernex/memory_store_overrides.inc"

 private:
  PgStore(StoreOptions options)
      : options_(std::move(options)),
        pool_(std::make_unique<pg::Pool>(options_.connection, options_.pool_size)),
        writer_(std::make_unique<pg::Writer>(*pool_)) {}

  // One write through the batching writer (its statements commit with the batch's others).
  Result<void> write(const pg::Write& w) { return writer_->write(w); }
  // One statement on a leased connection (autocommit).
  Result<pg::Rows> query(std::string_view sql, std::initializer_list<pg::Param> params = {});
  template <class T>
  Result<T> transaction(const std::function<Result<T>(pg::Connection&)>& body) {
    return pool_->transaction<T>(body);
  }
  Result<std::vector<ContextEntry>> select_entries(std::string_view sql, const MemoryScope& scope,
                                                   const std::string& conversation_id,
                                                   std::size_t n, bool reverse);

  StoreOptions options_;
  std::unique_ptr<pg::Pool> pool_;
  std::unique_ptr<pg::Writer> writer_;  // after pool_: stopped (its queue committed) first
};

// Rows of the scheduled_tasks columns in kTaskColumns order -> Tasks.
std::vector<Task> read_tasks(const pg::Rows& rows);
// Clamps a count to what a bigint parameter holds.
inline std::int64_t count_param(std::size_t n) {
  return static_cast<std::int64_t>(std::min<std::size_t>(n, static_cast<std::size_t>(INT64_MAX)));
}

}  // namespace kernex::postgres
