#include "run_manager.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "kernex/log.hpp"
#include "log_context.hpp"
#include "random_id.hpp"
#include "run_fiber.hpp"
#include "runs_json.hpp"
#include "suspendable_journal.hpp"

namespace kernex::server {

namespace fs = std::filesystem;

namespace {

// serve.run_threads 0. Waits on a model (plain HTTP or TLS, connect included) or on a person hold
// no thread, so the bound is for blocking work: a tool's process, a hook, a memory call, DNS, a
// provider plugin with its own blocking client. 256 such at once; stacks 256 x run_stack_kib of
// address space at most.
constexpr unsigned kDefaultRunThreads = 256;

RunPool::Options pool_options(const ServeConfig& config) {
  RunPool::Options o;
  o.max_threads = config.run_threads ? config.run_threads : kDefaultRunThreads;
  o.warm = RunPool::default_warm();
  o.stack_bytes = config.run_stack_kib << 10;
  return o;
}

// Before the server listens: the first burst's runs then take stacks made ahead.
void reserve_run_stacks(const ServeConfig& config) {
  const std::size_t reserve = config.run_stack_reserve.value_or(RunFiber::default_reserve());
  if (reserve == 0) return;
  const std::size_t made = RunFiber::reserve(reserve, config.run_stack_kib << 10);
  if (made < reserve)
    log(LogLevel::Warn, "serve: " + std::to_string(made) + " of serve.run_stack_reserve's " +
                            std::to_string(reserve) +
                            " run stacks could be made; the rest are made as runs need them");
}

}  // namespace

RunManager::RunManager(Deps deps)
    : deps_(std::move(deps)),
      env_(make_run_env(deps_.kernel, deps_.config, &deps_.skills, deps_.observer)),
      // The path before the pool, for bench/serve's baseline only: a new thread for every run.
      thread_per_run_(std::getenv("KERNEX_SERVE_THREAD_PER_RUN") != nullptr),
      fibers_(!thread_per_run_ && std::getenv("KERNEX_SERVE_NO_FIBERS") == nullptr),
      pool_(pool_options(*deps_.config)) {
  if (fibers_) reserve_run_stacks(*deps_.config);
  if (deps_.journals && deps_.approvals) {
    // A run that needs a person parks instead of holding its pool thread (park()).
    if (deps_.config->park_approvals) {
      deps_.approvals->release_while_waiting();
      deps_.approvals->on_decided([this](const std::string& run_id) { unpark(run_id); });
      expiry_ = std::jthread([this](std::stop_token stop) { expire_parked(stop); });
    }
    env_.attach_approvals = [this](RunState& run, RunOptions& options) {
      deps_.approvals->resume(run.id);  // this attempt is not suspended, whatever the last was
      // Keyed by the run's id: a run resumed after a restart gets the journal it wrote; once the
      // run is suspended it records nothing (a put-off call's denial is not its result).
      options.journal = std::make_shared<SuspendableJournal>(
          deps_.journals->journal(run.tenant, run.id, run.take_first_attempt()), *deps_.approvals,
          run.id);
      options.approver = deps_.approvals->approver(run, [this, &run](RunStatus status) {
        if (auto r = deps_.store->set_status(run.id, status); !r)
          log(LogLevel::Error, "serve: " + r.error().describe());
        run.set_status(status);
      });
      // A run suspended by a stopping server saves nothing: the next start runs it again.
      options.before_save = [this, &run, next = std::move(options.before_save)]() -> Result<void> {
        if (deps_.approvals->suspended(run.id))
          return fail(ErrorCode::Cancelled, "the server stopped while the run awaited approval");
        return next ? next() : Result<void>{};
      };
    };
    env_.suspended = [this](const std::string& run_id) {
      return deps_.approvals->suspended(run_id);
    };
  }
}

RunManager::~RunManager() { shutdown(std::chrono::milliseconds(0)); }

std::string RunManager::slot_key(const std::string& tenant, const std::string& session) {
  return tenant + '\n' + session;
}

std::expected<std::shared_ptr<RunState>, ApiError> RunManager::submit(RunRequest request,
                                                                      IfBusy if_busy) {
  if (auto unknown = unknown_skill(deps_.skills, request, *deps_.config))
    return std::unexpected(*unknown);
  std::unique_lock lock(mutex_);
  if (draining_)
    return std::unexpected(api_error(503, "shutting_down", "the server is shutting down"));
  const bool has_session = !request.session.empty();
  const std::string key = slot_key(request.tenant, request.session);
  if (has_session && forgetting_.contains(key)) {
    return std::unexpected(api_error(
        409, "session_busy",
        "session '" + request.session + "' is being forgotten; retry once the DELETE answered"));
  }
  auto slot_it = has_session ? slots_.find(key) : slots_.end();
  const bool busy = slot_it != slots_.end() && slot_it->second.active != nullptr;
  if (busy && if_busy == IfBusy::Reject) {
    return std::unexpected(api_error(409, "session_busy",
                                     "session '" + request.session +
                                         "' has a run in progress; retry later, or send "
                                         "if_busy: enqueue or interrupt"));
  }
  if (deps_.admission) {
    if (auto refused = deps_.admission->admit(request.tenant)) return std::unexpected(*refused);
  }
  auto run =
      std::make_shared<RunState>(random_id("run"), request.tenant, request.session, utc_now());
  run->set_before_end(std::move(request.before_end));
  run->mark_new();
  // Queued under mutex_, so every later write of this run (a cancel's end) commits after it.
  auto recording = std::make_shared<Recording>();
  run->expect_record();
  deps_.store->insert(*run, request.to_json(),
                      [recording, weak = std::weak_ptr(run)](const Result<void>& stored) {
                        if (!stored) log(LogLevel::Error, "serve: " + stored.error().describe());
                        if (auto r = weak.lock()) r->settle_record(stored.has_value());
                        recording->settle();
                      });
  runs_[run->id] = run;
  Pending pending{run, std::move(request), std::move(recording)};
  if (!has_session) {
    launch(std::move(pending));
    return run;
  }
  Slot& slot = slots_[key];
  if (!slot.active) {
    slot.active = run;
    launch(std::move(pending));
    return run;
  }
  if (if_busy == IfBusy::Interrupt) {
    slot.active->request_cancel();
    for (auto& waiting : slot.queue) cancel_queued(waiting);
    queued_ -= slot.queue.size();
    slot.queue.clear();
  }
  slot.queue.push_back(std::move(pending));
  ++queued_;
  return run;
}

void RunManager::cancel_queued(Pending& pending) {
  RunState& run = *pending.run;
  ended_.emplace_back(std::chrono::steady_clock::now(), run.id);
  cancels_.erase(run.id);
  run.request_cancel();
  const Json result = cancelled_result(run.id, run.session);
  std::vector<RunEvent> events = run.all_events();
  events.push_back(RunEvent{events.size() + 1, "run_end", result});
  if (auto r = deps_.store->finish(run.id, RunStatus::Cancelled, result, events); !r) {
    log(LogLevel::Error, "serve: " + r.error().describe());
  }
  run.end("run_end", RunStatus::Cancelled, result);
  if (deps_.admission) deps_.admission->release(run.tenant, 0, 0);
  // Under mutex_: the session's next submit waits for it, so for the caller's release of the
  // session too.
  deps_.store->announce_end();
}

void RunManager::Recording::settle() {
  std::function<void()> start;
  {
    std::lock_guard lock(mutex_);
    settled_ = true;
    start = std::move(start_);
  }
  if (start) start();
}

void RunManager::Recording::then(std::function<void()> start) {
  {
    std::lock_guard lock(mutex_);
    if (!settled_) {
      start_ = std::move(start);
      return;
    }
  }
  start();
}

void RunManager::launch(Pending pending) {
  ++threads_;
  ++launched_;
  const std::string id = pending.run->id;
  unstarted_.insert_or_assign(id, pending);
  const std::shared_ptr<Recording> recording = pending.recording;
  const std::shared_ptr<RunState> run = pending.run;
  auto task = [this, pending = std::move(pending)] {
    run_task(pending);
    finished(pending.run);
  };
  // Under mutex_, or on serve.db's writer once the run's row is committed (then without it).
  auto start = [this, run, task = std::move(task)]() mutable {
    if (thread_per_run_) {
      std::thread(std::move(task)).detach();
      return;
    }
    // A run resumed before its model's first output goes ahead of new runs: in a burst, the first
    // texts of the runs started first then wait for no later run's start (FIFO put their model's
    // answer behind every run queued meanwhile: p50 TTFT ~850 ms, now ~550, its p99 unchanged).
    const auto submit = [this, run](std::function<void()> slice, bool resume) {
      pool_.submit(std::move(slice), resume && !run->produced());
    };
    if (fibers_ && RunFiber::start(task, deps_.config->run_stack_kib << 10, submit)) return;
    pool_.submit(std::move(task));
  };
  if (recording) {
    recording->then(std::move(start));
  } else {
    start();
  }
}

void RunManager::end_unrecorded(const Pending& pending) {
  RunState& run = *pending.run;
  if (deps_.admission) deps_.admission->release(run.tenant, 0, 0);
  run.end("error", RunStatus::Failed,
          {{"run_id", run.id},
           {"code", "store_failed"},
           {"message", "the run could not be recorded; nothing was started"}});
}

void RunManager::run_task(const Pending& pending) {
  RunState& run = *pending.run;
  bool unrecorded = false;
  {
    std::lock_guard lock(mutex_);
    // Gone: cancelled while it waited for a thread, and ended then.
    if (unstarted_.erase(run.id) == 0) return;
    if (run.record() == RunState::Record::Failed) {
      release_session_locked(pending.run);
      unrecorded = true;
    } else if (run.cancel_requested() && run.status() != RunStatus::AwaitingApproval) {
      // Interrupted (if_busy: interrupt) before it started: it ends without calling the model.
      Pending unstarted = pending;
      cancel_queued(unstarted);
      release_session_locked(pending.run);
      return;
    }
  }
  if (unrecorded) return end_unrecorded(pending);
  LogContext scope("run=" + run.id);
  execute(pending);
}

void RunManager::execute(const Pending& pending) {
  RunState& run = *pending.run;
  // A resumed run that awaited approval still does until its approver has the decision.
  if (run.status() != RunStatus::AwaitingApproval) deps_.store->mark_running(run.id);
  const RunEnd end = execute_run(env_, run, pending.request);
  const bool suspended = deps_.approvals && deps_.approvals->suspended(run.id);
  if (suspended && park(pending)) return;
  {
    std::lock_guard lock(mutex_);
    cancels_.erase(run.id);
  }
  std::vector<RunEvent> events = run.all_events();
  events.push_back(RunEvent{events.size() + 1, end.event, end.body});
  if (suspended) {
    // Left awaiting_approval in the store, with its journal: the next start resumes it.
    log(LogLevel::Info, "serve: run " + run.id + " awaits approval; resumed at the next start");
    run.unmute();  // its followers hear that this process will not finish it
  } else if (auto r = deps_.store->finish(run.id, end.status, end.body, events); !r) {
    log(LogLevel::Error, "serve: " + r.error().describe());
  } else if (deps_.journals) {
    // Finished for good: its journal is no longer needed to resume it.
    if (auto f = deps_.journals->forget(run.tenant, run.id); !f)
      log(LogLevel::Warn, "serve: " + f.error().describe());
  }
  // The session is free before anyone hears the run ended: a client that sends its next message
  // on run_end must never meet session_busy.
  release_session(pending.run);
  // The tenant's slot is free before anyone hears of the end: a client that sends its next
  // message on run_end must not meet a 429 from the run it just watched finish.
  if (deps_.admission) {
    deps_.admission->release(run.tenant, end.usage.input_tokens + end.usage.output_tokens,
                             end.usage.cost_usd);
  }
  run.end(end.event, end.status, end.body);
  if (!suspended) deps_.store->announce_end();
}

bool RunManager::park(const Pending& pending) {
  RunState& run = *pending.run;
  std::lock_guard lock(mutex_);
  if (draining_) return false;
  // Asked under the lock: a decision stored after this answer waits in unpark() for the lock,
  // then finds the run parked (asked before it, the decision could slip in between and the run
  // would sit parked until its approval expired). waiting() takes no lock of Approvals'.
  auto waiting = deps_.approvals->waiting(run);
  deps_.approvals->resume(run.id);
  run.rearm();   // its stop fired to suspend it; the next attempt runs with a fresh one
  run.unmute();  // a cancel while parked announces the denial and the run's end
  Pending parked = pending;
  if (cancels_.erase(run.id) > 0) {
    end_parked(parked);  // cancelled while it was suspending
  } else if (!waiting || !*waiting) {
    launch(std::move(parked));  // decided meanwhile (or unknown): go on, or ask again
  } else {
    log(LogLevel::Info, "serve: run " + run.id + " parked until its approval is decided");
    parked_.insert_or_assign(run.id, Parked{std::move(parked), **waiting});
    ++parks_;
    parked_changed_.notify_all();
  }
  return true;
}

void RunManager::unpark(const std::string& run_id) {
  std::lock_guard lock(mutex_);
  auto it = parked_.find(run_id);
  if (draining_ || it == parked_.end()) return;  // not parked: its thread sees the decision
  Pending pending = std::move(it->second.pending);
  parked_.erase(it);
  launch(std::move(pending));
}

// Launched, but every pool thread is busy: it ends now, not when a thread frees up (which, with
// the pool full, could outlast a forget's wait).
bool RunManager::end_unstarted_locked(const RunState& run) {
  auto it = unstarted_.find(run.id);
  if (it == unstarted_.end() || run.status() == RunStatus::AwaitingApproval) return false;
  Pending pending = std::move(it->second);
  unstarted_.erase(it);
  cancel_queued(pending);
  release_session_locked(pending.run);
  return true;
}

void RunManager::end_parked(Pending& pending) {
  RunState& run = *pending.run;
  deps_.approvals->cancel_waiting(run);
  cancel_queued(pending);
  if (auto f = deps_.journals->forget(run.tenant, run.id); !f)
    log(LogLevel::Warn, "serve: " + f.error().describe());
  release_session_locked(pending.run);
}

void RunManager::expire_parked(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    std::int64_t first = std::numeric_limits<std::int64_t>::max();
    for (const auto& [id, p] : parked_) first = std::min(first, p.expires_at);
    const auto until = first == std::numeric_limits<std::int64_t>::max()
                           ? std::chrono::system_clock::now() + std::chrono::hours(1)
                           : std::chrono::system_clock::time_point(std::chrono::seconds(first));
    // Woken early by a park, whose approval may expire before the one waited for.
    const std::size_t seen = parks_;
    parked_changed_.wait_until(lock, stop, until, [&] { return parks_ != seen; });
    if (stop.stop_requested() || draining_) return;
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->second.expires_at > now) {
        ++it;
        continue;
      }
      // Submitted again: its approver finds the approval expired and denies it.
      Pending pending = std::move(it->second.pending);
      it = parked_.erase(it);
      launch(std::move(pending));
    }
  }
}

void RunManager::finished(const std::shared_ptr<RunState>&) {
  std::lock_guard lock(mutex_);
  --threads_;
  idle_.notify_all();
}

void RunManager::release_session(const std::shared_ptr<RunState>& run) {
  std::lock_guard lock(mutex_);
  release_session_locked(run);
}

void RunManager::release_session_locked(const std::shared_ptr<RunState>& run) {
  ended_.emplace_back(std::chrono::steady_clock::now(), run->id);
  if (!run->session.empty()) {
    auto it = slots_.find(slot_key(run->tenant, run->session));
    if (it != slots_.end() && it->second.active == run) {
      Slot& slot = it->second;
      slot.active = nullptr;
      if (!draining_ && !slot.queue.empty()) {
        Pending next = std::move(slot.queue.front());
        slot.queue.pop_front();
        --queued_;
        slot.active = next.run;
        launch(std::move(next));
      }
      if (!slot.active && slot.queue.empty()) slots_.erase(it);
    }
  }
  idle_.notify_all();
}

std::shared_ptr<RunState> RunManager::find(const std::string& tenant, const std::string& run_id) {
  std::shared_ptr<RunState> followed;
  {
    std::lock_guard lock(mutex_);
    if (auto it = runs_.find(run_id); it != runs_.end())
      return it->second->tenant == tenant ? it->second : nullptr;
    if (auto it = restored_.find(run_id); it != restored_.end()) followed = it->second.lock();
  }
  if (followed && followed->tenant == tenant) {
    // Still stored: a forgotten session's runs are gone for new followers too.
    auto still = deps_.store->exists(tenant, run_id);
    return still && *still ? followed : nullptr;
  }
  auto stored = deps_.store->find(tenant, run_id);
  if (!stored || !*stored) return nullptr;
  const StoredRun& s = **stored;
  auto run = std::make_shared<RunState>(s.id, s.tenant, s.session, s.created_at);
  const RunStatus status = parse_run_status(s.status).value_or(RunStatus::Failed);
  // Not live in this process: an unfinished row is a run a previous server left, resumed at start.
  if (is_terminal(status)) {
    // Its events stay in serve.db: each follower reads a page at a time, within its buffer.
    RunStore* store = deps_.store.get();
    const std::size_t page_bytes = deps_.config->stream.buffer_bytes;
    run->restore_paged(
        status, s.result, s.event_count,
        [store, id = s.id, page_bytes](std::uint64_t after,
                                       std::size_t max) -> std::optional<std::vector<RunEvent>> {
          auto page = store->events_page(id, after, max, page_bytes);
          if (page) return std::move(*page);
          log(LogLevel::Error, "serve: " + page.error().describe());
          return std::nullopt;
        });
    std::lock_guard lock(mutex_);
    std::erase_if(restored_, [](const auto& entry) { return entry.second.expired(); });
    restored_[run->id] = run;
  }
  return run;
}

std::expected<std::shared_ptr<RunState>, ApiError> RunManager::cancel(const std::string& tenant,
                                                                      const std::string& run_id) {
  auto run = find(tenant, run_id);
  if (!run) return std::unexpected(api_error(404, "not_found", "no run '" + run_id + "'"));
  std::lock_guard lock(mutex_);
  if (is_terminal(run->status())) return run;
  if (auto it = slots_.find(slot_key(run->tenant, run->session)); it != slots_.end()) {
    auto& queue = it->second.queue;
    for (auto q = queue.begin(); q != queue.end(); ++q) {
      if (q->run != run) continue;
      cancel_queued(*q);
      queue.erase(q);
      --queued_;
      return run;
    }
  }
  if (auto it = parked_.find(run->id); it != parked_.end()) {
    Pending pending = std::move(it->second.pending);
    parked_.erase(it);
    end_parked(pending);
    return run;
  }
  if (end_unstarted_locked(*run)) return run;
  if (deps_.approvals) cancels_.insert(run->id);
  run->request_cancel();
  return run;
}

std::expected<Json, ApiError> RunManager::session_runs(const std::string& tenant,
                                                       const std::string& session,
                                                       std::size_t limit) {
  // A run this process still holds shows its live status.
  return runs_json(deps_.store->session_runs(tenant, session, limit), [&](const StoredRun& s) {
    std::string status = s.status;
    {
      std::lock_guard lock(mutex_);
      if (auto it = runs_.find(s.id); it != runs_.end()) status = to_string(it->second->status());
    }
    return Json{{"run_id", s.id}, {"status", status}, {"created_at", s.created_at}};
  });
}

std::expected<Json, ApiError> RunManager::history(const std::string& tenant,
                                                  const std::string& session, std::size_t limit,
                                                  std::optional<std::int64_t> before) {
  return session_history(*deps_.kernel, tenant, session, limit, before);
}

bool RunManager::session_exists(const std::string& tenant, const std::string& session) {
  {
    std::lock_guard lock(mutex_);
    if (slots_.contains(slot_key(tenant, session))) return true;
  }
  auto runs = deps_.store->session_runs(tenant, session, 1);
  return runs && !runs->empty();
}

std::expected<void, ApiError> RunManager::forget(const std::string& tenant,
                                                 const std::string& session) {
  const std::string key = slot_key(tenant, session);
  std::vector<std::shared_ptr<RunState>> stopping;
  {
    std::lock_guard lock(mutex_);
    if (!forgetting_.insert(key).second)
      return std::unexpected(api_error(409, "session_busy", "the session is being forgotten"));
    if (auto it = slots_.find(key); it != slots_.end()) {
      for (auto& q : it->second.queue) cancel_queued(q);
      queued_ -= it->second.queue.size();
      it->second.queue.clear();
      if (it->second.active) {
        auto active = it->second.active;
        stopping.push_back(active);
        if (auto p = parked_.find(active->id); p != parked_.end()) {
          Pending pending = std::move(p->second.pending);
          parked_.erase(p);
          end_parked(pending);  // may erase the slot: `it` is not used after this
        } else if (!end_unstarted_locked(*active)) {  // may erase the slot too
          if (deps_.approvals) cancels_.insert(active->id);
          active->request_cancel();
        }
      }
    }
  }
  struct Unmark {
    RunManager& m;
    const std::string& key;
    ~Unmark() {
      std::lock_guard lock(m.mutex_);
      m.forgetting_.erase(key);
    }
  } unmark{*this, key};
  // The cancelled run saves what it said so far: wait for it, then delete everything. A run that
  // has not stopped by then would write after the delete (rows no DELETE finds again): refuse.
  {
    std::unique_lock lock(mutex_);
    const bool stopped = idle_.wait_for(lock, std::chrono::seconds(10), [&] {
      for (auto& r : stopping) {
        if (!is_terminal(r->status())) return false;
      }
      return slots_.find(key) == slots_.end();
    });
    if (!stopped) {
      return std::unexpected(
          api_error(409, "session_busy",
                    "the session's run is still stopping; nothing was deleted, retry the DELETE"));
    }
  }
  if (auto r = forget_session_data(*deps_.kernel, *deps_.config, tenant, session); !r) return r;
  if (deps_.approvals) {
    if (auto r = deps_.approvals->forget_session(tenant, session); !r)
      return std::unexpected(api_error(500, "store_failed", r.error().describe()));
  }
  // Last: the runs' rows, journals and webhook payloads, then the WAL truncated over all of it.
  if (auto r = deps_.store->delete_session(tenant, session); !r) {
    return std::unexpected(api_error(500, "store_failed", r.error().describe()));
  }
  std::lock_guard lock(mutex_);
  for (auto it = runs_.begin(); it != runs_.end();) {
    it = (it->second->tenant == tenant && it->second->session == session) ? runs_.erase(it)
                                                                          : std::next(it);
  }
  return {};
}

void RunManager::resume_unfinished() {
  auto rows = deps_.store->unfinished();
  if (!rows) {
    log(LogLevel::Error, "serve: cannot read unfinished runs: " + rows.error().describe());
    return;
  }
  std::lock_guard lock(mutex_);
  for (auto& row : *rows) {
    auto request = RunRequest::from_json(row.request);
    auto run = std::make_shared<RunState>(row.id, row.tenant, row.session, row.created_at);
    if (!request) {
      const Json error{{"run_id", row.id},
                       {"code", "Internal"},
                       {"message", "the stored request is unreadable"}};
      (void)deps_.store->finish(row.id, RunStatus::Failed, error, {});
      deps_.store->announce_end();
      continue;
    }
    // A run cut off mid-way runs again from its message (its exchange was never saved); with
    // the journal it replays the model answers and tool results it recorded instead of asking
    // again, and a run that waited for an approval waits for the same one.
    log(LogLevel::Info,
        "serve: resuming run " + row.id + " (" + row.status + " when the last server stopped)");
    if (row.status == to_string(RunStatus::AwaitingApproval))
      run->set_status(RunStatus::AwaitingApproval);
    runs_[run->id] = run;
    Pending pending{run, std::move(*request), nullptr};  // stored by an earlier server
    if (row.session.empty()) {
      launch(std::move(pending));
      continue;
    }
    Slot& slot = slots_[slot_key(row.tenant, row.session)];
    if (!slot.active) {
      slot.active = run;
      launch(std::move(pending));
    } else {
      slot.queue.push_back(std::move(pending));
      ++queued_;
    }
  }
}

void RunManager::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  // Parked runs stay awaiting_approval in the store: the next start parks them again.
  if (expiry_.joinable()) {
    expiry_.request_stop();
    expiry_.join();
  }
  std::unique_lock lock(mutex_);
  if (deps_.approvals) {
    // A person may answer long after the grace: runs waiting for one stop now and are resumed,
    // still waiting, by the next start.
    deps_.approvals->stop_waiting();
    for (auto& [id, run] : runs_) {
      if (run->status() == RunStatus::AwaitingApproval) run->request_cancel();
    }
  }
  if (!idle_.wait_for(lock, grace, [&] { return threads_ == 0; })) {
    for (auto& [key, slot] : slots_) {
      if (slot.active) slot.active->request_cancel();
    }
    for (auto& [id, run] : runs_) {
      if (!run->session.empty() || is_terminal(run->status())) continue;
      run->request_cancel();  // one-off runs have no slot
    }
  }
  idle_.wait(lock, [&] { return threads_ == 0; });
  const RunPool::Stats pool = pool_.stats();
  if (launched_ > 0) {
    log(LogLevel::Info, "serve: " + std::to_string(launched_) + " run executions on " +
                            std::to_string(thread_per_run_ ? launched_ : pool.created) +
                            " threads made (" +
                            (thread_per_run_ ? std::string("one per run") : "the run pool") + ")");
  }
  launched_ = 0;
}

void RunManager::evict_expired() {
  const auto cutoff = std::chrono::steady_clock::now() - deps_.config->event_retention;
  std::lock_guard lock(mutex_);
  while (!ended_.empty() && ended_.front().first < cutoff) {
    auto it = runs_.find(ended_.front().second);
    // A run not ended (parked, or suspended by a stopping server) is queued again when it ends;
    // one that ended just after it was queued is taken at the next call.
    if (it != runs_.end() && is_terminal(it->second->status())) {
      if (it->second->ended_at() >= cutoff) break;
      runs_.erase(it);
    }
    ended_.pop_front();
  }
}

std::size_t RunManager::active_runs() const {
  std::lock_guard lock(mutex_);
  return threads_ - std::min(threads_, unstarted_.size());
}

std::size_t RunManager::queued_runs() const {
  std::lock_guard lock(mutex_);
  return queued_ + unstarted_.size();  // behind a busy session, or waiting for a pool thread
}

}  // namespace kernex::server
