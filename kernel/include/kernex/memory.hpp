// Memory stores: conversations, summaries, recall, facts, learning, tasks, audit and usage.
// The interface hides the storage engine, so an embedded store and a networked one implement
// the same calls. Times are UTC text "YYYY-MM-DD HH:MM:SS" (sortable, engine-neutral).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/message.hpp"

namespace kernex {

// Whose rows a memory call may read or write: the tenant ("local" outside `kernex serve`).
// Every MemoryStore call takes one, and a store keys every row it writes by it and filters
// every query on it, so a query can never see another tenant's rows. A scope is never empty:
// the only ways to make one are local() and of(), which validates the name.
class MemoryScope {
 public:
  static constexpr std::size_t kMaxTenantBytes = 64;
  static MemoryScope local() { return MemoryScope("local"); }
  // A tenant name: 1 to 64 of [A-Za-z0-9_.-] (serve's tenant names).
  static Result<MemoryScope> of(std::string tenant) {
    if (!valid_tenant(tenant))
      return fail(ErrorCode::Usage, "memory scope: not a tenant name ([A-Za-z0-9_.-]{1,64}): '" +
                                        tenant.substr(0, kMaxTenantBytes) + "'");
    return MemoryScope(std::move(tenant));
  }
  static bool valid_tenant(std::string_view tenant) noexcept {
    if (tenant.empty() || tenant.size() > kMaxTenantBytes) return false;
    for (const char c : tenant) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
      if (!ok) return false;
    }
    return true;
  }
  const std::string& tenant() const noexcept { return tenant_; }
  bool operator==(const MemoryScope&) const = default;

 private:
  explicit MemoryScope(std::string tenant) : tenant_(std::move(tenant)) {}
  std::string tenant_;
};

// A conversation is scoped by channel + sender + project ("" is a project like any other:
// the same key is used to read and to write, fixing kernex's ""/"default" mismatch).
struct ConversationKey {
  std::string channel;
  std::string sender_id;
  std::string project;
};

// A compaction summary covering the conversation's oldest `covered_messages` messages.
struct StoredSummary {
  std::string text;
  std::uint64_t covered_messages = 0;
};

struct UsageRecord {
  std::string conversation_id;
  std::string sender_id;
  std::string model;
  std::string provider;
  Usage usage;
};

// One tool call as the hooks saw it.
struct AuditRecord {
  std::string timestamp;  // set by the store when empty
  std::string conversation_id;
  std::string sender_id;
  std::string agent;
  std::string tool;
  Json arguments = Json::object();
  std::string result;
  std::string status = "ok";  // "ok" | "error" | "denied"
  std::string reason;
};

// One turn's exchange and what it cost, saved together by MemoryStore::save_exchange.
struct ExchangeRecord {
  std::string conversation_id;
  std::vector<ContextEntry> messages;
  std::optional<UsageRecord> usage;
  // Set: the exchange is saved at most once under this key in the scope (a host that may save a
  // run's exchange again after a crash, e.g. serve's run id); a second save with it saves
  // nothing and succeeds. Kept while the conversation is.
  std::string idempotency_key = {};
  // The turn's tool calls for the audit log, in the exchange's transaction: a turn is one write.
  // Filled only for a store whose audits_in_exchange() says it saves them; others get each call
  // through record_tool_call as it happens.
  std::vector<AuditRecord> audits = {};
};

// What the context builder asks memory for (kernex ContextNeeds). History is always loaded.
struct ContextNeeds {
  bool recall = true;         // related messages and summaries from the past
  bool pending_tasks = true;  // the sender's scheduled tasks
  bool profile = true;        // facts about the sender, and learned rules
  bool summaries = true;      // summaries of the sender's earlier conversations
  bool outcomes = true;       // recent outcomes (reward learning)
};

struct StoredMessage {
  std::int64_t seq = 0;  // insertion order across the whole store
  std::string conversation_id;
  ContextEntry entry;
  std::string created_at;
};

struct ConversationInfo {
  std::string id;
  ConversationKey key;
  std::string status;  // "active" | "closed"
  std::string started_at;
  std::string last_activity;
  std::uint64_t message_count = 0;
  std::optional<std::string> summary;
};

struct ConversationFilter {
  std::optional<std::string> channel;
  std::optional<std::string> sender_id;
  std::size_t limit = 50;  // newest first
};

struct SummaryRecord {
  std::string conversation_id;
  std::string text;
  std::uint64_t covered_messages = 0;
  std::string updated_at;
};

struct RecallQuery {
  std::string text;       // user text; matched as one phrase, search operators are not interpreted
  std::string sender_id;  // "" = every sender (admin tools); context building always sets it
  std::size_t limit = 5;
  // Messages already in the history window are not recalled: the newest `skip_newest`
  // messages of `current_conversation`.
  std::string current_conversation;
  std::size_t skip_newest = 0;
  std::optional<std::string> since;  // only hits at or after this time
};

struct RecallHit {
  std::string source;  // "message" (a user message) | "summary"
  std::string conversation_id;
  std::int64_t seq = 0;  // message seq; 0 for summaries
  std::string text;
  std::string created_at;
};

struct Fact {
  std::string sender_id;
  std::string key;
  std::string value;
  std::string updated_at;
  std::optional<std::string> deleted_at;  // soft-deleted when set
};

// A learned behavioural rule; `project` "" is general. Repeating a rule counts occurrences.
struct Lesson {
  std::string sender_id;
  std::string domain;
  std::string rule;
  std::string project;
  std::uint32_t occurrences = 1;
  std::string updated_at;
};

struct OutcomeRecord {
  std::string sender_id;
  std::string domain;
  int score = 0;  // -1, 0 or 1
  std::string lesson;
  std::string source = "conversation";
  std::string project;
  std::string timestamp;
};

// Usage summed per UTC day, model and provider.
struct UsageTotals {
  std::string day;  // YYYY-MM-DD
  std::string model;
  std::string provider;
  std::uint64_t requests = 0;
  Usage usage;
};

struct TaskSpec {
  std::string channel;
  std::string sender_id;
  std::string reply_target;
  std::string description;
  std::string due_at;                 // "YYYY-MM-DD HH:MM:SS" or ISO "…T…[Z]", UTC
  std::optional<std::string> repeat;  // none/"once", "daily", "weekdays", "weekly", "monthly"
  std::string task_type = "reminder";
  std::string project;
  std::uint32_t max_retries = 3;  // attempts before the task is marked failed
};

struct Task {
  std::string id;
  TaskSpec spec;
  std::string status;  // pending | claimed | delivered | failed | cancelled
  std::uint32_t retry_count = 0;
  std::optional<std::string> last_error;
  std::optional<std::string> claimed_by;
  std::optional<std::string> lease_until;
  std::string created_at;
};

struct TaskRun {
  std::string id;  // set by the store
  std::string task_id;
  std::string started_at;
  std::string finished_at;  // set by the store when empty
  std::string status;       // "completed" | "failed"
  std::optional<std::string> result;
  std::optional<std::string> error;
  std::optional<std::uint64_t> tokens;
};

// Every call below the first block has a default that reports ErrorCode::Unsupported, so a
// minimal store (e.g. volatile) implements only conversations; callers treat Unsupported as
// "this store does not keep that".
//
// Every call takes the MemoryScope it works in. A store keeps each row in the scope it was
// written in, and every read, count, claim, export, update and delete sees only the rows of the
// call's scope: a conversation or task id of another tenant is unknown here (reads find
// nothing, writes to it fail or change nothing), and senders are matched exactly. Ids are
// unique across the store, so a row can never be in two scopes.
class MemoryStore {
 public:
  virtual ~MemoryStore() = default;

  // ---- Conversations and history (required) ----
  // The active conversation for `key`, reused while idle for less than `idle`; else a new one.
  virtual Result<std::string> open_conversation(const MemoryScope& scope,
                                                const ConversationKey& key,
                                                std::chrono::minutes idle) = 0;
  // The newest `limit` messages, oldest first, in insertion order (no timestamp ties).
  virtual Result<std::vector<ContextEntry>> recent_messages(const MemoryScope& scope,
                                                            const std::string& conversation_id,
                                                            std::size_t limit) = 0;
  // The oldest `count` messages, oldest first.
  virtual Result<std::vector<ContextEntry>> oldest_messages(const MemoryScope& scope,
                                                            const std::string& conversation_id,
                                                            std::size_t count) = 0;
  virtual Result<std::uint64_t> message_count(const MemoryScope& scope,
                                              const std::string& conversation_id) = 0;
  // Appends an exchange atomically: all entries or none.
  virtual Result<void> append_messages(const MemoryScope& scope, const std::string& conversation_id,
                                       const std::vector<ContextEntry>& entries) = 0;
  // The stored compaction summary, if any, so it is reused rather than recomputed each turn.
  virtual Result<std::optional<StoredSummary>> compaction_summary(
      const MemoryScope& scope, const std::string& conversation_id) = 0;
  virtual Result<void> save_compaction_summary(const MemoryScope& scope,
                                               const std::string& conversation_id,
                                               const StoredSummary& summary) = 0;
  virtual Result<void> record_usage(const MemoryScope& scope, const UsageRecord& record) = 0;
  // What append_messages/save_exchange would refuse in `entry` (text that is not valid UTF-8, a
  // message over the store's size cap), asked before a run pays for a provider call, so a message
  // the store can't keep is refused first rather than answered and then lost. Default: nothing.
  // The one call without a scope: it reads and writes no row, only judges the entry itself.
  virtual Result<void> check_message(const ContextEntry& entry) const {
    (void)entry;
    return {};
  }
  // A turn's exchange and its usage row in one write: a store that overrides this saves both in
  // one transaction (all or nothing, one commit instead of two). This default appends the
  // messages (all or nothing), then records the usage; a usage failure is returned then, with
  // the messages already saved. A store that does not keep usage (Unsupported) saves the messages.
  virtual Result<void> save_exchange(const MemoryScope& scope, const ExchangeRecord& record) {
    KERNEX_RETURN_IF_ERROR(append_messages(scope, record.conversation_id, record.messages));
    if (!record.usage) return {};
    if (auto r = record_usage(scope, *record.usage); !r && r.error().code != ErrorCode::Unsupported)
      return r;
    return {};
  }
  // Facts about a sender (key -> value, by key), injected into the system prompt when asked for.
  virtual Result<std::vector<std::pair<std::string, std::string>>> facts(
      const MemoryScope& scope, const std::string& sender_id) {
    (void)scope, (void)sender_id;
    return std::vector<std::pair<std::string, std::string>>{};
  }

  // ---- Conversations: listing and closing ----
  virtual Result<std::vector<ConversationInfo>> list_conversations(
      const MemoryScope& scope, const ConversationFilter& filter) {
    (void)scope, (void)filter;
    return unsupported("list_conversations");
  }
  // Every message of a conversation after `after_seq`, oldest first, at most `limit`.
  virtual Result<std::vector<StoredMessage>> conversation_messages(
      const MemoryScope& scope, const std::string& conversation_id, std::int64_t after_seq,
      std::size_t limit) {
    (void)scope, (void)conversation_id, (void)after_seq, (void)limit;
    return unsupported("conversation_messages");
  }
  // Closes the conversation; a summary, when given, replaces its stored one.
  virtual Result<void> close_conversation(const MemoryScope& scope,
                                          const std::string& conversation_id,
                                          const std::optional<std::string>& summary) {
    (void)scope, (void)conversation_id, (void)summary;
    return unsupported("close_conversation");
  }
  // Forgets a conversation: its messages, summaries and usage rows are deleted (not closed).
  virtual Result<void> delete_conversation(const MemoryScope& scope,
                                           const std::string& conversation_id) {
    (void)scope, (void)conversation_id;
    return unsupported("delete_conversation");
  }
  // Summaries of the sender's other conversations on `channel`, newest first.
  virtual Result<std::vector<SummaryRecord>> recent_summaries(
      const MemoryScope& scope, const ConversationKey& key, const std::string& exclude_conversation,
      std::size_t limit) {
    (void)scope, (void)key, (void)exclude_conversation, (void)limit;
    return unsupported("recent_summaries");
  }

  // ---- Recall ----
  virtual Result<std::vector<RecallHit>> recall(const MemoryScope& scope,
                                                const RecallQuery& query) {
    (void)scope, (void)query;
    return unsupported("recall");
  }

  // ---- Facts: upsert; a soft-deleted fact comes back when stored again ----
  virtual Result<void> store_fact(const MemoryScope& scope, const std::string& sender_id,
                                  const std::string& key, const std::string& value) {
    (void)scope, (void)sender_id, (void)key, (void)value;
    return unsupported("store_fact");
  }
  virtual Result<std::optional<std::string>> fact(const MemoryScope& scope,
                                                  const std::string& sender_id,
                                                  const std::string& key) {
    (void)scope, (void)sender_id, (void)key;
    return unsupported("fact");
  }
  // Active facts (and soft-deleted ones when asked), of one sender or of all.
  virtual Result<std::vector<Fact>> fact_records(const MemoryScope& scope,
                                                 const std::optional<std::string>& sender_id,
                                                 bool include_deleted) {
    (void)scope, (void)sender_id, (void)include_deleted;
    return unsupported("fact_records");
  }
  // True only when an active fact became deleted.
  virtual Result<bool> soft_delete_fact(const MemoryScope& scope, const std::string& sender_id,
                                        const std::string& key) {
    (void)scope, (void)sender_id, (void)key;
    return unsupported("soft_delete_fact");
  }
  // Soft-deletes one key, or every fact of the sender; returns how many changed.
  virtual Result<std::uint64_t> soft_delete_facts(const MemoryScope& scope,
                                                  const std::string& sender_id,
                                                  const std::optional<std::string>& key) {
    (void)scope, (void)sender_id, (void)key;
    return unsupported("soft_delete_facts");
  }

  // ---- Learning: lessons (capped per sender+domain+project) and outcomes ----
  virtual Result<void> store_lesson(const MemoryScope& scope, const Lesson& lesson) {
    (void)scope, (void)lesson;
    return unsupported("store_lesson");
  }
  // project set: that project's rules first, then general ones; unset: general only.
  virtual Result<std::vector<Lesson>> lessons(const MemoryScope& scope,
                                              const std::string& sender_id,
                                              const std::optional<std::string>& project) {
    (void)scope, (void)sender_id, (void)project;
    return unsupported("lessons");
  }
  virtual Result<void> store_outcome(const MemoryScope& scope, const OutcomeRecord& outcome) {
    (void)scope, (void)outcome;
    return unsupported("store_outcome");
  }
  // Newest first; project set: exactly that project ("" = general); unset: all.
  virtual Result<std::vector<OutcomeRecord>> recent_outcomes(
      const MemoryScope& scope, const std::string& sender_id, std::size_t limit,
      const std::optional<std::string>& project) {
    (void)scope, (void)sender_id, (void)limit, (void)project;
    return unsupported("recent_outcomes");
  }
  // Keeps the newest `keep` outcomes per sender; returns how many were deleted.
  virtual Result<std::uint64_t> prune_outcomes(const MemoryScope& scope, std::size_t keep) {
    (void)scope, (void)keep;
    return unsupported("prune_outcomes");
  }

  // ---- Audit log of tool calls ----
  // True: save_exchange writes ExchangeRecord::audits in the exchange's transaction, so the
  // kernel hands a run's audit rows to it (one write per turn; a run that saves no exchange
  // still records them through record_tool_call). A store that overrides save_exchange and
  // returns true here must save every one of them.
  virtual bool audits_in_exchange() const { return false; }
  virtual Result<void> record_tool_call(const MemoryScope& scope, const AuditRecord& record) {
    (void)scope, (void)record;
    return unsupported("record_tool_call");
  }
  virtual Result<std::vector<AuditRecord>> audit_log(const MemoryScope& scope, std::size_t limit) {
    (void)scope, (void)limit;
    return unsupported("audit_log");
  }

  // ---- Usage ----
  virtual Result<std::vector<UsageTotals>> usage_by_day(const MemoryScope& /*scope*/) {
    return unsupported("usage_by_day");
  }

  // ---- Tasks ----
  // Returns the new task's id, or the id of a pending task it duplicates (same sender, same
  // or similar description due within 30 minutes).
  virtual Result<std::string> create_task(const MemoryScope& scope, const TaskSpec& spec) {
    (void)scope, (void)spec;
    return unsupported("create_task");
  }
  // Pending tasks of a sender, soonest first.
  virtual Result<std::vector<Task>> pending_tasks(const MemoryScope& scope,
                                                  const std::string& sender_id) {
    (void)scope, (void)sender_id;
    return unsupported("pending_tasks");
  }
  virtual Result<std::optional<Task>> task(const MemoryScope& scope, const std::string& id) {
    (void)scope, (void)id;
    return unsupported("task");
  }
  // Atomically claims due tasks for `worker` (and tasks whose lease expired): across every
  // process sharing the store, a task is handed to one claimer at a time.
  virtual Result<std::vector<Task>> claim_due_tasks(const MemoryScope& scope,
                                                    const std::string& worker,
                                                    std::chrono::seconds lease, std::size_t limit) {
    (void)scope, (void)worker, (void)lease, (void)limit;
    return unsupported("claim_due_tasks");
  }
  // Delivered (one-shot) or rescheduled to its next occurrence after now (recurring). False
  // when `worker` no longer holds the claim (its lease expired and another took it).
  virtual Result<bool> complete_task(const MemoryScope& scope, const std::string& id,
                                     const std::string& worker) {
    (void)scope, (void)id, (void)worker;
    return unsupported("complete_task");
  }
  // Records the error; true when the task will be retried (after a backoff), false when it
  // has used its max_retries and is now failed.
  virtual Result<bool> fail_task(const MemoryScope& scope, const std::string& id,
                                 const std::string& worker, const std::string& error) {
    (void)scope, (void)id, (void)worker, (void)error;
    return unsupported("fail_task");
  }
  // Cancels the sender's pending task whose id starts with `id_prefix` (taken literally).
  virtual Result<bool> cancel_task(const MemoryScope& scope, const std::string& id_prefix,
                                   const std::string& sender_id) {
    (void)scope, (void)id_prefix, (void)sender_id;
    return unsupported("cancel_task");
  }
  virtual Result<std::string> record_task_run(const MemoryScope& scope, const TaskRun& run) {
    (void)scope, (void)run;
    return unsupported("record_task_run");
  }
  // Runs of tasks whose id starts with `task_id_prefix`, newest first.
  virtual Result<std::vector<TaskRun>> task_runs(const MemoryScope& scope,
                                                 const std::string& task_id_prefix,
                                                 std::size_t limit) {
    (void)scope, (void)task_id_prefix, (void)limit;
    return unsupported("task_runs");
  }

  // ---- Backup ----
  // Everything the scope holds, as one JSON document that import_json accepts (no tenant in it).
  virtual Result<Json> export_json(const MemoryScope& /*scope*/) {
    return unsupported("export_json");
  }
  // Loads an export into this store, every row into `scope` (whatever scope it was exported
  // from); ids are kept, so importing an id that exists in any scope fails (nothing is
  // imported then).
  virtual Result<void> import_json(const MemoryScope& scope, const Json& document) {
    (void)scope, (void)document;
    return unsupported("import_json");
  }

 protected:
  static std::unexpected<Error> unsupported(const char* operation) {
    return std::unexpected<Error>(Error(
        ErrorCode::Unsupported, std::string("this memory store does not support ") + operation));
  }
};

}  // namespace kernex
