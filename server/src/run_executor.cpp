// On a fiber whose slices run on the pool's threads (run_fiber.hpp, run_pool.hpp): Kernel::run is
// written as plain synchronous code, and where it waits on its model the fiber gives its thread
// back (kernex/suspend.hpp). An idle session holds no fiber at all (its state is in memory and
// the run store).
#include "run_executor.hpp"

#include <algorithm>

#include "kernex/log.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/saved_skills.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/trajectory.hpp"
#include "kernex/workspace/forget.hpp"
#include "session_id.hpp"
#include "session_overlay.hpp"
#include "session_trajectories.hpp"
#include "user_memory.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;

Json usage_json(const Usage& u) {
  return {{"input_tokens", u.input_tokens},
          {"output_tokens", u.output_tokens},
          {"total_tokens", u.total_tokens()}};
}

// Stream events of the kernel -> the run's API events.
StreamSink event_sink(RunState& run, RunObserver* observer,
                      std::chrono::steady_clock::time_point started) {
  return [&run, observer, started, first = true](const StreamEvent& e) mutable {
    switch (e.kind) {
      case StreamEvent::Kind::TextDelta:
        if (e.text.empty()) return;
        if (first && observer) observer->first_token(std::chrono::steady_clock::now() - started);
        first = false;
        run.append("text_delta", {{"run_id", run.id}, {"text", e.text}});
        return;
      case StreamEvent::Kind::ToolRun: {
        Json args = parse_untrusted(e.text);
        if (args.is_discarded()) args = e.text;
        run.append("tool_call", {{"run_id", run.id},
                                 {"id", e.tool_call_id},
                                 {"name", e.tool_name},
                                 {"arguments", args}});
        return;
      }
      case StreamEvent::Kind::ToolResult:
        run.append("tool_result", {{"run_id", run.id},
                                   {"id", e.tool_call_id},
                                   {"name", e.tool_name},
                                   {"content", e.text},
                                   {"is_error", e.is_error}});
        return;
      case StreamEvent::Kind::Usage:
        run.append("usage", {{"run_id", run.id},
                             {"input_tokens", e.usage.input_tokens},
                             {"output_tokens", e.usage.output_tokens},
                             {"cost_usd", e.usage.cost_usd}});
        return;
      default:
        return;  // thinking and tool-argument fragments stay inside the kernel
    }
  };
}

ConversationKey session_conversation(Kernel& kernel, const std::string& tenant,
                                     const std::string& session) {
  return ConversationKey{"serve/" + tenant, session, kernel.config().project};
}

// The tenant's memory scope: every memory call of its runs and routes is in it, so recall, facts,
// tasks and history never reach another tenant's rows. Tenant names are valid scope names (both
// [A-Za-z0-9_.-]{1,64}); one that is not is refused rather than put in another scope.
std::expected<MemoryScope, ApiError> tenant_scope(const std::string& tenant) {
  auto scope = MemoryScope::of(tenant);
  if (!scope) return std::unexpected(api_error(400, "invalid_tenant", scope.error().describe()));
  return *scope;
}

// The memory conversations of a session (several when idle time started a new one), oldest first.
std::expected<std::vector<std::string>, ApiError> session_conversations(
    Kernel& kernel, MemoryStore& memory, const MemoryScope& scope, const std::string& tenant,
    const std::string& session) {
  const ConversationKey key = session_conversation(kernel, tenant, session);
  ConversationFilter filter;
  filter.channel = key.channel;
  filter.sender_id = key.sender_id;
  filter.limit = 100000;
  auto conversations = memory.list_conversations(scope, filter);
  if (!conversations)
    return std::unexpected(api_error(500, "memory_failed", conversations.error().describe()));
  std::vector<std::string> ids;
  for (auto it = conversations->rbegin(); it != conversations->rend(); ++it) {
    if (it->key.project == key.project) ids.push_back(it->id);
  }
  if (auto r = add_user_conversations(memory, scope, tenant, session, key.project, ids); !r)
    return std::unexpected(api_error(500, "memory_failed", r.error().describe()));
  return ids;
}

RunOptions run_options(const RunEnv& env, RunState& run, const RunRequest& req,
                       const fs::path& workspace) {
  RunOptions options;
  options.stop = run.stop_token();
  options.provider = req.provider;
  options.model = req.model;
  options.extra_system_prompt = req.extra_system_prompt;
  options.workspace = workspace;
  options.turn = req.turn;
  options.generation = req.generation;
  options.client_tools = req.client_tools;
  if (req.session.empty() || req.history) {
    options.history = req.history.value_or(std::vector<ContextEntry>{});
  }
  if (!req.session.empty()) {
    // A session's memory is its own, whether the history comes from it or from the request.
    options.memory_with_history = req.history.has_value();
    options.conversation =
        user_conversation(run.tenant, req.session, req.user, env.kernel->config().project);
  }
  // In the tenant's shared day segments, labelled with the session (session_trajectories.hpp).
  const Config& config = env.kernel->config();
  if (config.trajectories && !config.data_dir.empty()) {
    auto opened = open_session_trajectory(config, run.tenant, req.session);
    if (opened) {
      options.trajectory = *opened;
    } else {
      log(LogLevel::Warn, "no trajectory for run " + run.id + ": " + opened.error().describe());
    }
  }
  // The tenant's trusted saved skills (save_skill() from its REPL code) join its runs' catalog;
  // another tenant's never do (kernex/skills/saved_skills.hpp).
  auto with_saved = skills::source_with_saved_skills(
      *env.skills, config.data_dir, run.tenant,
      skills::TrustRule{config.data_dir / skills::kTrustFileName, {}}, req.skills);
  if (with_saved && *with_saved) {
    options.sources.push_back(*with_saved);
  } else if (!req.skills.empty()) {
    auto source =
        skills::SkillContextSource::create(*env.skills, req.skills);  // names checked at submit
    if (source) options.sources.push_back(*source);
  } else if (env.default_skills) {
    options.sources.push_back(env.default_skills);
  }
  return options;
}

}  // namespace

Json RunRequest::to_json() const {
  Json j{{"tenant", tenant},      {"session", session},
         {"message", message},    {"sender", sender},
         {"skills", skills},      {"extra_system_prompt", extra_system_prompt},
         {"api_model", api_model}};
  if (!user.empty()) j["user"] = user;
  if (provider) j["provider"] = *provider;
  if (model) j["model"] = *model;
  if (history) j["history"] = *history;
  if (!turn.empty()) j["turn"] = turn;
  if (generation != Generation{}) j["generation"] = generation;
  if (!client_tools.empty()) j["client_tools"] = client_tools;
  return j;
}

std::optional<RunRequest> RunRequest::from_json(const Json& j) {
  try {
    RunRequest r;
    r.tenant = j.at("tenant").get<std::string>();
    r.session = j.at("session").get<std::string>();
    r.message = j.at("message").get<std::string>();
    r.sender = j.value("sender", "");
    r.user = j.value("user", "");
    r.skills = j.value("skills", std::vector<std::string>{});
    r.extra_system_prompt = j.value("extra_system_prompt", "");
    r.api_model = j.value("api_model", "");
    if (j.contains("provider")) r.provider = j["provider"].get<std::string>();
    if (j.contains("model")) r.model = j["model"].get<std::string>();
    if (j.contains("history")) r.history = j["history"].get<std::vector<ContextEntry>>();
    if (j.contains("turn")) r.turn = j["turn"].get<std::vector<ContextEntry>>();
    if (j.contains("generation")) r.generation = j["generation"].get<Generation>();
    if (j.contains("client_tools")) r.client_tools = j["client_tools"].get<std::vector<ToolSpec>>();
    return r;
  } catch (const std::exception&) {
    return std::nullopt;  // a row from an older or damaged store
  }
}

RunEnv make_run_env(Kernel* kernel, const ServeConfig* config,
                    const std::vector<skills::Skill>* skills, RunObserver* observer) {
  RunEnv env;
  env.kernel = kernel;
  env.config = config;
  env.skills = skills;
  env.observer = observer;
  if (!skills->empty()) {
    if (auto source = skills::SkillContextSource::create(*skills, {})) env.default_skills = *source;
  }
  return env;
}

std::optional<ApiError> unknown_skill(const std::vector<skills::Skill>& loaded,
                                      const RunRequest& request, const ServeConfig& config) {
  for (const auto& name : request.skills) {
    bool known = false;
    for (const auto& s : loaded) known = known || s.name == name;
    if (known) continue;
    if (auto it = config.refused_skills.find(name); it != config.refused_skills.end())
      return api_error(400, "unknown_skill",
                       "skill '" + name + "' was refused when skills loaded: " + it->second);
    return api_error(400, "unknown_skill", "no skill named '" + name + "' is loaded");
  }
  return std::nullopt;
}

Json cancelled_result(const std::string& run_id, const std::string& session) {
  return {{"run_id", run_id}, {"session_id", session},   {"outcome", "cancelled"},
          {"text", ""},       {"usage", usage_json({})}, {"cost_usd", 0.0}};
}

fs::path session_workspace(const ServeConfig& config, const std::string& tenant,
                           const std::string& session) {
  if (auto it = config.tenant_workspaces.find(tenant); it != config.tenant_workspaces.end())
    return it->second;
  return config.workspaces_root / tenant / session_dir_name(session);
}

RunEnd execute_run(const RunEnv& env, RunState& run, const RunRequest& req,
                   std::function<Result<void>()> before_save) {
  const auto started = std::chrono::steady_clock::now();
  // A resumed run replays its journal: what an earlier attempt emitted is not emitted again.
  run.begin_attempt();
  run.set_running();
  run.append("run_start", {{"run_id", run.id}, {"session_id", run.session}});
  const bool one_off = req.session.empty();
  const fs::path workspace = one_off ? env.config->workspaces_root / run.tenant / "~runs" / run.id
                                     : session_workspace(*env.config, run.tenant, req.session);
  // A workspace in the tool area is made by the sandbox on the run's first tool call, not for every
  // run; a tenant's own project directory is made here if missing.
  std::error_code ec;
  const bool own_dir = env.config->tenant_workspaces.contains(run.tenant);
  if (own_dir && !env.workspaces->known(workspace)) {
    fs::create_directories(workspace, ec);
    if (!ec) env.workspaces->remember(workspace);
  }
  RunOptions options = run_options(env, run, req, workspace);
  const auto scope = tenant_scope(run.tenant);
  if (scope) options.memory_scope = *scope;
  options.sink = event_sink(run, env.observer, started);
  options.before_save = std::move(before_save);
  // Saved once per run, whichever attempt or restart ends it (a crash between saving and
  // storing the run's end would otherwise save it again when the run resumes).
  options.exchange_key = "serve-run/" + run.id;
  if (env.attach_approvals) env.attach_approvals(run, options);
  auto overlay = use_session_overlay(env.kernel->config(), run, req.session, workspace, options);
  const std::string sender = run.tenant + "/" + (req.sender.empty() ? req.session : req.sender);
  Result<RunResult> result = [&]() -> Result<RunResult> {
    if (!overlay) return std::unexpected(overlay.error());
    if (!scope) return fail(ErrorCode::Usage, scope.error().message);
    try {
      return env.kernel->run(Request::from_text(sender, req.message), options);
    } catch (const std::exception& e) {
      return fail(ErrorCode::Internal, std::string("the run threw: ") + e.what());
    }
  }();
  if (one_off && !(env.suspended && env.suspended(run.id))) fs::remove_all(workspace, ec);
  if (!result) env.workspaces->forget(workspace);  // checked again by the session's next run

  RunEnd end;
  end.model = req.api_model;
  if (result) {
    end.body = to_json(*result);
    end.body["trajectory_id"] = end.body["run_id"];
    end.body["run_id"] = run.id;
    end.body["session_id"] = run.session;
    end.status = result->outcome == Outcome::Cancelled ? RunStatus::Cancelled : RunStatus::Done;
    end.usage = result->usage;
    if (end.model.empty()) end.model = result->model;
    end.outcome = end.body["outcome"].get<std::string>();
  } else if (run.cancel_requested()) {
    end.status = RunStatus::Cancelled;
    end.outcome = "cancelled";
    end.body = cancelled_result(run.id, run.session);
  } else {
    end.status = RunStatus::Failed;
    end.event = "error";
    end.outcome = "error";
    end.body = {{"run_id", run.id},
                {"code", std::string(to_string(result.error().code))},
                {"message", result.error().describe()}};
  }
  if (env.observer) {
    env.observer->run_finished(run.tenant, end.model, end.outcome, end.usage,
                               std::chrono::steady_clock::now() - started);
  }
  return end;
}

std::expected<Json, ApiError> session_history(Kernel& kernel, const std::string& tenant,
                                              const std::string& session, std::size_t limit,
                                              std::optional<std::int64_t> before) {
  auto memory = kernel.memory();
  if (!memory) return Json{{"messages", Json::array()}};
  KERNEX_ASSIGN_OR_RETURN(auto scope, tenant_scope(tenant));
  KERNEX_ASSIGN_OR_RETURN(auto conversations,
                          session_conversations(kernel, *memory, scope, tenant, session));
  std::vector<StoredMessage> all;
  for (const auto& id : conversations) {
    std::int64_t after = 0;
    for (;;) {
      auto page = memory->conversation_messages(scope, id, after, 500);
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
    Json entry{{"seq", m.seq},
               {"role", m.entry.role},
               {"content", m.entry.content},
               {"created_at", m.created_at}};
    if (!m.entry.tool_calls.empty()) entry["tool_calls"] = m.entry.tool_calls;
    if (m.entry.tool_result) entry["tool_result"] = *m.entry.tool_result;
    messages.push_back(std::move(entry));
  }
  Json out{{"messages", messages}};
  if (skip > 0) out["next_before"] = all[skip].seq;
  return out;
}

std::expected<void, ApiError> forget_session_data(Kernel& kernel, const ServeConfig& config,
                                                  const std::string& tenant,
                                                  const std::string& session) {
  if (auto memory = kernel.memory()) {
    KERNEX_ASSIGN_OR_RETURN(auto scope, tenant_scope(tenant));
    KERNEX_ASSIGN_OR_RETURN(auto conversations,
                            session_conversations(kernel, *memory, scope, tenant, session));
    for (const auto& id : conversations) {
      if (auto r = memory->delete_conversation(scope, id); !r) {
        return std::unexpected(api_error(500, "memory_failed", r.error().describe()));
      }
    }
  }
  const auto gone = [](const Result<void>& r) -> std::expected<void, ApiError> {
    if (r) return {};
    return std::unexpected(api_error(500, "forget_failed", r.error().describe()));
  };
  // Emptied, not removed: toolboxes keep sandbox policies per workspace, and Landlock holds the
  // directory itself, so a recreated one would be a different directory to a cached policy. A
  // tenant's own project directory is the tenant's, not the session's: left alone.
  if (!config.tenant_workspaces.contains(tenant)) {
    KERNEX_RETURN_IF_ERROR(
        gone(workspace::empty_directory(session_workspace(config, tenant, session))));
  }
  KERNEX_RETURN_IF_ERROR(gone(forget_session_overlays(kernel.config(), tenant, session)));
  if (!kernel.config().data_dir.empty()) {
    if (auto cut = forget_session_trajectories(kernel.config(), tenant, session); !cut)
      return std::unexpected(api_error(500, "forget_failed", cut.error().describe()));
  }
  return {};
}

}  // namespace kernex::server
