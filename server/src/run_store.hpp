// <data_dir>/serve.db: every run the server acknowledged, written before the acknowledgement, so
// a queued or running run survives kill -9 and is run again at the next start. SQLite in WAL
// mode: a process kill loses nothing the kernel's write() returned from.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "run_state.hpp"
#include "serve_writer.hpp"

namespace kernex::server {

struct StoredRun {
  std::string id, tenant, session, status, created_at;
  Json request;                   // what started it (message, sender, skills, agent...)
  Json result;                    // result or error object once terminal
  std::uint64_t event_count = 0;  // its events are read with events_page()
};

// What else a run's end writes, in the same transaction as the end itself (the webhook outbox):
// `in_transaction` gets the writer's connection while the end's batch is open (on the writer's
// thread), and an error from it rolls the end back; `after_commit` is told by announce_end(),
// once the end is committed and the run has ended in memory too.
struct FinishHook {
  std::function<Result<void>(sqlite3* db, const std::string& run_id, RunStatus status,
                             const Json& result)>
      in_transaction;
  std::function<void()> after_commit;
};

class RunStore {
 public:
  static Result<std::unique_ptr<RunStore>> open(const std::filesystem::path& file);
  ~RunStore();

  Result<void> insert(const RunState& run, const Json& request);
  // The same insert, queued without waiting (the caller may be an HTTP thread, or hold a lock):
  // `done` is told once it is committed, or failed, on the writer's thread (ServeWriter::
  // submit_then). Writes queued after it commit after it.
  void insert(const RunState& run, const Json& request,
              std::function<void(const Result<void>&)> done);
  Result<void> set_status(const std::string& id, RunStatus status);
  // Running, queued behind the insert and not waited on: nobody is told it, and a restart finds
  // the run unfinished whether it says queued or running.
  void mark_running(const std::string& id);
  // `events`: the run's events including the last one, stored before followers see it.
  Result<void> finish(const std::string& id, RunStatus status, const Json& result,
                      const std::vector<RunEvent>& events);
  // Tells the finish hook's after_commit (the webhook senders) that ends were committed. Called
  // once the run has ended in memory and freed its session and slot: a receiver that answers a
  // webhook with the session's next message must not meet session_busy.
  void announce_end() const;
  Result<std::optional<StoredRun>> find(const std::string& tenant, const std::string& id);
  Result<bool> exists(const std::string& tenant, const std::string& id);
  // The run's stored events after `after`, oldest first: at most `max` of them and, past the
  // first, no more than about `max_bytes` of data. A follower's replay reads a page at a time.
  Result<std::vector<RunEvent>> events_page(const std::string& id, std::uint64_t after,
                                            std::size_t max, std::size_t max_bytes);
  // Newest first.
  Result<std::vector<StoredRun>> session_runs(const std::string& tenant, const std::string& session,
                                              std::size_t limit);
  // Runs acknowledged but not finished when the last server stopped, oldest first.
  Result<std::vector<StoredRun>> unfinished();
  // Everything of the session's runs in serve.db: the runs and their events, their journals, and
  // their webhook events (tombstoned when not yet delivered); then the WAL is truncated.
  Result<void> delete_session(const std::string& tenant, const std::string& session);
  // Set before the store is shared with run threads.
  void on_finish(FinishHook hook) { finish_hook_ = std::move(hook); }

 private:
  RunStore(sqlite3* db, std::shared_ptr<ServeWriter> writer)
      : db_(db), writer_(std::move(writer)) {}
  std::mutex mutex_;  // db_: the reads' connection
  sqlite3* db_;
  std::shared_ptr<ServeWriter> writer_;  // every write: serve.db's batches
  FinishHook finish_hook_;
};

}  // namespace kernex::server
