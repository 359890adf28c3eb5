// The SQLite memory store. One connection per store object, guarded by a mutex; several
// processes may share the file (WAL, busy timeout, BEGIN IMMEDIATE for writes). A turn's writes
// (a new conversation, audit rows, the exchange) go through one group-commit writer: the runs'
// turns share its batches, and a turn's new conversation rides its first commit.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>

#include "hot_history.hpp"
#include "kernex/context_reads.hpp"
#include "kernex/group_commit.hpp"
#include "kernex/memory.hpp"
#include "sqlite_db.hpp"

namespace kernex::sqlite {

struct StoreOptions {
  std::filesystem::path path;
  OpenOptions open;
  std::size_t max_message_bytes = 4u << 20;  // one message's content, tool data included
};

class SqliteStore final : public MemoryStore, public ContextReadScope {
 public:
  static Result<std::shared_ptr<SqliteStore>> open(const StoreOptions& options);

  // Every member of MemoryStore.
#include "kernex/memory_store_overrides.inc"

  // A context build's reads in one read transaction (context_reads.cpp): this thread holds
  // mutex_ until the end.
  void begin_context_reads() override;
  void end_context_reads() override;

 private:
  // mutex_ for one call, unless this thread's context reads hold it already: the call then reads
  // in their transaction, and unlock()/lock() step out of it and back (for a write through the
  // writer). Mode::Write is for a call that runs its own transaction on the connection (BEGIN
  // IMMEDIATE): on the reading thread it steps out of the bracket for the whole call.
  class Hold {
   public:
    enum class Mode { Read, Write };
    explicit Hold(SqliteStore& store, Mode mode = Mode::Read);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    void unlock();
    void lock();

   private:
    SqliteStore& store_;
    bool reading_ = false;       // inside this thread's context reads, which hold mutex_
    bool held_ = true;           // by this Hold or the bracket
    bool resume_after_ = false;  // Mode::Write stepped out of the bracket
    int saved_depth_ = 0;        // the bracket's nesting while stepped out
  };
  static bool context_reads_in_one();  // KERNEX_CONTEXT_READS=each: no
  bool reading_here() const { return reader_.load() == std::this_thread::get_id(); }
  void resume_transaction(int depth);  // with mutex_ held: this thread's, a transaction begun
  int pause_reads();                   // the transaction ended, mutex_ released: the nesting
  void resume_reads(int depth);        // mutex_ taken again, a new transaction begun
  // writer_->write, out of this thread's context reads while it waits (the batch takes mutex_).
  Result<void> write(GroupCommit::Work work);
  // Under mutex_: hot_ as the file is, cleared when another connection committed since.
  void check_hot();
  // The JSON columns of an exchange's messages, encoded once for its insert and for hot_; an
  // error fails the save before anything is written.
  static Result<std::vector<EncodedColumns>> encode_exchange(const std::vector<ContextEntry>& in);
  // The messages of an exchange as hot_ keeps them: as a read would return them once decoded.
  static std::vector<HotMessage> as_stored(const std::vector<ContextEntry>& in,
                                           const std::vector<EncodedColumns>& columns);
  // A save of `conversation_id`'s messages: hot_ is told when it begins and how it ended.
  Result<void> save_messages(const MemoryScope& scope, const std::string& conversation_id,
                             std::optional<std::vector<HotMessage>> stored, GroupCommit::Work work);
  SqliteStore(std::unique_ptr<Db> db, StoreOptions options);
  // Commits the rows still waiting for a batch (new conversations, audit rows), before a read
  // or write that must see them.
  void settle();
  // A conversation whose lazily queued insert failed: the calls that name it later get the
  // cause (under mutex_). Bounded: the oldest are forgotten first.
  void remember_failed(const std::string& tenant, const std::string& id, Error cause);
  // The error of a call naming a conversation that is not there (under mutex_).
  Error no_conversation(const MemoryScope& scope, const std::string& id) const;
  // Queues a lazy write, counted until it is answered.
  void submit_lazy(GroupCommit::Work work, GroupCommit::Done done = {});

  Result<std::vector<ContextEntry>> select_entries(const char* sql, const MemoryScope& scope,
                                                   const std::string& conversation_id,
                                                   std::size_t n, bool reverse);
  Result<void> insert_message(const std::string& conversation_id, const ContextEntry& entry,
                              const EncodedColumns& columns);
  // Validates an exchange before anything is written (nothing of a bad one is saved).
  Result<void> check_exchange(const std::vector<ContextEntry>& entries) const;
  // The writes themselves, for callers already inside a write transaction.
  Result<void> insert_exchange(const MemoryScope& scope, const std::string& conversation_id,
                               const std::vector<ContextEntry>& entries,
                               const std::vector<EncodedColumns>& columns);
  // Inside a write transaction: the user messages above the recall watermark into the
  // full-text index (migration 010).
  Result<void> index_for_recall();
  // Whether a user message above the watermark could be one `q` finds (it is not in the asking
  // conversation's history window): recall indexes them first. Under mutex_.
  Result<bool> recall_needs_index(const MemoryScope& scope, const RecallQuery& q,
                                  std::int64_t boundary);
  Result<void> insert_usage(const MemoryScope& scope, const UsageRecord& record);
  Result<void> insert_audit(const MemoryScope& scope, const AuditRecord& rec,
                            const std::string& args);
  Result<std::vector<Task>> select_tasks(Stmt& stmt);
  Result<void> owned_conversation(const MemoryScope& scope, const Json& row,
                                  const std::string& where);
  Result<void> reschedule(const MemoryScope& scope, const Task& task);
  // The scope's task `id` read under the write lock; a task of another tenant is not found.
  Result<Task> held_task(const MemoryScope& scope, const std::string& id);

  std::mutex mutex_;
  std::unique_ptr<Db> db_;
  // Conversations opened but not committed yet (their row rides the turn's batch), by scope and
  // key, so a second open of the same key in this process finds the same one. Under mutex_.
  struct Pending {
    std::string id;
    std::chrono::steady_clock::time_point opened;  // its idle time counts from here
  };
  std::map<std::tuple<std::string, std::string, std::string, std::string>, Pending> pending_;
  static constexpr std::size_t kMaxFailedConversations = 1024;
  std::map<std::pair<std::string, std::string>, Error> failed_;  // by tenant and id
  std::deque<std::pair<std::string, std::string>> failed_order_;
  std::atomic<std::size_t> lazy_ = 0;  // lazy writes queued and not answered yet
  // The context reads (begin_context_reads): the thread in them while it holds mutex_, and their
  // nesting; both change only under mutex_.
  std::atomic<std::thread::id> reader_{};
  int reader_depth_ = 0;
  // User messages this process saved above the recall watermark since it last indexed them.
  static constexpr std::size_t kIndexBatch = 32;
  std::atomic<std::size_t> unindexed_ = 0;
  StoreOptions options_;
  // Hot sessions' newest messages (under mutex_), current as of PRAGMA data_version's value.
  // KERNEX_MEMORY_HOT=off in the environment: none kept (the path before it, the benches'
  // baseline).
  bool hot_on_ = true;
  HotHistory hot_;
  std::int64_t data_version_ = -1;
  // On db_'s connection, holding mutex_ for each batch. Last: it drains before db_ closes.
  std::unique_ptr<GroupCommit> writer_;
};

}  // namespace kernex::sqlite
