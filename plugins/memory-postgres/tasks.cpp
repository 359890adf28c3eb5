// Scheduled tasks: dedup on create, claims with leases that several processes race for
// (FOR UPDATE SKIP LOCKED: a task goes to one claimer), retries with backoff, recurrence and
// run history. Times come from the server's clock, so machines with skewed clocks agree.
// A run's history rides the writer's batches; creating, completing, failing and cancelling a task
// stay transactions of their own: each decides in C++ (dedup, recurrence, the holder, an ambiguous
// prefix) on rows it read and locked in that same transaction, and a batch shows a write's rows
// only after all of its statements ran.
#include <algorithm>
#include <cstdio>

#include "pg_store.hpp"
#include "text_rules.hpp"

namespace kernex::postgres {
namespace {

constexpr std::string_view kTaskColumns =
    "id, channel, sender_id, reply_target, description, due_at, repeat, task_type, project, "
    "max_retries, status, "
    "retry_count, last_error, claimed_by, lease_until, created_at";

std::string task_sql(std::string_view head, std::string_view tail) {
  return std::string(head) + std::string(kTaskColumns) + std::string(tail);
}

bool known_repeat(const std::string& r) {
  return r == "daily" || r == "weekdays" || r == "weekly" || r == "monthly";
}

// Backoff before retry n (1-based): 2, 4, 8 … minutes, at most an hour.
std::int64_t backoff_seconds(std::uint32_t n) {
  const std::uint32_t shift = std::min<std::uint32_t>(n - 1, 5);
  return std::min<std::int64_t>(120LL << shift, 3600);
}

// Days since 1970-01-01 of a proleptic Gregorian date; linear in `d`, so a day past the month's
// end rolls into the next month, as SQLite's date modifiers do (Jan 31 + 1 month = Mar 3).
std::int64_t days_from_civil(std::int64_t y, std::int64_t m, std::int64_t d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void civil_from_days(std::int64_t z, std::int64_t& y, std::int64_t& m, std::int64_t& d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp + (mp < 10 ? 3 : -9);
  y = yoe + era * 400 + (m <= 2);
}

// One step of a recurrence on "YYYY-MM-DD HH:MM:SS" text (normalised when stored), with SQLite's
// datetime(t, '+1 day' | '+7 days' | '+1 month') semantics, then weekdays skip Saturday and Sunday.
std::string next_occurrence(const std::string& t, const std::string& repeat) {
  std::int64_t y = std::stoll(t.substr(0, 4)), m = std::stoll(t.substr(5, 2)),
               d = std::stoll(t.substr(8, 2));
  std::int64_t days;
  if (repeat == "monthly") {
    const std::int64_t months = y * 12 + (m - 1) + 1;
    days = days_from_civil(months / 12, months % 12 + 1, d);
  } else {
    days = days_from_civil(y, m, d) + (repeat == "weekly" ? 7 : 1);
  }
  if (repeat == "weekdays") {
    const std::int64_t weekday =
        ((days % 7) + 7 + 4) % 7;  // 1970-01-01 was a Thursday (4); 0 = Sunday
    if (weekday == 6) days += 2;
    if (weekday == 0) days += 1;
  }
  civil_from_days(days, y, m, d);
  char buf[64];  // room for any three int64s: -O2 builds check (format-truncation)
  std::snprintf(buf, sizeof buf, "%04lld-%02lld-%02lld", static_cast<long long>(y),
                static_cast<long long>(m), static_cast<long long>(d));
  return buf + t.substr(10);
}

// A worker may finish a task only while it holds the claim; an empty worker finishes a
// pending or claimed task directly (hosts without a poller).
bool holds(const Task& t, const std::string& worker) {
  if (worker.empty()) return t.status == "pending" || t.status == "claimed";
  return t.status == "claimed" && t.claimed_by == worker;
}

// The scope's task `id`, locked; a task of another tenant is not found.
Result<Task> locked_task(pg::Connection& c, const MemoryScope& scope, const std::string& id) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      c.exec(task_sql("SELECT ", " FROM scheduled_tasks WHERE id = $1 AND tenant = $2 FOR UPDATE"),
             {id, scope.tenant()}));
  if (rows.empty()) return fail(ErrorCode::Memory, "postgres memory: no task " + id);
  return std::move(read_tasks(rows).front());
}

}  // namespace

std::vector<Task> read_tasks(const pg::Rows& rows) {
  std::vector<Task> out;
  for (int i = 0; i < rows.size(); ++i) {
    Task t;
    t.id = rows.text(i, 0);
    t.spec.channel = rows.text(i, 1);
    t.spec.sender_id = rows.text(i, 2);
    t.spec.reply_target = rows.text(i, 3);
    t.spec.description = rows.text(i, 4);
    t.spec.due_at = rows.text(i, 5);
    t.spec.repeat = rows.optional_text(i, 6);
    t.spec.task_type = rows.text(i, 7);
    t.spec.project = rows.text(i, 8);
    t.spec.max_retries = static_cast<std::uint32_t>(rows.int64(i, 9));
    t.status = rows.text(i, 10);
    t.retry_count = static_cast<std::uint32_t>(rows.int64(i, 11));
    t.last_error = rows.optional_text(i, 12);
    t.claimed_by = rows.optional_text(i, 13);
    t.lease_until = rows.optional_text(i, 14);
    t.created_at = rows.text(i, 15);
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::string> PgStore::create_task(const MemoryScope& scope, const TaskSpec& in) {
  TaskSpec spec = in;
  KERNEX_ASSIGN_OR_RETURN(auto due, sqlite::normalize_time(spec.due_at, "task due_at"));
  spec.due_at = due;
  if (spec.repeat && *spec.repeat == "once") spec.repeat.reset();
  if (spec.repeat && !known_repeat(*spec.repeat)) {
    const std::string got = "got '" + *spec.repeat + "'";
    return fail(
        ErrorCode::Usage,
        "postgres memory: task repeat must be once, daily, weekdays, weekly or monthly, " + got);
  }
  if (spec.description.empty())
    return fail(ErrorCode::Usage, "postgres memory: a task needs a description");
  for (const std::string* s :
       {&spec.description, &spec.channel, &spec.sender_id, &spec.reply_target, &spec.project}) {
    if (sqlite::invalid_utf8_at(*s) || s->find('\0') != std::string::npos) {
      return fail(ErrorCode::Parse,
                  "postgres memory: the task's text is not valid UTF-8 (or holds a NUL byte)");
    }
  }
  if (spec.max_retries == 0) spec.max_retries = 1;
  // Not a write of the writer's batches: whether it inserts is decided in C++
  // (similar_descriptions) on what it reads under the sender's lock, in the same transaction.
  return transaction<std::string>([&](pg::Connection& c) -> Result<std::string> {
    // Two processes creating the same task at once: the sender's lock makes the second see the
    // first.
    if (auto r = c.exec(
            "SELECT pg_advisory_xact_lock(hashtextextended('task' || chr(31) || $2 || chr(31) || "
            "$1, 0))",
            {spec.sender_id, scope.tenant()});
        !r) {
      return std::unexpected(r.error());
    }
    // Exact duplicate, then a similar description due within half an hour (kernex's dedup).
    KERNEX_ASSIGN_OR_RETURN(
        auto near,
        c.exec("SELECT id, description, due_at = $3 FROM scheduled_tasks WHERE tenant = $4 AND "
               "sender_id = $1 AND "
               "status "
               "= 'pending' "
               "AND abs(extract(epoch FROM ($3::timestamp - due_at::timestamp))) <= 1800 "
               "ORDER BY (description = $2) DESC, rid",
               {spec.sender_id, spec.description, spec.due_at, scope.tenant()}));
    for (int i = 0; i < near.size(); ++i) {
      const std::string description = near.text(i, 1);
      if ((description == spec.description && near.boolean(i, 2)) ||
          sqlite::similar_descriptions(description, spec.description)) {
        return near.text(i, 0);
      }
    }
    const std::string id = sqlite::new_uuid();
    KERNEX_RETURN_IF_ERROR(
        c.exec("INSERT INTO scheduled_tasks (id, channel, sender_id, reply_target, description, "
               "due_at, repeat, task_type, project, max_retries, tenant) "
               "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::bigint, $11)",
               {id, spec.channel, spec.sender_id, spec.reply_target, spec.description, spec.due_at,
                spec.repeat, spec.task_type, spec.project, spec.max_retries, scope.tenant()}));
    return id;
  });
}

Result<std::vector<Task>> PgStore::pending_tasks(const MemoryScope& scope,
                                                 const std::string& sender_id) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows, query(task_sql("SELECT ",
                                " FROM scheduled_tasks WHERE tenant = $2 AND sender_id = $1 AND "
                                "status = 'pending' "
                                "ORDER BY due_at, rid"),
                       {sender_id, scope.tenant()}));
  return read_tasks(rows);
}

Result<std::optional<Task>> PgStore::task(const MemoryScope& scope, const std::string& id) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows, query(task_sql("SELECT ", " FROM scheduled_tasks WHERE id = $1 AND tenant = $2"),
                       {id, scope.tenant()}));
  if (rows.empty()) return std::optional<Task>();
  return std::optional<Task>(std::move(read_tasks(rows).front()));
}

Result<std::vector<Task>> PgStore::claim_due_tasks(const MemoryScope& scope,
                                                   const std::string& worker,
                                                   std::chrono::seconds lease, std::size_t limit) {
  if (worker.empty())
    return fail(ErrorCode::Usage, "postgres memory: claiming tasks needs a worker id");
  // Rows another claimer holds are skipped, not waited for; a row another claimer took since
  // this statement's snapshot is re-checked after locking and no longer qualifies. Due tasks and
  // expired leases are separate indexed scans: one condition OR-ing them sorted every due row.
  // A pending task is due at its retry time when a failed attempt set one (retry_at, its own
  // partial index), else at its occurrence (due_at, the (status, due_at, rid) index).
  static const std::string sql = task_sql(
      "WITH pending AS (SELECT id, due_at AS at, rid FROM scheduled_tasks WHERE tenant = $4 AND "
      "status = 'pending' "
      "AND due_at <= kx_now() AND retry_at IS NULL ORDER BY due_at, rid LIMIT $3::bigint FOR "
      "UPDATE SKIP LOCKED), "
      "retries AS (SELECT id, retry_at AS at, rid FROM scheduled_tasks WHERE tenant = $4 AND "
      "status = 'pending' "
      "AND retry_at <= kx_now() ORDER BY retry_at, rid LIMIT $3::bigint FOR UPDATE SKIP LOCKED), "
      "expired AS (SELECT id, coalesce(retry_at, due_at) AS at, rid FROM scheduled_tasks WHERE "
      "tenant = $4 AND status = 'claimed' "
      "AND lease_until <= kx_now() ORDER BY due_at, rid LIMIT $3::bigint FOR UPDATE SKIP LOCKED), "
      "due AS (SELECT id AS due_id FROM (SELECT * FROM pending UNION ALL SELECT * FROM retries "
      "UNION ALL SELECT * FROM expired) all_kinds ORDER BY at, rid LIMIT $3::bigint) "
      "UPDATE scheduled_tasks SET status = 'claimed', claimed_by = $1, "
      "lease_until = kx_time(now() AT TIME ZONE 'UTC' + make_interval(secs => $2::bigint)) "
      "FROM due WHERE id = due_id RETURNING ",
      ", coalesce(retry_at, due_at)");
  const std::int64_t seconds =
      std::clamp<std::int64_t>(lease.count(), 0, 100LL * 366 * 24 * 3600);  // in range
  KERNEX_ASSIGN_OR_RETURN(auto rows,
                          query(sql, {worker, seconds, count_param(limit), scope.tenant()}));
  auto tasks = read_tasks(rows);
  // RETURNING has no order: soonest due first, by the time each was due at (the column after
  // kTaskColumns' 16).
  std::vector<std::pair<std::string, Task>> due;
  for (int i = 0; i < rows.size(); ++i) {
    due.emplace_back(rows.text(i, 16), std::move(tasks[static_cast<std::size_t>(i)]));
  }
  std::stable_sort(due.begin(), due.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  tasks.clear();
  for (auto& [at, t] : due) tasks.push_back(std::move(t));
  return tasks;
}

Result<bool> PgStore::complete_task(const MemoryScope& scope, const std::string& id,
                                    const std::string& worker) {
  return transaction<bool>([&](pg::Connection& c) -> Result<bool> {
    KERNEX_ASSIGN_OR_RETURN(auto t, locked_task(c, scope, id));
    if (!holds(t, worker)) return false;
    if (t.spec.repeat) {
      // The next occurrence after now: a task overdue for days fires once, not once per missed day.
      // Counted from the scheduled occurrence (due_at), never from a retry's time: a daily 02:00
      // task whose retry succeeded at 02:07 still fires at 02:00. It starts without retries.
      KERNEX_ASSIGN_OR_RETURN(auto now, c.exec("SELECT kx_now()"));
      const std::string current = now.text(0, 0);
      std::string next = t.spec.due_at;
      for (int guard = 0; guard < 100000 && (guard == 0 || next <= current); ++guard) {
        next = next_occurrence(next, *t.spec.repeat);
      }
      KERNEX_RETURN_IF_ERROR(c.exec(
          "UPDATE scheduled_tasks SET due_at = $1, status = 'pending', claimed_by = NULL, "
          "lease_until = NULL, "
          "retry_count = 0, last_error = NULL, retry_at = NULL WHERE id = $2 AND tenant = $3",
          {next, id, scope.tenant()}));
      return true;
    }
    KERNEX_RETURN_IF_ERROR(c.exec(
        "UPDATE scheduled_tasks SET status = 'delivered', delivered_at = kx_now(), "
        "claimed_by = NULL, lease_until = NULL, retry_at = NULL WHERE id = $1 AND tenant = $2",
        {id, scope.tenant()}));
    return true;
  });
}

Result<bool> PgStore::fail_task(const MemoryScope& scope, const std::string& id,
                                const std::string& worker, const std::string& error) {
  return transaction<bool>([&](pg::Connection& c) -> Result<bool> {
    KERNEX_ASSIGN_OR_RETURN(auto t, locked_task(c, scope, id));
    if (!holds(t, worker)) {
      return fail(ErrorCode::Memory, "postgres memory: task " + id + " is not held by '" + worker +
                                         "' (status " + t.status + ")");
    }
    const std::uint32_t n = t.retry_count + 1;
    const bool retry = n < t.spec.max_retries;
    // The error text is the caller's: kept valid as PostgreSQL text whatever it holds.
    std::string message = error;
    std::replace(message.begin(), message.end(), '\0', ' ');
    if (sqlite::invalid_utf8_at(message))
      message = Json(message).dump(-1, ' ', false, Json::error_handler_t::replace);
    // The retry's time goes in retry_at; due_at keeps the scheduled occurrence, which the next
    // occurrence of a recurring task counts from and which pending_tasks and task() report.
    auto r = c.exec(
        "UPDATE scheduled_tasks SET retry_count = $1::bigint, last_error = $2, claimed_by = NULL, "
        "lease_until = NULL, "
        "status = CASE WHEN $3::boolean THEN 'pending' ELSE 'failed' END, "
        "retry_at = CASE WHEN $3::boolean THEN kx_time(now() AT TIME ZONE 'UTC' + "
        "make_interval(secs => $4::bigint)) "
        "END WHERE id = $5 AND tenant = $6",
        {n, message, retry, backoff_seconds(n), id, scope.tenant()});
    if (!r) return std::unexpected(r.error());
    return retry;
  });
}

Result<bool> PgStore::cancel_task(const MemoryScope& scope, const std::string& id_prefix,
                                  const std::string& sender_id) {
  if (id_prefix.empty())
    return fail(ErrorCode::Usage, "postgres memory: cancelling a task needs an id or id prefix");
  return transaction<bool>([&](pg::Connection& c) -> Result<bool> {
    // The prefix is compared literally (left(), not LIKE, where % and _ are wildcards).
    KERNEX_ASSIGN_OR_RETURN(
        auto rows,
        c.exec(
            "SELECT id FROM scheduled_tasks WHERE left(id, length($1)) = $1 AND sender_id = $2 AND "
            "tenant = $3 AND status = 'pending' "
            "FOR UPDATE",
            {id_prefix, sender_id, scope.tenant()}));
    if (rows.size() > 1) {
      return fail(ErrorCode::Usage, "postgres memory: task id prefix '" + id_prefix + "' matches " +
                                        std::to_string(rows.size()) +
                                        " pending tasks; give more of the id");
    }
    if (rows.empty()) {
      auto cancelled = c.exec(
          "SELECT 1 FROM scheduled_tasks WHERE left(id, length($1)) = $1 AND sender_id = $2 AND "
          "tenant = $3 AND status = 'cancelled' "
          "LIMIT 1",
          {id_prefix, sender_id, scope.tenant()});
      if (!cancelled) return std::unexpected(cancelled.error());
      return !cancelled->empty();  // cancelling twice is not an error
    }
    auto r = c.exec("UPDATE scheduled_tasks SET status = 'cancelled' WHERE id = $1 AND tenant = $2",
                    {rows.text(0, 0), scope.tenant()});
    if (!r) return std::unexpected(r.error());
    return r->affected() > 0;
  });
}

Result<std::string> PgStore::record_task_run(const MemoryScope& scope, const TaskRun& run) {
  if (run.status != "completed" && run.status != "failed") {
    return fail(ErrorCode::Usage,
                "postgres memory: a task run's status must be completed or failed, got '" +
                    run.status + "'");
  }
  KERNEX_ASSIGN_OR_RETURN(auto started,
                          sqlite::normalize_time(run.started_at, "task run started_at"));
  std::optional<std::string> finished;
  if (!run.finished_at.empty()) {
    KERNEX_ASSIGN_OR_RETURN(auto f,
                            sqlite::normalize_time(run.finished_at, "task run finished_at"));
    finished = f;
  }
  for (const auto* s : {&run.result, &run.error}) {
    if (*s && (sqlite::invalid_utf8_at(**s) || (*s)->find('\0') != std::string::npos)) {
      return fail(ErrorCode::Parse,
                  "postgres memory: a task run's result or error is not valid UTF-8 text");
    }
  }
  const std::string id = sqlite::new_uuid();
  std::optional<std::string> tokens;
  if (run.tokens) tokens = std::to_string(*run.tokens);
  // One write of the writer's batches: returned once its batch committed.
  KERNEX_RETURN_IF_ERROR(
      write({{{"INSERT INTO task_runs (id, task_id, started_at, finished_at, status, result, "
               "error, tokens, tenant) "
               "VALUES ($1, $2, $3, coalesce($4, kx_now()), $5, $6, $7, $8::bigint, $9)",
               {id, run.task_id, started, finished, run.status, run.result, run.error, tokens,
                scope.tenant()}}},
             {}}));
  return id;
}

Result<std::vector<TaskRun>> PgStore::task_runs(const MemoryScope& scope,
                                                const std::string& task_id_prefix,
                                                std::size_t limit) {
  auto rows = query(
      "SELECT id, task_id, started_at, finished_at, status, result, error, tokens FROM task_runs "
      "WHERE tenant = $3 AND left(task_id, length($1)) = $1 ORDER BY started_at DESC, rid DESC "
      "LIMIT $2::bigint",
      {task_id_prefix, count_param(limit), scope.tenant()});
  if (!rows) return std::unexpected(rows.error());
  std::vector<TaskRun> out;
  for (int i = 0; i < rows->size(); ++i) {
    TaskRun r;
    r.id = rows->text(i, 0);
    r.task_id = rows->text(i, 1);
    r.started_at = rows->text(i, 2);
    r.finished_at = rows->text(i, 3);
    r.status = rows->text(i, 4);
    r.result = rows->optional_text(i, 5);
    r.error = rows->optional_text(i, 6);
    if (!rows->null(i, 7)) r.tokens = static_cast<std::uint64_t>(rows->int64(i, 7));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kernex::postgres
