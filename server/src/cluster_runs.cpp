#include "cluster_runs.hpp"

#include <unistd.h>

#include <optional>
#include <set>

#include "kernex/log.hpp"
#include "log_context.hpp"
#include "random_id.hpp"
#include "runs_json.hpp"
#include "suspendable_journal.hpp"

namespace kernex::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string make_node_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string id = random_id("node");
  return std::string(host) + "-" + std::to_string(::getpid()) + "-" + id.substr(id.size() - 8);
}

void restore_into(RunState& state, const SharedRun& row, std::vector<RunEvent> events) {
  const RunStatus status = parse_run_status(row.status).value_or(RunStatus::Failed);
  if (!row.node.empty()) state.set_placement(row.node, row.attempt);
  if (is_terminal(status)) {
    state.restore(status, row.result, std::move(events));
  } else {
    state.preload(std::move(events));
    state.set_status(status);
  }
}

// Waits `d` unless the thread is asked to stop; false when it was.
bool pause(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace

ClusterRuns::ClusterRuns(Deps deps)
    : deps_(std::move(deps)),
      env_(make_run_env(deps_.kernel, deps_.config, &deps_.skills, deps_.observer)),
      node_(make_node_id()),
      journals_(std::make_unique<PgJournalStore>(deps_.store->pool(), &deps_.store->writer())),
      approvals_(std::make_unique<Approvals>(
          std::make_unique<PgApprovalStore>(deps_.store->pool(), &deps_.store->writer()),
          deps_.config->approval_timeout)),
      // Claims stop at cluster.max_runs, so every claimed run has a thread at once.
      pool_(
          RunPool::Options{.max_threads = std::max<std::size_t>(1, deps_.config->cluster.max_runs),
                           .warm = RunPool::default_warm(),
                           .stack_bytes = deps_.config->run_stack_kib << 10,
                           .idle_exit = std::chrono::seconds(30)}) {
  approvals_->release_while_waiting();
  env_.attach_approvals = [this](RunState& run, RunOptions& options) { attach(run, options); };
  env_.suspended = [this](const std::string& id) { return approvals_->suspended(id); };
}

// Every run has its journal in the database, written only while this attempt holds the run, and
// asks its approvals there: a call that needs a person suspends the run (park) instead of
// holding a thread and a lease while the person thinks.
void ClusterRuns::attach(RunState& run, RunOptions& options) {
  int attempt = 0;
  {
    std::lock_guard lock(mutex_);
    if (auto it = runs_.find(run.id); it != runs_.end()) attempt = it->second->attempt;
  }
  approvals_->resume(run.id);
  options.journal = std::make_shared<SuspendableJournal>(
      journals_->journal(run.tenant, run.id, node_, attempt), *approvals_, run.id);
  options.approver =
      approvals_->approver(run, [&run](RunStatus status) { run.set_status(status); });
  // A suspended run saves nothing: its exchange is saved once, by the attempt that ends it.
  options.before_save = [this, &run, next = std::move(options.before_save)]() -> Result<void> {
    if (approvals_->suspended(run.id))
      return fail(ErrorCode::Cancelled, "the run waits for a person");
    return next ? next() : Result<void>{};
  };
}

ClusterRuns::~ClusterRuns() { shutdown(std::chrono::milliseconds(0)); }

void ClusterRuns::kick() {
  {
    std::lock_guard lock(mutex_);
    kicked_ = true;
  }
  changed_.notify_all();
}

std::shared_ptr<ClusterRuns::Tracked> ClusterRuns::track(const SharedRun& row,
                                                         std::vector<RunEvent> events) {
  std::lock_guard lock(mutex_);
  auto& slot = runs_[row.id];
  if (!slot) {
    slot = std::make_shared<Tracked>();
    slot->state = std::make_shared<RunState>(row.id, row.tenant, row.session, row.created_at);
    restore_into(*slot->state, row, std::move(events));
  }
  adopt_before_end(*slot->state);
  return slot;
}

// The hook of a run this node took the request of goes to its first state here, whichever comes
// first: the submit's tracking or this node's own claim (which may run the whole run before the
// submitting thread gets to track it).
void ClusterRuns::adopt_before_end(RunState& state) {
  auto it = before_end_.find(state.id);
  if (it == before_end_.end()) return;
  state.set_before_end(std::move(it->second));
  before_end_.erase(it);
}

void ClusterRuns::refresh(Tracked& tracked) {
  std::lock_guard sync(tracked.sync);
  RunState& state = *tracked.state;
  if (tracked.executing || is_terminal(state.status())) return;
  // The row first, then the events: a run's last event is stored with its final status, so a
  // terminal row means every event is already readable.
  auto row = deps_.store->find(state.tenant, state.id);
  if (!row) return;  // the store is unreachable: the next notification or resync tries again
  auto events = deps_.store->events_after(state.id, state.last_event_id());
  if (!events) return;
  const RunStatus status =
      *row ? parse_run_status((*row)->status).value_or(RunStatus::Failed) : RunStatus::Cancelled;
  // A terminal row's last event goes out with the status (RunState::end), never before it: a
  // follower that hears run_end finds the run ended, and what its end stores, stored.
  std::optional<RunEvent> last;
  if (*row && is_terminal(status) && !events->empty()) {
    last = std::move(events->back());
    events->pop_back();
  }
  for (auto& e : *events) {
    if (e.id == state.last_event_id() + 1) state.append(std::move(e.name), std::move(e.data));
  }
  if (!*row) {  // forgotten (DELETE of its session) while followed
    state.finish(RunStatus::Cancelled, cancelled_result(state.id, state.session));
    return;
  }
  const SharedRun& r = **row;
  if (!r.node.empty()) state.set_placement(r.node, r.attempt);
  if (!is_terminal(status)) {
    state.set_status(status);
  } else if (last && last->id == state.last_event_id() + 1) {
    state.end(std::move(last->name), std::move(last->data), status, r.result);
  } else {
    state.finish(status, r.result);
  }
}

void ClusterRuns::refresh_all() {
  std::vector<std::shared_ptr<Tracked>> followed;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, t] : runs_) {
      if (!t->executing && !is_terminal(t->state->status())) followed.push_back(t);
    }
  }
  for (auto& t : followed) refresh(*t);
}

std::vector<std::shared_ptr<ClusterRuns::Tracked>> ClusterRuns::executing() const {
  std::vector<std::shared_ptr<Tracked>> out;
  std::lock_guard lock(mutex_);
  for (const auto& [id, t] : runs_) {
    if (t->executing) out.push_back(t);
  }
  return out;
}

void ClusterRuns::stop_local(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (auto it = runs_.find(id); it != runs_.end() && it->second->executing)
    it->second->state->request_cancel();
}

std::expected<std::shared_ptr<RunState>, ApiError> ClusterRuns::submit(RunRequest request,
                                                                       IfBusy if_busy) {
  if (auto unknown = unknown_skill(deps_.skills, request, *deps_.config))
    return std::unexpected(*unknown);
  {
    std::lock_guard lock(mutex_);
    if (draining_)
      return std::unexpected(api_error(503, "shutting_down", "the server is shutting down"));
  }
  // Limits count what this node knows: a refusal here is final, an admission is not held (the
  // run may execute on another node, which counts it while it runs).
  if (deps_.admission) {
    if (auto refused = deps_.admission->admit(request.tenant)) return std::unexpected(*refused);
    deps_.admission->release(request.tenant, 0, 0);
  }
  SharedRun row;
  row.id = random_id("run");
  row.tenant = request.tenant;
  row.session = request.session;
  row.status = "queued";
  row.created_at = utc_now();
  row.request = request.to_json();
  if (request.before_end) {
    std::lock_guard lock(mutex_);
    before_end_[row.id] = std::move(request.before_end);
  }
  LimitRefusal refused;
  auto admitted = deps_.store->submit(row, if_busy, &refused);
  if (!admitted || *admitted != ClusterStore::Admitted::Queued) {
    std::lock_guard lock(mutex_);
    before_end_.erase(row.id);  // never started: nothing of it ends
  }
  if (!admitted) {
    log(LogLevel::Error, "serve: " + admitted.error().describe());
    return std::unexpected(
        api_error(500, "store_failed", "the run could not be recorded; nothing was started"));
  }
  if (*admitted == ClusterStore::Admitted::Limited) {  // cluster-wide limits (cluster_limits.hpp)
    ApiError e = api_error(429, "rate_limited", refused.message);
    e.retry_after_s = static_cast<unsigned>(std::max<long long>(1, refused.retry_after.count()));
    return std::unexpected(e);
  }
  if (*admitted == ClusterStore::Admitted::Busy) {
    return std::unexpected(api_error(409, "session_busy",
                                     "session '" + request.session +
                                         "' has a run in progress; retry later, or send "
                                         "if_busy: enqueue or interrupt"));
  }
  auto tracked = track(row, {});
  kick();
  return tracked->state;
}

void ClusterRuns::dispatch_loop(std::stop_token stop) {
  LogContext scope("node=" + node_);
  auto failures_logged = Clock::time_point{};
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(250),
                        [&] { return kicked_ || stop.stop_requested(); });
      kicked_ = false;
    }
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (draining_ || stop.stop_requested() || threads_ >= deps_.config->cluster.max_runs) break;
      }
      auto claimed = deps_.store->claim(node_, deps_.config->cluster.lease);
      if (!claimed) {
        if (Clock::now() - failures_logged > std::chrono::seconds(10)) {
          log(LogLevel::Error, "serve: cannot claim runs: " + claimed.error().describe());
          failures_logged = Clock::now();
        }
        break;
      }
      if (!*claimed) break;
      launch(std::move(**claimed));
    }
  }
}

void ClusterRuns::launch(ClaimedRun claimed) {
  const SharedRun& row = claimed.run;
  std::shared_ptr<Tracked> tracked;
  {
    std::lock_guard lock(mutex_);
    auto& slot = runs_[row.id];
    // A state that ended here, or one an earlier attempt of this node still runs (a claim it lost
    // while stalled), is not this attempt's: each execution has its own Tracked, attempt and stop.
    if (!slot || slot->executing || is_terminal(slot->state->status())) {
      slot = std::make_shared<Tracked>();
      slot->state = std::make_shared<RunState>(row.id, row.tenant, row.session, row.created_at);
      adopt_before_end(*slot->state);
    } else {
      slot->state->rearm();  // a run this node parked for an approval: its followers stay
    }
    tracked = slot;
    ++threads_;
  }
  {
    std::lock_guard sync(tracked->sync);
    tracked->claimed_at =
        Clock::now().time_since_epoch().count();  // before `executing`: see heartbeat_loop
    tracked->attempt = row.attempt;
    tracked->executing = true;
    tracked->state->preload(std::move(claimed.events));
    tracked->state->set_placement(node_, row.attempt);
    tracked->flushed = tracked->state->last_event_id();
    tracked->state->show_stored(tracked->flushed);
  }
  flush_soon(tracked);
  auto request = RunRequest::from_json(row.request);
  pool_.submit([this, tracked, request = std::move(request)] {
    LogContext scope("run=" + tracked->state->id);
    if (request) {
      execute(tracked, *request);
    } else {
      const Json error{{"run_id", tracked->state->id},
                       {"code", "Internal"},
                       {"message", "the stored request is unreadable"}};
      end(*tracked, RunEnd{RunStatus::Failed, "error", error, {}, {}, "error"});
    }
    // Notified under the lock: shutdown() may return, and this object go, once threads_ is 0.
    std::lock_guard lock(mutex_);
    --threads_;
    kicked_ = true;  // a slot is free, and the session may have a queued run
    changed_.notify_all();
  });
}

void ClusterRuns::execute(const std::shared_ptr<Tracked>& tracked, const RunRequest& request) {
  RunState& run = *tracked->state;
  const bool counted = deps_.admission && !deps_.admission->admit(run.tenant);
  const int attempt = tracked->attempt;
  // A node that stalled (paused, partitioned) past its lease must not save an exchange the run's
  // next attempt saves too: memory is written only while this node still holds the run.
  auto still_ours = [this, &run, attempt]() -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(auto held, deps_.store->holds(run.id, node_, attempt));
    if (!held)
      return fail(ErrorCode::Cancelled,
                  "this node no longer holds run " + run.id + "; its exchange is not saved");
    return {};
  };
  const RunEnd result = execute_run(env_, run, request, still_ours);
  if (counted) {
    deps_.admission->release(run.tenant, result.usage.input_tokens + result.usage.output_tokens,
                             result.usage.cost_usd);
  }
  if (approvals_->suspended(run.id)) {
    park(*tracked);
  } else {
    end(*tracked, result);
  }
}

void ClusterRuns::park(Tracked& tracked) {
  RunState& run = *tracked.state;
  std::vector<RunEvent> rest;
  {
    std::lock_guard sync(tracked.sync);
    rest = run.events_after(tracked.flushed).events;
  }
  Result<std::optional<RunStatus>> released = std::nullopt;
  const auto deadline = Clock::now() + deps_.config->cluster.lease / 2;
  for (auto wait = std::chrono::milliseconds(50);; wait *= 2) {
    released = deps_.store->release(run.id, node_, tracked.attempt, rest);
    if (released || Clock::now() + wait > deadline) break;
    std::this_thread::sleep_for(wait);
  }
  {
    std::lock_guard sync(tracked.sync);
    tracked.executing = false;
    if (released && *released) {
      tracked.flushed = run.last_event_id();
      run.show_all();
    }
  }
  approvals_->resume(run.id);
  run.unmute();  // what the store tells of it from now on (a cancel) is the run's
  if (released && *released) {
    if (!is_terminal(**released)) run.set_status(**released);
    refresh(tracked);  // a cancel that came meanwhile ended it in the store
    return;
  }
  // The lease runs out and the reaper queues it again: the next attempt resumes from the journal.
  log(LogLevel::Warn,
      "serve: run " + run.id + " awaits approval but could not be released: " +
          (released ? std::string("the claim is gone") : released.error().describe()));
  std::lock_guard lock(mutex_);
  if (auto it = runs_.find(run.id); it != runs_.end() && it->second.get() == &tracked)
    runs_.erase(it);
}

bool ClusterRuns::flush(Tracked& tracked) {
  std::lock_guard sync(tracked.sync);
  if (!tracked.executing) return true;
  auto pending = tracked.state->events_after(tracked.flushed).events;
  if (pending.empty()) return true;
  auto stored = deps_.store->append_events(tracked.state->id, node_, tracked.attempt, pending);
  if (!stored) return false;  // kept for the next flush
  if (!*stored) {
    tracked.state->request_cancel();  // the claim is gone: another node may run it now
    return true;
  }
  tracked.flushed = pending.back().id;
  tracked.state->show_stored(tracked.flushed);
  return true;
}

// The end must reach the store before anyone hears of it; it is retried while the lease lasts,
// since a run whose end is lost would be run again by another node. An end the store did not take
// (the claim is gone, or the store failed) is not this run's result: the local state ends with
// claim_lost and is dropped, so the next reader here reads the store's answer.
void ClusterRuns::end(Tracked& tracked, const RunEnd& result) {
  RunState& run = *tracked.state;
  std::vector<RunEvent> rest;
  {
    std::lock_guard sync(tracked.sync);
    rest = run.events_after(tracked.flushed).events;
  }
  rest.push_back(RunEvent{run.last_event_id() + 1, result.event, result.body});
  Result<bool> stored = false;
  const auto deadline = Clock::now() + deps_.config->cluster.lease / 2;
  for (auto wait = std::chrono::milliseconds(50);; wait *= 2) {
    stored = deps_.store->finish(run.id, node_, tracked.attempt, result.status, result.body, rest);
    if (stored || Clock::now() + wait > deadline) break;
    std::this_thread::sleep_for(wait);
  }
  {
    std::lock_guard sync(tracked.sync);
    tracked.executing = false;
  }
  if (stored && *stored) {
    run.end(result.event, result.status, result.body);
    return;
  }
  const std::string why =
      stored ? "this node lost its claim on the run; another attempt's result stands"
             : "the run's end could not be stored: " + stored.error().describe();
  log(LogLevel::Warn, "serve: run " + run.id + ": " + why);
  const Json lost{{"run_id", run.id}, {"code", "claim_lost"}, {"message", why}};
  run.end("error", RunStatus::Failed, lost);
  std::lock_guard lock(mutex_);
  if (auto it = runs_.find(run.id); it != runs_.end() && it->second.get() == &tracked)
    runs_.erase(it);
}

void ClusterRuns::flush_soon(const std::shared_ptr<Tracked>& tracked) {
  if (tracked->armed.exchange(true)) return;
  std::uint64_t after;
  {
    std::lock_guard sync(tracked->sync);
    after = tracked->flushed;
  }
  auto wake = [this, weak = std::weak_ptr<Tracked>(tracked)] {
    if (auto t = weak.lock()) t->armed = false;
    {
      std::lock_guard lock(mutex_);
      flush_due_ = true;
    }
    changed_.notify_all();
  };
  const bool registered = tracked->state->wait_after(after, std::move(wake)).has_value();
  if (!registered) {  // already something to store
    tracked->armed = false;
    std::lock_guard lock(mutex_);
    flush_due_ = true;
  }
}

// Events reach the store (and followers on other nodes) within a few milliseconds of being
// emitted: a run's next event wakes this loop, which then gathers what else came meanwhile.
void ClusterRuns::flush_loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(100),
                        [&] { return flush_due_ || stop.stop_requested(); });
      flush_due_ = false;
    }
    for (auto& t : executing()) {
      if (flush(*t)) flush_soon(t);
    }
  }
}

void ClusterRuns::heartbeat_loop(std::stop_token stop) {
  LogContext scope("node=" + node_);
  const auto lease =
      std::chrono::duration_cast<std::chrono::milliseconds>(deps_.config->cluster.lease);
  const auto interval = std::max(std::chrono::milliseconds(100), lease / 3);
  auto renewed = Clock::now();  // when the last renewal that succeeded was asked for
  while (pause(stop, interval)) {
    const auto asked_at = Clock::now();
    const auto asked = asked_at.time_since_epoch().count();
    const auto running = executing();
    std::vector<std::string> ids;
    for (const auto& t : running) ids.push_back(t->state->id);
    auto held = deps_.store->renew(node_, deps_.config->cluster.lease, ids);
    const auto now = Clock::now();
    if (held) {
      renewed = asked_at;
      std::set<std::pair<std::string, int>> holding;
      for (const auto& h : *held) {
        holding.emplace(h.id, h.attempt);
        if (h.cancel_requested) stop_local(h.id);
      }
      for (const auto& t : running) {
        if (t->claimed_at >= asked) continue;
        if (!holding.contains({t->state->id, t->attempt})) {
          log(LogLevel::Warn,
              "serve: run " + t->state->id + " is no longer claimed by this node; stopping it");
          t->state->request_cancel();
        }
      }
    } else {
      log(LogLevel::Error, "serve: cannot renew leases: " + held.error().describe());
      // Stop before the lease can expire, so another node never runs a run this one still runs.
      if (now - renewed > lease / 2) {
        for (auto& t : executing()) t->state->request_cancel();
      }
    }
    if (auto reaped = deps_.store->reap(deps_.config->cluster); reaped && !reaped->empty()) {
      log(LogLevel::Info,
          "serve: reclaimed " + std::to_string(reaped->size()) + " run(s) of stopped nodes");
      kick();
    }
  }
}

void ClusterRuns::listen_loop(std::stop_token stop) {
  auto last_resync = Clock::now();
  std::unique_ptr<pg::Connection> listener;
  while (!stop.stop_requested()) {
    if (!listener) {
      auto conn = pg::Connection::open(deps_.store->options());
      if (!conn) {
        log(LogLevel::Error, "serve: cannot listen for changes: " + conn.error().describe());
        pause(stop, std::chrono::seconds(1));
        continue;
      }
      const std::string listen = std::string("LISTEN ") + ClusterStore::kQueueChannel +
                                 "; LISTEN " + ClusterStore::kEventsChannel + "; LISTEN " +
                                 ClusterStore::kCancelChannel + "; LISTEN " +
                                 ClusterStore::kApprovalsChannel;
      if (auto r = (*conn)->script(listen); !r) {
        log(LogLevel::Error, "serve: cannot listen for changes: " + r.error().describe());
        pause(stop, std::chrono::seconds(1));
        continue;
      }
      listener = std::move(*conn);
      refresh_all();  // what was missed while not listening
      kick();
    }
    auto notes = listener->notifications(std::chrono::milliseconds(250));
    if (!notes) {
      log(LogLevel::Error, "serve: " + notes.error().describe());
      listener.reset();
      continue;
    }
    for (const auto& [channel, payload] : *notes) {
      if (channel == ClusterStore::kQueueChannel) {
        kick();
      } else if (channel == ClusterStore::kCancelChannel) {
        stop_local(payload);
      } else if (channel == ClusterStore::kApprovalsChannel) {
        approvals_->changed();
      } else {
        std::shared_ptr<Tracked> t;
        {
          std::lock_guard lock(mutex_);
          if (auto it = runs_.find(payload); it != runs_.end()) t = it->second;
        }
        if (t) refresh(*t);
      }
    }
    if (Clock::now() - last_resync > std::chrono::seconds(1)) {
      refresh_all();
      last_resync = Clock::now();
    }
  }
}

void ClusterRuns::resume_unfinished() {
  std::lock_guard lock(mutex_);
  if (dispatcher_.joinable()) return;
  log(LogLevel::Info, "serve: cluster node " + node_ + " (lease " +
                          std::to_string(deps_.config->cluster.lease.count()) +
                          " s, runs left by stopped nodes are " +
                          (deps_.config->cluster.retry_lost ? "run again" : "failed") + ")");
  dispatcher_ = std::jthread([this](std::stop_token s) { dispatch_loop(s); });
  loops_.emplace_back([this](std::stop_token s) { listen_loop(s); });
  loops_.emplace_back([this](std::stop_token s) { heartbeat_loop(s); });
  loops_.emplace_back([this](std::stop_token s) { flush_loop(s); });
}

std::shared_ptr<RunState> ClusterRuns::find(const std::string& tenant, const std::string& run_id) {
  std::shared_ptr<Tracked> t;
  {
    std::lock_guard lock(mutex_);
    if (auto it = runs_.find(run_id); it != runs_.end()) t = it->second;
  }
  if (t) {
    if (t->state->tenant != tenant) return nullptr;
    refresh(*t);
    // A finished run another node's DELETE forgot is not served from this node's copy.
    if (is_terminal(t->state->status()) && !t->executing) {
      auto row = deps_.store->find(tenant, run_id);
      if (row && !*row) {  // gone (a store error keeps serving the copy)
        std::lock_guard lock(mutex_);
        runs_.erase(run_id);
        return nullptr;
      }
    }
    return t->state;
  }
  auto row = deps_.store->find(tenant, run_id);
  if (!row || !*row) return nullptr;
  auto events = deps_.store->events_after(run_id, 0);
  if (!events) return nullptr;
  return track(**row, std::move(*events))->state;
}

std::expected<std::shared_ptr<RunState>, ApiError> ClusterRuns::cancel(const std::string& tenant,
                                                                       const std::string& run_id) {
  auto outcome = deps_.store->cancel(tenant, run_id);
  if (!outcome) return std::unexpected(api_error(500, "store_failed", outcome.error().describe()));
  if (*outcome == ClusterStore::CancelOutcome::NotFound) {
    return std::unexpected(api_error(404, "not_found", "no run '" + run_id + "'"));
  }
  if (*outcome == ClusterStore::CancelOutcome::Requested) stop_local(run_id);
  auto run = find(tenant, run_id);
  if (!run) return std::unexpected(api_error(404, "not_found", "no run '" + run_id + "'"));
  return run;
}

std::expected<Json, ApiError> ClusterRuns::session_runs(const std::string& tenant,
                                                        const std::string& session,
                                                        std::size_t limit) {
  return runs_json(deps_.store->session_runs(tenant, session, limit), [](const SharedRun& s) {
    Json r{{"run_id", s.id},
           {"status", s.status},
           {"created_at", s.created_at},
           {"attempt", s.attempt}};
    if (!s.node.empty()) r["node"] = s.node;
    return r;
  });
}

std::expected<Json, ApiError> ClusterRuns::history(const std::string& tenant,
                                                   const std::string& session, std::size_t limit,
                                                   std::optional<std::int64_t> before) {
  return session_history(*deps_.kernel, tenant, session, limit, before);
}

bool ClusterRuns::session_exists(const std::string& tenant, const std::string& session) {
  auto has = deps_.store->session_has_runs(tenant, session);
  return has && *has;
}

std::expected<void, ApiError> ClusterRuns::forget(const std::string& tenant,
                                                  const std::string& session) {
  if (auto r = deps_.store->cancel_session(tenant, session); !r) {
    return std::unexpected(api_error(500, "store_failed", r.error().describe()));
  }
  for (auto& t : executing()) {
    if (t->state->tenant == tenant && t->state->session == session) t->state->request_cancel();
  }
  // The cancelled run (here or on another node) saves what it said so far: wait for it to end,
  // then delete everything.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto running = deps_.store->session_running(tenant, session);
    if (!running)
      return std::unexpected(api_error(500, "store_failed", running.error().describe()));
    if (!*running) break;
    // A run that has not stopped would write after the delete (rows no DELETE finds again).
    if (Clock::now() > deadline) {
      return std::unexpected(
          api_error(409, "session_busy",
                    "the session's run is still stopping; nothing was deleted, retry the DELETE"));
    }
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  if (auto r = forget_session_data(*deps_.kernel, *deps_.config, tenant, session); !r) return r;
  if (auto r = deps_.store->delete_session(tenant, session); !r) {
    return std::unexpected(api_error(500, "store_failed", r.error().describe()));
  }
  std::lock_guard lock(mutex_);
  for (auto it = runs_.begin(); it != runs_.end();) {
    const auto& s = *it->second->state;
    const bool drop = s.tenant == tenant && s.session == session && !it->second->executing;
    it = drop ? runs_.erase(it) : std::next(it);
  }
  return {};
}

void ClusterRuns::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard once(shutdown_mutex_);
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  // Runs waiting in their thread for a person (calls in REPL code) are left awaiting approval,
  // for another node to resume, rather than denied by this node's stop.
  approvals_->stop_waiting();
  if (dispatcher_.joinable()) {
    dispatcher_.request_stop();
    changed_.notify_all();
    dispatcher_.join();  // a claim in flight has launched its run by now
  }
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, grace, [&] { return threads_ == 0; })) {
    for (auto& [id, t] : runs_) {
      if (t->executing) t->state->request_cancel();
    }
  }
  changed_.wait(lock, [&] { return threads_ == 0; });
  // The heartbeat kept the claims until every run ended; now the loops can stop.
  std::vector<std::jthread> loops = std::move(loops_);
  lock.unlock();
  loops.clear();
}

void ClusterRuns::evict_expired() {
  const auto cutoff = Clock::now() - deps_.config->event_retention;
  std::lock_guard lock(mutex_);
  for (auto it = runs_.begin(); it != runs_.end();) {
    const auto& t = *it->second;
    const bool expired =
        !t.executing && is_terminal(t.state->status()) && t.state->ended_at() < cutoff;
    it = expired ? runs_.erase(it) : std::next(it);
  }
}

std::size_t ClusterRuns::active_runs() const {
  std::lock_guard lock(mutex_);
  return threads_;
}

std::size_t ClusterRuns::queued_runs() const {
  auto n = deps_.store->queued_count();
  return n ? static_cast<std::size_t>(*n) : 0;
}

}  // namespace kernex::server
