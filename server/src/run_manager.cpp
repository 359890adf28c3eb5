// A thread per active run, not a coroutine: Kernel::run, the providers' HTTP client and the
// sandbox's process waits are synchronous, and an idle session holds no thread at all (its state
// is in memory and serve.db). bench/serve shows the targets hold with 1 000 active runs.
#include "run_manager.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <thread>

#include "kernex/log.hpp"
#include "kernex/skills/context_source.hpp"
#include "log_context.hpp"
#include "random_id.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

Json usage_json(const Usage& u) {
  return {{"input_tokens", u.input_tokens}, {"output_tokens", u.output_tokens}, {"total_tokens", u.total_tokens()}};
}

// Stream events of the kernel -> the run's API events.
StreamSink event_sink(RunState& run, RunObserver* observer, std::chrono::steady_clock::time_point started) {
  return [&run, observer, started, first = true](const StreamEvent& e) mutable {
    switch (e.kind) {
      case StreamEvent::Kind::TextDelta:
        if (e.text.empty()) return;
        if (first && observer) observer->first_token(std::chrono::steady_clock::now() - started);
        first = false;
        run.append("text_delta", {{"run_id", run.id}, {"text", e.text}});
        return;
      case StreamEvent::Kind::ToolRun: {
        Json args = Json::parse(e.text, nullptr, false);
        if (args.is_discarded()) args = e.text;
        run.append("tool_call", {{"run_id", run.id}, {"id", e.tool_call_id}, {"name", e.tool_name}, {"arguments", args}});
        return;
      }
      case StreamEvent::Kind::ToolResult:
        run.append("tool_result", {{"run_id", run.id}, {"id", e.tool_call_id}, {"name", e.tool_name},
                                   {"content", e.text}, {"is_error", e.is_error}});
        return;
      case StreamEvent::Kind::Usage:
        run.append("usage", {{"run_id", run.id}, {"input_tokens", e.usage.input_tokens},
                             {"output_tokens", e.usage.output_tokens}, {"cost_usd", e.usage.cost_usd}});
        return;
      default: return;  // thinking and tool-argument fragments stay inside the kernel
    }
  };
}

}  // namespace

Json RunRequest::to_json() const {
  Json j{{"tenant", tenant}, {"session", session}, {"message", message}, {"sender", sender},
         {"skills", skills}, {"extra_system_prompt", extra_system_prompt}, {"api_model", api_model}};
  if (provider) j["provider"] = *provider;
  if (model) j["model"] = *model;
  if (history) j["history"] = *history;
  return j;
}

std::optional<RunRequest> RunRequest::from_json(const Json& j) {
  try {
    RunRequest r;
    r.tenant = j.at("tenant").get<std::string>();
    r.session = j.at("session").get<std::string>();
    r.message = j.at("message").get<std::string>();
    r.sender = j.value("sender", "");
    r.skills = j.value("skills", std::vector<std::string>{});
    r.extra_system_prompt = j.value("extra_system_prompt", "");
    r.api_model = j.value("api_model", "");
    if (j.contains("provider")) r.provider = j["provider"].get<std::string>();
    if (j.contains("model")) r.model = j["model"].get<std::string>();
    if (j.contains("history")) r.history = j["history"].get<std::vector<ContextEntry>>();
    return r;
  } catch (const std::exception&) {
    return std::nullopt;  // a row from an older or damaged store
  }
}

RunManager::RunManager(Deps deps) : deps_(std::move(deps)) {
  if (!deps_.skills.empty()) {
    if (auto source = skills::SkillContextSource::create(deps_.skills, {})) default_skills_ = *source;
  }
}

RunManager::~RunManager() { shutdown(std::chrono::milliseconds(0)); }

std::string RunManager::slot_key(const std::string& tenant, const std::string& session) {
  return tenant + '\n' + session;
}

ConversationKey RunManager::conversation(const std::string& tenant, const std::string& session) const {
  return ConversationKey{"serve/" + tenant, session, deps_.kernel->config().project};
}

fs::path RunManager::workspace(const std::string& tenant, const std::string& session) const {
  if (auto it = deps_.config->tenant_workspaces.find(tenant); it != deps_.config->tenant_workspaces.end()) {
    return it->second;
  }
  return deps_.config->workspaces_root / tenant / session;
}

std::expected<std::shared_ptr<RunState>, ApiError> RunManager::submit(RunRequest request, IfBusy if_busy) {
  for (const auto& name : request.skills) {
    bool known = false;
    for (const auto& s : deps_.skills) known = known || s.name == name;
    if (!known) return std::unexpected(api_error(400, "unknown_skill", "no skill named '" + name + "' is loaded"));
  }
  std::unique_lock lock(mutex_);
  if (draining_) return std::unexpected(api_error(503, "shutting_down", "the server is shutting down"));
  const bool has_session = !request.session.empty();
  const std::string key = slot_key(request.tenant, request.session);
  auto slot_it = has_session ? slots_.find(key) : slots_.end();
  const bool busy = slot_it != slots_.end() && slot_it->second.active != nullptr;
  if (busy && if_busy == IfBusy::Reject) {
    return std::unexpected(api_error(409, "session_busy", "session '" + request.session +
                                                             "' has a run in progress; retry later, or send "
                                                             "if_busy: enqueue or interrupt"));
  }
  if (deps_.admission) {
    if (auto refused = deps_.admission->admit(request.tenant)) return std::unexpected(*refused);
  }
  auto run = std::make_shared<RunState>(random_id("run"), request.tenant, request.session, utc_now());
  if (auto stored = deps_.store->insert(*run, request.to_json()); !stored) {
    if (deps_.admission) deps_.admission->release(request.tenant, 0, 0);
    log(LogLevel::Error, "serve: " + stored.error().describe());
    return std::unexpected(api_error(500, "store_failed", "the run could not be recorded; nothing was started"));
  }
  runs_[run->id] = run;
  Pending pending{run, std::move(request)};
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
  run.request_cancel();
  const Json result{{"run_id", run.id}, {"session_id", run.session}, {"outcome", "cancelled"}, {"text", ""},
                    {"usage", usage_json({})}, {"cost_usd", 0.0}};
  std::vector<RunEvent> events = run.all_events();
  events.push_back(RunEvent{events.size() + 1, "run_end", result});
  if (auto r = deps_.store->finish(run.id, RunStatus::Cancelled, result, events); !r) {
    log(LogLevel::Error, "serve: " + r.error().describe());
  }
  run.append("run_end", result);
  run.finish(RunStatus::Cancelled, result);
  if (deps_.admission) deps_.admission->release(run.tenant, 0, 0);
}

void RunManager::launch(Pending pending) {
  ++threads_;
  std::thread([this, pending = std::move(pending)] {
    LogContext scope("run=" + pending.run->id);
    execute(pending);
    finished(pending.run);
  }).detach();
}

void RunManager::execute(const Pending& pending) {
  RunState& run = *pending.run;
  const RunRequest& req = pending.request;
  const auto started = std::chrono::steady_clock::now();
  if (auto r = deps_.store->set_status(run.id, RunStatus::Running); !r) log(LogLevel::Warn, "serve: " + r.error().describe());
  run.set_running();
  run.append("run_start", {{"run_id", run.id}, {"session_id", run.session}});

  RunOptions options;
  options.stop = run.stop_token();
  options.provider = req.provider;
  options.model = req.model;
  options.extra_system_prompt = req.extra_system_prompt;
  const bool one_off = req.session.empty();
  const fs::path workspace = one_off ? deps_.config->workspaces_root / run.tenant / "~runs" / run.id
                                     : this->workspace(run.tenant, req.session);
  // A workspace in the tool area is made by the sandbox on the run's first tool call, not for every
  // run; a tenant's own project directory is made here if missing.
  std::error_code ec;
  if (deps_.config->tenant_workspaces.contains(run.tenant)) fs::create_directories(workspace, ec);
  options.workspace = workspace;
  if (one_off) {
    options.history = req.history.value_or(std::vector<ContextEntry>{});
  } else {
    options.conversation = conversation(run.tenant, req.session);
  }
  if (!req.skills.empty()) {
    auto source = skills::SkillContextSource::create(deps_.skills, req.skills);  // names checked at submit
    if (source) options.sources.push_back(*source);
  } else if (default_skills_) {
    options.sources.push_back(default_skills_);
  }
  options.sink = event_sink(run, deps_.observer, started);
  const std::string sender = run.tenant + "/" + (req.sender.empty() ? req.session : req.sender);
  Result<RunResult> result = [&]() -> Result<RunResult> {
    try {
      return deps_.kernel->run(Request::from_text(sender, req.message), options);
    } catch (const std::exception& e) {
      return fail(ErrorCode::Internal, std::string("the run threw: ") + e.what());
    }
  }();
  if (one_off) fs::remove_all(workspace, ec);

  RunStatus status = RunStatus::Done;
  Json body;
  std::string event_name = "run_end";
  Usage usage;
  std::string model = req.api_model;
  std::string outcome;
  if (result) {
    body = to_json(*result);
    body["trajectory_id"] = body["run_id"];
    body["run_id"] = run.id;
    body["session_id"] = run.session;
    status = result->outcome == Outcome::Cancelled ? RunStatus::Cancelled : RunStatus::Done;
    usage = result->usage;
    if (model.empty()) model = result->model;
    outcome = body["outcome"].get<std::string>();
  } else if (run.cancel_requested()) {
    status = RunStatus::Cancelled;
    outcome = "cancelled";
    body = {{"run_id", run.id}, {"session_id", run.session}, {"outcome", outcome}, {"text", ""},
            {"usage", usage_json({})}, {"cost_usd", 0.0}};
  } else {
    status = RunStatus::Failed;
    event_name = "error";
    outcome = "error";
    body = {{"run_id", run.id}, {"code", std::string(to_string(result.error().code))}, {"message", result.error().describe()}};
  }
  std::vector<RunEvent> events = run.all_events();
  events.push_back(RunEvent{events.size() + 1, event_name, body});
  if (auto r = deps_.store->finish(run.id, status, body, events); !r) log(LogLevel::Error, "serve: " + r.error().describe());
  // The session is free before anyone hears the run ended: a client that sends its next message
  // on run_end must never meet session_busy.
  release_session(pending.run);
  // The tenant's slot is free before anyone hears of the end: a client that sends its next
  // message on run_end must not meet a 429 from the run it just watched finish.
  if (deps_.admission) deps_.admission->release(run.tenant, usage.input_tokens + usage.output_tokens, usage.cost_usd);
  run.append(event_name, body);
  run.finish(status, body);
  if (deps_.observer) {
    deps_.observer->run_finished(run.tenant, model, outcome, usage, std::chrono::steady_clock::now() - started);
  }
}

void RunManager::finished(const std::shared_ptr<RunState>&) {
  std::lock_guard lock(mutex_);
  --threads_;
  idle_.notify_all();
}

void RunManager::release_session(const std::shared_ptr<RunState>& run) {
  std::lock_guard lock(mutex_);
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
  {
    std::lock_guard lock(mutex_);
    if (auto it = runs_.find(run_id); it != runs_.end()) return it->second->tenant == tenant ? it->second : nullptr;
  }
  auto stored = deps_.store->find(tenant, run_id);
  if (!stored || !*stored) return nullptr;
  const StoredRun& s = **stored;
  auto run = std::make_shared<RunState>(s.id, s.tenant, s.session, s.created_at);
  const RunStatus status = parse_run_status(s.status).value_or(RunStatus::Failed);
  // Not live in this process: an unfinished row is a run a previous server left, resumed at start.
  if (is_terminal(status)) run->restore(status, s.result, s.events);
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
  run->request_cancel();
  return run;
}

std::expected<Json, ApiError> RunManager::session_runs(const std::string& tenant, const std::string& session,
                                                       std::size_t limit) {
  auto stored = deps_.store->session_runs(tenant, session, limit);
  if (!stored) return std::unexpected(api_error(500, "store_failed", stored.error().describe()));
  Json runs = Json::array();
  for (const auto& s : *stored) {
    std::string status = s.status;
    {
      std::lock_guard lock(mutex_);
      if (auto it = runs_.find(s.id); it != runs_.end()) status = to_string(it->second->status());
    }
    runs.push_back({{"run_id", s.id}, {"status", status}, {"created_at", s.created_at}});
  }
  return Json{{"runs", runs}};
}

// The memory conversations of a session (several when idle time started a new one), oldest first.
std::expected<std::vector<std::string>, ApiError> RunManager::session_conversations(MemoryStore& memory,
                                                                                   const std::string& tenant,
                                                                                   const std::string& session) const {
  const ConversationKey key = conversation(tenant, session);
  ConversationFilter filter;
  filter.channel = key.channel;
  filter.sender_id = key.sender_id;
  filter.limit = 100000;
  auto conversations = memory.list_conversations(filter);
  if (!conversations) return std::unexpected(api_error(500, "memory_failed", conversations.error().describe()));
  std::vector<std::string> ids;
  for (auto it = conversations->rbegin(); it != conversations->rend(); ++it) {
    if (it->key.project == key.project) ids.push_back(it->id);
  }
  return ids;
}

std::expected<Json, ApiError> RunManager::history(const std::string& tenant, const std::string& session,
                                                  std::size_t limit, std::optional<std::int64_t> before) {
  auto memory = deps_.kernel->memory();
  if (!memory) return Json{{"messages", Json::array()}};
  auto conversations = session_conversations(*memory, tenant, session);
  if (!conversations) return std::unexpected(conversations.error());
  std::vector<StoredMessage> all;
  for (const auto& id : *conversations) {
    std::int64_t after = 0;
    for (;;) {
      auto page = memory->conversation_messages(id, after, 500);
      if (!page) return std::unexpected(api_error(500, "memory_failed", page.error().describe()));
      for (auto& m : *page) {
        after = m.seq;
        if (!before || m.seq < *before) all.push_back(std::move(m));
      }
      if (page->size() < 500) break;
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  const std::size_t skip = all.size() > limit ? all.size() - limit : 0;
  Json messages = Json::array();
  for (std::size_t i = skip; i < all.size(); ++i) {
    const auto& m = all[i];
    Json entry{{"seq", m.seq}, {"role", m.entry.role}, {"content", m.entry.content}, {"created_at", m.created_at}};
    if (!m.entry.tool_calls.empty()) entry["tool_calls"] = m.entry.tool_calls;
    if (m.entry.tool_result) entry["tool_result"] = *m.entry.tool_result;
    messages.push_back(std::move(entry));
  }
  Json out{{"messages", messages}};
  if (skip > 0) out["next_before"] = all[skip].seq;
  return out;
}

bool RunManager::session_exists(const std::string& tenant, const std::string& session) {
  {
    std::lock_guard lock(mutex_);
    if (slots_.contains(slot_key(tenant, session))) return true;
  }
  auto runs = deps_.store->session_runs(tenant, session, 1);
  return runs && !runs->empty();
}

std::expected<void, ApiError> RunManager::forget(const std::string& tenant, const std::string& session) {
  std::vector<std::shared_ptr<RunState>> stopping;
  {
    std::lock_guard lock(mutex_);
    if (auto it = slots_.find(slot_key(tenant, session)); it != slots_.end()) {
      for (auto& q : it->second.queue) cancel_queued(q);
      queued_ -= it->second.queue.size();
      it->second.queue.clear();
      if (it->second.active) {
        it->second.active->request_cancel();
        stopping.push_back(it->second.active);
      }
    }
  }
  // The cancelled run saves what it said so far: wait for it, then delete everything.
  {
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, std::chrono::seconds(10), [&] {
      for (auto& r : stopping) {
        if (!is_terminal(r->status())) return false;
      }
      return slots_.find(slot_key(tenant, session)) == slots_.end();
    });
  }
  if (auto memory = deps_.kernel->memory()) {
    auto conversations = session_conversations(*memory, tenant, session);
    if (!conversations) return std::unexpected(conversations.error());
    for (const auto& id : *conversations) {
      if (auto r = memory->delete_conversation(id); !r) {
        return std::unexpected(api_error(500, "memory_failed", r.error().describe()));
      }
    }
  }
  if (auto r = deps_.store->delete_session(tenant, session); !r) {
    return std::unexpected(api_error(500, "store_failed", r.error().describe()));
  }
  if (!deps_.config->tenant_workspaces.contains(tenant)) {
    // Emptied, not removed: toolboxes keep sandbox policies per workspace, and Landlock holds the
    // directory itself, so a recreated one would be a different directory to a cached policy.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(workspace(tenant, session), ec)) fs::remove_all(entry.path(), ec);
  }
  std::lock_guard lock(mutex_);
  for (auto it = runs_.begin(); it != runs_.end();) {
    it = (it->second->tenant == tenant && it->second->session == session) ? runs_.erase(it) : std::next(it);
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
      const Json error{{"run_id", row.id}, {"code", "Internal"}, {"message", "the stored request is unreadable"}};
      (void)deps_.store->finish(row.id, RunStatus::Failed, error, {});
      continue;
    }
    // At least once: a run cut off mid-way runs again from its message (its exchange was never saved).
    log(LogLevel::Info, "serve: resuming run " + row.id + " (" + row.status + " when the last server stopped)");
    runs_[run->id] = run;
    Pending pending{run, std::move(*request)};
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
  std::unique_lock lock(mutex_);
  draining_ = true;
  if (!idle_.wait_for(lock, grace, [&] { return threads_ == 0; })) {
    for (auto& [key, slot] : slots_) {
      if (slot.active) slot.active->request_cancel();
    }
  }
  idle_.wait(lock, [&] { return threads_ == 0; });
}

void RunManager::evict_expired() {
  const auto cutoff = std::chrono::steady_clock::now() - deps_.config->event_retention;
  std::lock_guard lock(mutex_);
  for (auto it = runs_.begin(); it != runs_.end();) {
    const bool expired = is_terminal(it->second->status()) && it->second->ended_at() < cutoff;
    it = expired ? runs_.erase(it) : std::next(it);
  }
}

std::size_t RunManager::active_runs() const {
  std::lock_guard lock(mutex_);
  return threads_;
}

std::size_t RunManager::queued_runs() const {
  std::lock_guard lock(mutex_);
  return queued_;
}

}  // namespace kernex::server
