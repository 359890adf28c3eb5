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

  // Conversations and history.
  Result<std::string> open_conversation(const MemoryScope& scope, const ConversationKey& key,
                                        std::chrono::minutes idle) override;
  Result<std::vector<ContextEntry>> recent_messages(const MemoryScope& scope,
                                                    const std::string& conversation_id,
                                                    std::size_t limit) override;
  Result<std::vector<ContextEntry>> oldest_messages(const MemoryScope& scope,
                                                    const std::string& conversation_id,
                                                    std::size_t count) override;
  Result<std::uint64_t> message_count(const MemoryScope& scope,
                                      const std::string& conversation_id) override;
  Result<void> append_messages(const MemoryScope& scope, const std::string& conversation_id,
                               const std::vector<ContextEntry>& entries) override;
  Result<void> save_exchange(const MemoryScope& scope, const ExchangeRecord& record) override;
  Result<void> check_message(const ContextEntry& entry) const override;
  Result<std::optional<StoredSummary>> compaction_summary(
      const MemoryScope& scope, const std::string& conversation_id) override;
  Result<void> save_compaction_summary(const MemoryScope& scope, const std::string& conversation_id,
                                       const StoredSummary& summary) override;
  Result<std::vector<ConversationInfo>> list_conversations(
      const MemoryScope& scope, const ConversationFilter& filter) override;
  Result<std::vector<StoredMessage>> conversation_messages(const MemoryScope& scope,
                                                           const std::string& conversation_id,
                                                           std::int64_t after_seq,
                                                           std::size_t limit) override;
  Result<void> close_conversation(const MemoryScope& scope, const std::string& conversation_id,
                                  const std::optional<std::string>& summary) override;
  Result<void> delete_conversation(const MemoryScope& scope,
                                   const std::string& conversation_id) override;
  Result<std::vector<SummaryRecord>> recent_summaries(const MemoryScope& scope,
                                                      const ConversationKey& key,
                                                      const std::string& exclude,
                                                      std::size_t limit) override;
  Result<std::vector<RecallHit>> recall(const MemoryScope& scope,
                                        const RecallQuery& query) override;

  // Facts.
  Result<std::vector<std::pair<std::string, std::string>>> facts(
      const MemoryScope& scope, const std::string& sender_id) override;
  Result<void> store_fact(const MemoryScope& scope, const std::string& sender_id,
                          const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> fact(const MemoryScope& scope, const std::string& sender_id,
                                          const std::string& key) override;
  Result<std::vector<Fact>> fact_records(const MemoryScope& scope,
                                         const std::optional<std::string>& sender_id,
                                         bool include_deleted) override;
  Result<bool> soft_delete_fact(const MemoryScope& scope, const std::string& sender_id,
                                const std::string& key) override;
  Result<std::uint64_t> soft_delete_facts(const MemoryScope& scope, const std::string& sender_id,
                                          const std::optional<std::string>& key) override;

  // Learning.
  Result<void> store_lesson(const MemoryScope& scope, const Lesson& lesson) override;
  Result<std::vector<Lesson>> lessons(const MemoryScope& scope, const std::string& sender_id,
                                      const std::optional<std::string>& project) override;
  Result<void> store_outcome(const MemoryScope& scope, const OutcomeRecord& outcome) override;
  Result<std::vector<OutcomeRecord>> recent_outcomes(
      const MemoryScope& scope, const std::string& sender_id, std::size_t limit,
      const std::optional<std::string>& project) override;
  Result<std::uint64_t> prune_outcomes(const MemoryScope& scope, std::size_t keep) override;

  // Audit and usage.
  Result<void> record_tool_call(const MemoryScope& scope, const AuditRecord& record) override;
  Result<std::vector<AuditRecord>> audit_log(const MemoryScope& scope, std::size_t limit) override;
  Result<void> record_usage(const MemoryScope& scope, const UsageRecord& record) override;
  Result<std::vector<UsageTotals>> usage_by_day(const MemoryScope& scope) override;

  // Tasks.
  Result<std::string> create_task(const MemoryScope& scope, const TaskSpec& spec) override;
  Result<std::vector<Task>> pending_tasks(const MemoryScope& scope,
                                          const std::string& sender_id) override;
  Result<std::optional<Task>> task(const MemoryScope& scope, const std::string& id) override;
  Result<std::vector<Task>> claim_due_tasks(const MemoryScope& scope, const std::string& worker,
                                            std::chrono::seconds lease, std::size_t limit) override;
  Result<bool> complete_task(const MemoryScope& scope, const std::string& id,
                             const std::string& worker) override;
  Result<bool> fail_task(const MemoryScope& scope, const std::string& id, const std::string& worker,
                         const std::string& error) override;
  Result<bool> cancel_task(const MemoryScope& scope, const std::string& id_prefix,
                           const std::string& sender_id) override;
  Result<std::string> record_task_run(const MemoryScope& scope, const TaskRun& run) override;
  Result<std::vector<TaskRun>> task_runs(const MemoryScope& scope,
                                         const std::string& task_id_prefix,
                                         std::size_t limit) override;

  // Backup.
  Result<Json> export_json(const MemoryScope& scope) override;
  Result<void> import_json(const MemoryScope& scope, const Json& document) override;

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
