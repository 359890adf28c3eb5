// Scheduled tasks: dedup on create, atomic claims with leases, retries with backoff,
// recurrence and run history.
#include <algorithm>

#include "sqlite_store.hpp"
#include "text_rules.hpp"

namespace kernex::sqlite {
namespace {

constexpr const char* kTaskColumns =
    "id, channel, sender_id, reply_target, description, due_at, repeat, task_type, project, "
    "max_retries, status, "
    "retry_count, last_error, claimed_by, lease_until, created_at";

bool known_repeat(const std::string& r) {
  return r == "daily" || r == "weekdays" || r == "weekly" || r == "monthly";
}

// Backoff before retry n (1-based): 2, 4, 8 … minutes, at most an hour.
std::int64_t backoff_seconds(std::uint32_t n) {
  const std::uint32_t shift = std::min<std::uint32_t>(n - 1, 5);
  return std::min<std::int64_t>(120LL << shift, 3600);
}

template <class T>
Result<T> scalar(Db& db, const char* sql, const auto&... args) {
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db.prepare(sql));
  stmt.bind_all(args...);
  KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
  if (!row) return fail(ErrorCode::Internal, std::string("memory-sqlite: no row from ") + sql);
  if constexpr (std::is_same_v<T, std::string>) {
    return stmt.text(0);
  } else {
    return static_cast<T>(stmt.integer(0));
  }
}

}  // namespace

Result<std::vector<Task>> SqliteStore::select_tasks(Stmt& stmt) {
  std::vector<Task> out;
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
    if (!row) break;
    Task t;
    t.id = stmt.text(0);
    t.spec.channel = stmt.text(1);
    t.spec.sender_id = stmt.text(2);
    t.spec.reply_target = stmt.text(3);
    t.spec.description = stmt.text(4);
    t.spec.due_at = stmt.text(5);
    t.spec.repeat = stmt.opt_text(6);
    t.spec.task_type = stmt.text(7);
    t.spec.project = stmt.text(8);
    t.spec.max_retries = static_cast<std::uint32_t>(stmt.integer(9));
    t.status = stmt.text(10);
    t.retry_count = static_cast<std::uint32_t>(stmt.integer(11));
    t.last_error = stmt.opt_text(12);
    t.claimed_by = stmt.opt_text(13);
    t.lease_until = stmt.opt_text(14);
    t.created_at = stmt.text(15);
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::string> SqliteStore::create_task(const MemoryScope& scope, const TaskSpec& in) {
  TaskSpec spec = in;
  KERNEX_ASSIGN_OR_RETURN(auto due, normalize_time(spec.due_at, "task due_at"));
  spec.due_at = due;
  if (spec.repeat && *spec.repeat == "once") spec.repeat.reset();
  if (spec.repeat && !known_repeat(*spec.repeat)) {
    return fail(
        ErrorCode::Usage,
        "memory-sqlite: task repeat must be once, daily, weekdays, weekly or monthly, got '" +
            *spec.repeat + "'");
  }
  if (spec.description.empty())
    return fail(ErrorCode::Usage, "memory-sqlite: a task needs a description");
  if (invalid_utf8_at(spec.description)) {
    return fail(ErrorCode::Parse, "memory-sqlite: the task description is not valid UTF-8");
  }
  if (spec.max_retries == 0) spec.max_retries = 1;
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<std::string>([&]() -> Result<std::string> {
    // Exact duplicate, then a similar description due within half an hour (kernex's dedup).
    std::optional<std::string> duplicate;
    {
      KERNEX_ASSIGN_OR_RETURN(
          auto near,
          db_->prepare(
              "SELECT id, description, due_at = ?3 FROM scheduled_tasks WHERE tenant = ?4 AND "
              "sender_id = ?1 AND status = 'pending' "
              "AND abs(strftime('%s', ?3) - strftime('%s', due_at)) <= 1800 ORDER BY (description "
              "= "
              "?2) DESC, rowid"));
      near.bind_all(spec.sender_id, spec.description, spec.due_at, scope.tenant());
      for (;;) {
        KERNEX_ASSIGN_OR_RETURN(auto row, near.step());
        if (!row) break;
        const std::string description = near.text(1);
        if ((description == spec.description && near.integer(2) == 1) ||
            similar_descriptions(description, spec.description)) {
          duplicate = near.text(0);
          break;
        }
      }
    }
    if (duplicate) return *duplicate;
    const std::string id = new_uuid();
    KERNEX_ASSIGN_OR_RETURN(
        auto insert,
        db_->prepare("INSERT INTO scheduled_tasks (id, channel, sender_id, "
                     "reply_target, description, due_at, "
                     "repeat, task_type, "
                     "project, max_retries, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    insert.bind_all(id, spec.channel, spec.sender_id, spec.reply_target, spec.description,
                    spec.due_at, spec.repeat, spec.task_type, spec.project, spec.max_retries,
                    scope.tenant());
    KERNEX_RETURN_IF_ERROR(insert.run());
    return id;
  });
}

Result<std::vector<Task>> SqliteStore::pending_tasks(const MemoryScope& scope,
                                                     const std::string& sender_id) {
  Hold lock(*this);
  static const std::string sql =
      std::string("SELECT ") + kTaskColumns +
      " FROM scheduled_tasks WHERE tenant = ? AND sender_id = ? AND status = 'pending' ORDER BY "
      "due_at, rowid";
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql.c_str()));
  stmt.bind_all(scope.tenant(), sender_id);
  return select_tasks(stmt);
}

Result<std::optional<Task>> SqliteStore::task(const MemoryScope& scope, const std::string& id) {
  Hold lock(*this);
  static const std::string sql =
      std::string("SELECT ") + kTaskColumns + " FROM scheduled_tasks WHERE id = ? AND tenant = ?";
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql.c_str()));
  stmt.bind_all(id, scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto tasks, select_tasks(stmt));
  if (tasks.empty()) return std::optional<Task>();
  return std::optional<Task>(std::move(tasks.front()));
}

Result<std::vector<Task>> SqliteStore::claim_due_tasks(const MemoryScope& scope,
                                                       const std::string& worker,
                                                       std::chrono::seconds lease,
                                                       std::size_t limit) {
  if (worker.empty())
    return fail(ErrorCode::Usage, "memory-sqlite: claiming tasks needs a worker id");
  Hold lock(*this, Hold::Mode::Write);
  // One UPDATE … RETURNING under the write lock: no other process can claim the same rows. A
  // pending task is due at its retry time when a failed attempt set one, else at its occurrence.
  static const std::string sql =
      std::string(
          "UPDATE scheduled_tasks SET status = 'claimed', claimed_by = ?1, lease_until = "
          "datetime('now', ?2) "
          "WHERE id IN (SELECT id FROM scheduled_tasks WHERE tenant = ?4 AND ("
          "(status = 'pending' AND retry_at IS NULL AND due_at <= datetime('now')) "
          "OR (status = 'pending' AND retry_at <= datetime('now')) "
          "OR (status = 'claimed' AND lease_until <= datetime('now'))) "
          "ORDER BY coalesce(retry_at, due_at) LIMIT ?3) RETURNING ") +
      kTaskColumns;
  return db_->write<std::vector<Task>>([&]() -> Result<std::vector<Task>> {
    KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql.c_str()));
    stmt.bind_all(worker, datetime_offset(lease.count(), "seconds"),
                  static_cast<std::int64_t>(limit), scope.tenant());
    return select_tasks(stmt);
  });
}

Result<void> SqliteStore::reschedule(const MemoryScope& scope, const Task& t) {
  // The next occurrence after now: a task that was overdue for days fires once, not once per
  // missed day (kernex advanced from the old due time only, so it fired again at once). Counted
  // from the scheduled occurrence (due_at), never from a retry's time: a daily 02:00 task whose
  // retry succeeded at 02:07 still fires at 02:00. The new occurrence starts without retries.
  const std::string step = *t.spec.repeat == "weekly"    ? "+7 days"
                           : *t.spec.repeat == "monthly" ? "+1 month"
                                                         : "+1 day";
  KERNEX_ASSIGN_OR_RETURN(auto now, scalar<std::string>(*db_, "SELECT datetime('now')"));
  std::string next = t.spec.due_at;
  for (int guard = 0; guard < 100000 && (guard == 0 || next <= now); ++guard) {
    KERNEX_ASSIGN_OR_RETURN(auto advanced,
                            scalar<std::string>(*db_, "SELECT datetime(?, ?)", next, step));
    next = advanced;
    if (*t.spec.repeat == "weekdays") {
      auto skipped =
          scalar<std::string>(*db_,
                              "SELECT CASE strftime('%w', ?1) WHEN '6' THEN datetime(?1, '+2 "
                              "days') WHEN '0' THEN datetime(?1, '+1 day') "
                              "ELSE ?1 END",
                              next);
      if (!skipped) return std::unexpected(skipped.error());
      next = *skipped;
    }
  }
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt, db_->prepare("UPDATE scheduled_tasks SET due_at = ?, status = 'pending', "
                              "claimed_by = NULL, lease_until = NULL, retry_count = 0, "
                              "last_error = NULL, retry_at = NULL WHERE id = ? AND tenant = ?"));
  stmt.bind_all(next, t.id, scope.tenant());
  KERNEX_RETURN_IF_ERROR(stmt.run());
  return {};
}

Result<Task> SqliteStore::held_task(const MemoryScope& scope, const std::string& id) {
  static const std::string sql =
      std::string("SELECT ") + kTaskColumns + " FROM scheduled_tasks WHERE id = ? AND tenant = ?";
  KERNEX_ASSIGN_OR_RETURN(auto stmt, db_->prepare(sql.c_str()));
  stmt.bind_all(id, scope.tenant());
  KERNEX_ASSIGN_OR_RETURN(auto rows, select_tasks(stmt));
  if (rows.empty()) return fail(ErrorCode::Memory, "memory-sqlite: no task " + id);
  return std::move(rows.front());
}

namespace {
// A worker may finish a task only while it holds the claim; an empty worker finishes a
// pending or claimed task directly (hosts without a poller).
bool holds(const Task& t, const std::string& worker) {
  if (worker.empty()) return t.status == "pending" || t.status == "claimed";
  return t.status == "claimed" && t.claimed_by == worker;
}
}  // namespace

Result<bool> SqliteStore::complete_task(const MemoryScope& scope, const std::string& id,
                                        const std::string& worker) {
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<bool>([&]() -> Result<bool> {
    KERNEX_ASSIGN_OR_RETURN(auto found, held_task(scope, id));
    std::optional<Task> t = std::move(found);
    if (!holds(*t, worker)) return false;
    if (t->spec.repeat) {
      KERNEX_RETURN_IF_ERROR(reschedule(scope, *t));
      return true;
    }
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare(
            "UPDATE scheduled_tasks SET status = 'delivered', delivered_at = datetime('now'), "
            "claimed_by = NULL, "
            "lease_until = NULL, retry_at = NULL WHERE id = ? AND tenant = ?"));
    stmt.bind_all(id, scope.tenant());
    KERNEX_RETURN_IF_ERROR(stmt.run());
    return true;
  });
}

Result<bool> SqliteStore::fail_task(const MemoryScope& scope, const std::string& id,
                                    const std::string& worker, const std::string& error) {
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<bool>([&]() -> Result<bool> {
    KERNEX_ASSIGN_OR_RETURN(auto found, held_task(scope, id));
    std::optional<Task> t = std::move(found);
    if (!holds(*t, worker)) {
      return fail(ErrorCode::Memory, "memory-sqlite: task " + id + " is not held by '" + worker +
                                         "' (status " + t->status + ")");
    }
    const std::uint32_t n = t->retry_count + 1;
    const bool retry = n < t->spec.max_retries;
    // The retry's time goes in retry_at; due_at keeps the scheduled occurrence, which the next
    // occurrence of a recurring task counts from and which pending_tasks and task() report.
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare(
            "UPDATE scheduled_tasks SET retry_count = ?1, last_error = ?2, claimed_by = NULL, "
            "lease_until = NULL, "
            "status = CASE WHEN ?3 THEN 'pending' ELSE 'failed' END, "
            "retry_at = CASE WHEN ?3 THEN datetime('now', ?4) END WHERE id = ?5 AND tenant = ?6"));
    stmt.bind_all(n, error, retry ? 1 : 0, datetime_offset(backoff_seconds(n), "seconds"), id,
                  scope.tenant());
    KERNEX_RETURN_IF_ERROR(stmt.run());
    return retry;
  });
}

Result<bool> SqliteStore::cancel_task(const MemoryScope& scope, const std::string& id_prefix,
                                      const std::string& sender_id) {
  if (id_prefix.empty())
    return fail(ErrorCode::Usage, "memory-sqlite: cancelling a task needs an id or id prefix");
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<bool>([&]() -> Result<bool> {
    // The prefix is compared literally (kernex used LIKE, where % and _ are wildcards).
    KERNEX_ASSIGN_OR_RETURN(
        auto count, scalar<std::int64_t>(*db_,
                                         "SELECT count(*) FROM scheduled_tasks WHERE substr(id, 1, "
                                         "length(?1)) = ?1 AND sender_id = ?2 AND "
                                         "tenant = ?3 AND status = 'pending'",
                                         id_prefix, sender_id, scope.tenant()));
    if (count > 1) {
      return fail(ErrorCode::Usage, "memory-sqlite: task id prefix '" + id_prefix + "' matches " +
                                        std::to_string(count) +
                                        " pending tasks; give more of the id");
    }
    if (count == 0) {
      KERNEX_ASSIGN_OR_RETURN(
          auto cancelled,
          scalar<std::int64_t>(*db_,
                               "SELECT count(*) FROM scheduled_tasks WHERE substr(id, "
                               "1, length(?1)) = ?1 AND sender_id = ?2 AND "
                               "tenant = ?3 AND status = 'cancelled'",
                               id_prefix, sender_id, scope.tenant()));
      return cancelled > 0;  // cancelling twice is not an error
    }
    KERNEX_ASSIGN_OR_RETURN(auto stmt,
                            db_->prepare("UPDATE scheduled_tasks SET status = 'cancelled' WHERE "
                                         "substr(id, 1, length(?1)) = ?1 AND "
                                         "sender_id = ?2 AND tenant = ?3 "
                                         "AND status = 'pending'"));
    stmt.bind_all(id_prefix, sender_id, scope.tenant());
    KERNEX_ASSIGN_OR_RETURN(auto changed, stmt.run());
    return changed > 0;
  });
}

Result<std::string> SqliteStore::record_task_run(const MemoryScope& scope, const TaskRun& run) {
  if (run.status != "completed" && run.status != "failed") {
    return fail(
        ErrorCode::Usage,
        "memory-sqlite: a task run's status must be completed or failed, got '" + run.status + "'");
  }
  KERNEX_ASSIGN_OR_RETURN(auto started, normalize_time(run.started_at, "task run started_at"));
  std::optional<std::string> finished;
  if (!run.finished_at.empty()) {
    KERNEX_ASSIGN_OR_RETURN(auto f, normalize_time(run.finished_at, "task run finished_at"));
    finished = f;
  }
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<std::string>([&]() -> Result<std::string> {
    const std::string id = new_uuid();
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare(
            "INSERT INTO task_runs (id, task_id, started_at, finished_at, status, result, error, "
            "tokens, tenant) "
            "VALUES (?, ?, ?, coalesce(?, datetime('now')), ?, ?, ?, ?, ?)"));
    stmt.bind_all(id, run.task_id, started, finished, run.status, run.result, run.error, run.tokens,
                  scope.tenant());
    KERNEX_RETURN_IF_ERROR(stmt.run());
    return id;
  });
}

Result<std::vector<TaskRun>> SqliteStore::task_runs(const MemoryScope& scope,
                                                    const std::string& task_id_prefix,
                                                    std::size_t limit) {
  Hold lock(*this);
  auto stmt = db_->prepare(
      "SELECT id, task_id, started_at, finished_at, status, result, error, tokens FROM task_runs "
      "WHERE tenant = ?3 AND substr(task_id, 1, length(?1)) = ?1 ORDER BY started_at DESC, rowid "
      "DESC LIMIT ?2");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind_all(task_id_prefix, static_cast<std::int64_t>(limit), scope.tenant());
  std::vector<TaskRun> out;
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto row, stmt->step());
    if (!row) break;
    TaskRun r;
    r.id = stmt->text(0);
    r.task_id = stmt->text(1);
    r.started_at = stmt->text(2);
    r.finished_at = stmt->text(3);
    r.status = stmt->text(4);
    r.result = stmt->opt_text(5);
    r.error = stmt->opt_text(6);
    if (!stmt->null(7)) r.tokens = static_cast<std::uint64_t>(stmt->integer(7));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kernex::sqlite
