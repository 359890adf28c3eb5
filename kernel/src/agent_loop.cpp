#include "agent_loop.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <optional>

#include "kernex/log.hpp"
#include "kernex/run_services.hpp"
#include "kernex/suspend.hpp"
#include "recorded_result.hpp"
#include "structured_output.hpp"

namespace kernex {
namespace {

ToolResult error_result(const ToolCall& call, std::string message) {
  return ToolResult{call.id, call.name, std::move(message), true};
}

// A client tool the run does not have itself (the run's own tool of the same name wins).
bool is_client_tool(const ToolRouter& tools, const Context& context, const std::string& name) {
  if (tools.find(name) != nullptr || tools.find_context_tool(name) != nullptr) return false;
  return std::any_of(context.client_tools.begin(), context.client_tools.end(),
                     [&](const ToolSpec& t) { return t.name == name; });
}

// The run's own tools (unless switched off), then the client's (unless tool_choice is none). The
// router's own list when that is all (most calls): copying every schema for each model call, and
// freeing the copy, cost more than the call's memory writes.
const std::vector<ToolSpec>& offered_tools(const ToolRouter& tools, const Context& context,
                                           std::vector<ToolSpec>& storage) {
  static const std::vector<ToolSpec> kNone;
  const bool own = context.tools_enabled();
  if (context.client_tools.empty() || context.generation.tool_choice.mode == ToolChoice::Mode::None)
    return own ? tools.specs() : kNone;
  if (own) storage = tools.specs();
  for (const auto& spec : context.client_tools) {
    if (is_client_tool(tools, context, spec.name)) storage.push_back(spec);
  }
  return storage;
}

// Provider::start's `done` and the run's leaving its thread, in either order: the second of the
// two continues the run (done may come first, even before start returns).
struct Meeting {
  std::optional<Result<Response>> answer;
  Suspender::Resume resume;
  std::atomic<int> arrived{0};
  std::atomic<bool> answered{false};
  void arrive() {
    if (arrived.fetch_add(1, std::memory_order_acq_rel) != 1) return;
    Suspender::Resume go = std::move(resume);
    go();  // the run may go on (and this Meeting's last other owner go) from here
  }
};

// The provider's asynchronous call where the run can wait without its thread (a fiber of
// `kernex serve`): the thread is given back until the answer. Nothing: not accepted.
std::optional<Result<Response>> call_async(Provider& provider, const Context& context,
                                           const std::vector<ToolSpec>& tools,
                                           const StreamSink& sink) {
  Suspender* suspender = current_suspender();
  if (suspender == nullptr) return std::nullopt;
  auto meeting = std::make_shared<Meeting>();
  Provider::Done done = [meeting](Result<Response> answer) {
    if (meeting->answered.exchange(true)) return;  // a second call breaks the contract: ignored
    meeting->answer = std::move(answer);
    meeting->arrive();
  };
  if (!provider.start(context, tools, sink, std::move(done))) return std::nullopt;
  suspender->suspend([meeting](Suspender::Resume resume) {
    meeting->resume = std::move(resume);
    meeting->arrive();
  });
  return std::move(*meeting->answer);
}

Result<Response> call_provider(const LoopDeps& deps, const ToolRouter& tools,
                               const Context& context, const StreamSink& sink) {
  try {
    // On a fiber the model call may give its thread back (kernex/suspend.hpp); tools never do.
    const SuspendPoint may_suspend;
    std::vector<ToolSpec> storage;
    const std::vector<ToolSpec>& offered = offered_tools(tools, context, storage);
    if (auto answer = call_async(*deps.provider, context, offered, sink)) return std::move(*answer);
    return deps.provider->complete(context, offered, sink);
  } catch (const std::exception& e) {
    return fail(ErrorCode::Provider, "provider '" + deps.provider_name + "' threw: " + e.what());
  } catch (...) {
    return fail(ErrorCode::Provider,
                "provider '" + deps.provider_name + "' threw a non-standard exception");
  }
}

// The model's answer to call `turn`: the journal's when it holds one (a resumed run), else the
// provider's, recorded before any of its tool calls runs.
Result<Response> model_answer(const LoopDeps& deps, const ToolRouter& tools, const Context& context,
                              const StreamSink& sink, std::uint32_t turn, bool& replayed) {
  replayed = false;
  if (deps.journal != nullptr) {
    auto stored = deps.journal->response(turn);
    if (!stored) return fail(ErrorCode::Io, "the run's journal could not be read", stored.error());
    if (*stored) {
      replayed = true;
      return std::move(**stored);
    }
  }
  auto response = call_provider(deps, tools, context, sink);
  if (response && deps.journal != nullptr) {
    if (auto recorded = deps.journal->record_response(turn, *response); !recorded)
      return fail(ErrorCode::Io, "the run's journal could not be written", recorded.error());
  }
  return response;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Trajectory* trajectory_of(const LoopDeps& deps) {
  return deps.tree != nullptr ? deps.tree->trajectory() : nullptr;
}

// Hooks and permission rules on a call, then a person when either asks. Nothing: it may run.
std::optional<ToolResult> gate(const LoopDeps& deps, Context& context, ToolCall& call,
                               const std::string& key, const std::string& code_run) {
  std::string ask_reason;
  if (deps.hooks != nullptr) {
    HookOutcome pre = deps.hooks->pre_tool(deps.scope, call);
    if (pre.blocked) return error_result(call, "Tool blocked by hook: " + pre.reason);
    if (pre.asks) ask_reason = pre.reason.empty() ? "a hook asked" : pre.reason;
  }
  if (deps.rules != nullptr) {
    PermissionOutcome permitted = deps.rules->check(call.name, call.arguments);
    if (!permitted.allowed && !permitted.ask)
      return error_result(call, "Tool call denied: " + permitted.reason);
    if (permitted.ask && ask_reason.empty()) ask_reason = permitted.reason;
  }
  if (ask_reason.empty()) return std::nullopt;
  if (deps.tree == nullptr)
    return error_result(call, std::string("Tool call denied: ") + kNeedsApprovalText);
  const ApprovalRequest request{key, call, ask_reason, deps.scope.session_id, code_run};
  const ApprovalGate::Where where{trajectory_of(deps), deps.span, deps.depth};
  if (auto refused = deps.tree->approvals().decide(request, call, deps.rules, context.stop, where))
    return error_result(call, "Tool call denied: " + *refused);
  return std::nullopt;
}

ToolResult execute(const LoopDeps& deps, ToolExecutor* executor, ContextTool* context_tool,
                   Context& context, const ToolCall& call, std::size_t code_max_bytes) {
  try {
    std::optional<RunHandles> for_code;
    if (code_max_bytes > 0) {
      for_code = deps.handles;
      for_code->code_result_max_bytes = code_max_bytes;
    }
    auto executed = executor != nullptr
                        ? executor->execute(context, for_code ? *for_code : deps.handles, call)
                        : context_tool->execute(context, call);
    // Moved, not copied: a result for code may be megabytes (and its structured copy as many).
    return executed ? std::move(*executed)
                    : error_result(call, "Tool failed: " + executed.error().describe());
  } catch (const std::exception& e) {
    return error_result(call, std::string("Tool failed: ") + e.what());
  } catch (...) {
    return error_result(call, "Tool failed with a non-standard exception");
  }
}

// One tool call through hooks, permission rules, approval and executor, kernex's order. Hooks
// work on a copy: they may rewrite the arguments the tool gets, never the model's own
// transcript. With a journal and a key, the start is stored before the tool runs and the result
// after, so a resumed run never runs it twice.
ToolResult run_tool_unrecorded(const LoopDeps& deps, const ToolRouter& tools, Context& context,
                               ToolCall call, const std::string& key, const std::string& code_run,
                               std::size_t code_max_bytes) {
  if (auto refused = gate(deps, context, call, key, code_run)) return *refused;
  ToolExecutor* executor = tools.find(call.name);
  ContextTool* context_tool = executor == nullptr ? tools.find_context_tool(call.name) : nullptr;
  if (executor == nullptr && context_tool == nullptr)
    return error_result(call, "Unknown tool: " + call.name);
  // Context tools change the Context itself, which a replayed result would not: they run again.
  const bool journaled = deps.journal != nullptr && !key.empty() && executor != nullptr;
  if (journaled) {
    if (auto started = deps.journal->tool_started(key, call); !started)
      return error_result(call, "Tool call not run: " + started.error().describe());
  }
  ToolResult result = execute(deps, executor, context_tool, context, call, code_max_bytes);
  if (deps.hooks != nullptr) deps.hooks->post_tool(deps.scope, call, result);
  result.call_id = call.id;
  result.name = call.name;
  if (journaled) {
    if (auto stored = deps.journal->tool_finished(key, result); !stored)
      log(LogLevel::Warn, "tool result not journaled: " + stored.error().describe());
  }
  return result;
}

// A call the journal already knows of (a resumed run): its stored result, or the fact that it
// was started and never finished. Nothing: it has not been started.
std::optional<ToolResult> journaled_result(const LoopDeps& deps, const ToolCall& call,
                                           const std::string& key) {
  if (deps.journal == nullptr || key.empty()) return std::nullopt;
  auto entry = deps.journal->tool(key);
  if (!entry) return error_result(call, "Tool call not run: " + entry.error().describe());
  if (entry->result) {
    ToolResult result = *entry->result;
    result.call_id = call.id;
    result.name = call.name;
    return result;
  }
  if (entry->started) return error_result(call, kInterruptedToolText);
  return std::nullopt;
}

// What a context tool may change that decides which tools the executors offer.
std::vector<std::string> tool_sources(const Context& context) {
  std::vector<std::string> out;
  for (const auto& t : context.toolboxes) out.push_back("toolbox:" + t.name);
  for (const auto& m : context.mcp_servers) out.push_back("mcp:" + m.name);
  return out;
}

Usage add_usage(RunResult& run, const Response& response, const LoopDeps& deps) {
  Usage usage = response.usage;
  if (usage.cost_usd == 0.0 && deps.pricing != nullptr) {
    usage.cost_usd = deps.pricing->cost(response.model.empty() ? run.model : response.model, usage);
  }
  run.usage += usage;
  if (deps.tree != nullptr) deps.tree->charge(usage);
  return usage;
}

void record_provider_call(const LoopDeps& deps, const RunResult& run,
                          const Result<Response>& response, const Usage& usage, double latency_ms,
                          bool replayed = false) {
  Trajectory* t = trajectory_of(deps);
  if (t == nullptr) return;
  Json event = {{"span", deps.span},
                {"depth", deps.depth},
                {"turn", run.turns + (response ? 0 : 1)},
                {"model", run.model},
                {"provider", deps.provider_name},
                {"latency_ms", latency_ms},
                {"input_tokens", usage.input_tokens},
                {"output_tokens", usage.output_tokens},
                {"cache_read_tokens", usage.cache_read_tokens},
                {"cost_usd", usage.cost_usd}};
  if (response) {
    event["text"] = response->text;
    Json calls = Json::array();
    for (const auto& c : response->tool_calls) calls.push_back(c.name);
    event["tool_calls"] = std::move(calls);
  } else {
    event["error"] = response.error().describe();
  }
  if (replayed) event["replayed"] = true;  // from the run's journal: no request was made
  t->record("provider_call", std::move(event));
}

// Budgets are checked after a tool turn, so a final answer is always returned. With a tree,
// what every run and sub-call under the root used counts.
std::optional<Outcome> budget_outcome(const LoopDeps& deps, const Limits& limits,
                                      const RunResult& run) {
  const Usage used = deps.tree != nullptr ? deps.tree->used() : run.usage;
  if (limits.budgets.token_budget && used.billed_tokens() >= *limits.budgets.token_budget)
    return Outcome::BudgetTokens;
  if (limits.budgets.cost_budget_usd && used.cost_usd >= *limits.budgets.cost_budget_usd)
    return Outcome::BudgetCost;
  return std::nullopt;
}

void emit(const LoopDeps& deps, StreamEvent::Kind kind, const std::string& id,
          const std::string& name, std::string text, bool is_error) {
  if (!deps.sink) return;
  StreamEvent event;
  event.kind = kind;
  event.text = std::move(text);
  event.tool_call_id = id;
  event.tool_name = name;
  event.is_error = is_error;
  deps.sink(event);
}

void emit(const LoopDeps& deps, StreamEvent::Kind kind, const ToolCall& call, std::string text,
          bool is_error) {
  emit(deps, kind, call.id, call.name, std::move(text), is_error);
}

// What the model said during a run, so a cancelled run can return and save it: the text of its
// completed model calls, and what the current call streamed before it was stopped.
class SaidSoFar {
 public:
  // Wraps the run's sink to collect the current call's text deltas; no sink, no streaming.
  StreamSink wrap(const StreamSink& sink) {
    if (!sink) return {};
    return [this, &sink](const StreamEvent& event) {
      if (event.kind == StreamEvent::Kind::TextDelta) partial_ += event.text;
      sink(event);
    };
  }
  void start_call() { partial_.clear(); }
  void completed(const std::string& text) {
    partial_.clear();
    add(completed_, text);
  }
  const std::string& partial() const { return partial_; }
  std::string all() const {
    std::string out = completed_;
    add(out, partial_);
    return out;
  }

 private:
  static void add(std::string& to, const std::string& text) {
    if (text.empty()) return;
    if (!to.empty()) to += "\n\n";
    to += text;
  }
  std::string completed_;
  std::string partial_;
};

// Ends a run on a stop request: the partial answer joins the turn (so memory keeps it) and is
// the run's text, after that of the completed calls.
RunResult cancelled(RunResult run, Context& context, const SaidSoFar& said) {
  if (!said.partial().empty()) context.turn.push_back(ContextEntry::assistant(said.partial()));
  run.text = said.all();
  run.outcome = Outcome::Cancelled;
  return run;
}

}  // namespace

ToolResult run_tool(const LoopDeps& deps, const ToolRouter& tools, Context& context, ToolCall call,
                    const std::string& code_run, const std::string& key,
                    std::size_t code_max_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  Trajectory* t = trajectory_of(deps);
  // The record's copy of the arguments as the model or code sent them (hooks may rewrite the
  // tool's own); none when nothing is recorded.
  Json arguments = t != nullptr ? call.arguments : Json();
  const std::string name = t != nullptr ? call.name : std::string();
  std::optional<ToolResult> replayed =
      tools.find(call.name) != nullptr ? journaled_result(deps, call, key) : std::nullopt;
  ToolResult result = replayed ? std::move(*replayed)
                               : run_tool_unrecorded(deps, tools, context, std::move(call), key,
                                                     code_run, code_max_bytes);
  if (t != nullptr) {
    Json event = {{"span", deps.span},
                  {"depth", deps.depth},
                  {"name", name},
                  {"arguments", std::move(arguments)},
                  {"result", recorded_result(result.content)},
                  {"is_error", result.is_error},
                  {"duration_ms", ms_since(t0)}};
    if (!code_run.empty()) event["code_run"] = code_run;
    if (!key.empty() && deps.journal != nullptr) event["key"] = key;
    if (replayed) event["replayed"] = true;
    t->record("tool_call", std::move(event));
  }
  return result;
}

ToolResult run_code_tool(const LoopDeps& deps, const ToolRouter& tools, Context& context,
                         ToolCall call, const std::string& code_run, std::size_t max_bytes) {
  if (context.stop.stop_requested())
    return error_result(call, "Tool call not run: the run was cancelled");
  // Context tools change the run itself: the model calls them, code does not.
  if (tools.find(call.name) == nullptr) {
    return error_result(call, tools.find_context_tool(call.name) != nullptr
                                  ? "Tool " + call.name + " is the model's to call, not code's"
                                  : "Unknown tool: " + call.name);
  }
  std::string key;
  if (deps.cursor != nullptr && !deps.cursor->tool_key.empty())
    key = deps.cursor->tool_key + "/" + std::to_string(++deps.cursor->code_calls);
  if (auto replayed = journaled_result(deps, call, key)) return std::move(*replayed);
  if (deps.tree != nullptr && !deps.tree->take_tool_call()) {
    return error_result(
        call, std::string(kToolBudgetText) + " of " +
                  std::to_string(deps.tree->limits().budgets.tool_call_budget.value_or(0)) +
                  " is used up");
  }
  // Nothing is made for a stream nobody listens to (most calls from code have none), and the
  // stream names the call as code made it (a hook may rewrite the tool's copy).
  if (!deps.sink) return run_tool(deps, tools, context, std::move(call), code_run, key, max_bytes);
  emit(deps, StreamEvent::Kind::ToolRun, call,
       call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace), false);
  const std::string id = call.id, name = call.name;
  ToolResult result = run_tool(deps, tools, context, std::move(call), code_run, key, max_bytes);
  emit(deps, StreamEvent::Kind::ToolResult, id, name, recorded_result(result.content),
       result.is_error);
  return result;
}

std::vector<ToolSpec> ToolRouter::code_specs() const {
  std::vector<ToolSpec> out;
  for (const auto& spec : specs()) {
    if (routes_.contains(spec.name)) out.push_back(spec);
  }
  return out;
}

bool ToolRouter::offer(ToolSpec spec, const Context& context) {
  // kernex only used allowed_tools as an on/off switch; here a non-empty list is a filter.
  if (context.allowed_tools && !context.allowed_tools->empty() &&
      std::find(context.allowed_tools->begin(), context.allowed_tools->end(), spec.name) ==
          context.allowed_tools->end()) {
    return false;
  }
  if (routes_.contains(spec.name) || context_routes_.contains(spec.name)) {
    log(LogLevel::Warn, "tool '" + spec.name + "' is offered twice; keeping the first");
    return false;
  }
  specs_.push_back(std::move(spec));
  return true;
}

namespace {

// One executor's tools: its shared list, or the copy list_tools made for this run.
struct Listed {
  ToolExecutor* executor = nullptr;
  ToolList shared;
  std::vector<ToolSpec> owned;
};

std::optional<Listed> list_of(ToolExecutor& executor, const Context& context) {
  Listed listed{&executor, nullptr, {}};
  Error failed(ErrorCode::Tool, "");
  try {
    if (auto* sharing = dynamic_cast<SharedToolList*>(&executor)) {
      auto list = sharing->list_tools_shared(context);
      if (list) {
        static const ToolList kNone = std::make_shared<const std::vector<ToolSpec>>();
        listed.shared = *list ? std::move(*list) : kNone;
        return listed;
      }
      failed = list.error();
    } else {
      auto list = executor.list_tools(context);
      if (list) {
        listed.owned = std::move(*list);
        return listed;
      }
      failed = list.error();
    }
  } catch (const std::exception& e) {
    failed = Error(ErrorCode::Tool, std::string("list_tools threw: ") + e.what());
  }
  log(LogLevel::Warn, "a toolbox could not list its tools: " + failed.describe());
  return std::nullopt;
}

// The shared lists, when they are all the run has (an executor's own empty list aside) and nothing
// filters them: then the merge of earlier runs serves.
std::optional<std::vector<ToolList>> only_shared(const std::vector<Listed>& lists,
                                                 const Context& context, bool context_tools) {
  if (context_tools || (context.allowed_tools && !context.allowed_tools->empty()))
    return std::nullopt;
  std::vector<ToolList> shared;
  for (const auto& l : lists) {
    if (!l.shared && !l.owned.empty()) return std::nullopt;
    if (l.shared) shared.push_back(l.shared);
  }
  return shared;
}

}  // namespace

ToolRouter ToolRouter::collect(const std::vector<std::shared_ptr<ToolExecutor>>& executors,
                               const Context& context,
                               const std::vector<std::shared_ptr<ContextTool>>& context_tools,
                               MergedToolsCache* shared) {
  std::vector<Listed> lists;
  for (const auto& executor : executors)
    if (auto listed = list_of(*executor, context)) lists.push_back(std::move(*listed));
  const bool any_context_tool =
      std::any_of(context_tools.begin(), context_tools.end(), [](const auto& t) { return !!t; });
  ToolRouter router;
  auto all_shared = shared ? only_shared(lists, context, any_context_tool) : std::nullopt;
  if (all_shared) {
    router.merged_ = shared->get(*all_shared);
    std::vector<ToolExecutor*> by_list;  // the shared lists' executors, in `shared`'s order
    for (const auto& l : lists)
      if (l.shared) by_list.push_back(l.executor);
    for (std::size_t i = 0; i < router.merged_->specs.size(); ++i)
      router.routes_.emplace(router.merged_->specs[i].name, by_list[router.merged_->source[i]]);
    return router;
  }
  for (auto& l : lists) {
    for (std::size_t i = 0, n = l.shared ? l.shared->size() : l.owned.size(); i < n; ++i) {
      ToolSpec spec = l.shared ? (*l.shared)[i] : std::move(l.owned[i]);
      std::string name = spec.name;
      if (router.offer(std::move(spec), context))
        router.routes_.emplace(std::move(name), l.executor);
    }
  }
  for (const auto& tool : context_tools) {
    if (!tool) continue;
    ToolSpec spec = tool->spec();
    std::string name = spec.name;
    if (router.offer(std::move(spec), context))
      router.context_routes_.emplace(std::move(name), tool.get());
  }
  return router;
}

ContextTool* ToolRouter::find_context_tool(const std::string& name) const {
  auto it = context_routes_.find(name);
  return it == context_routes_.end() ? nullptr : it->second;
}

ToolExecutor* ToolRouter::find(const std::string& name) const {
  auto it = routes_.find(name);
  return it == routes_.end() ? nullptr : it->second;
}

namespace {

// One run of the loop: what its steps share.
struct Loop {
  Loop(Context& c, const LoopDeps& d, const Limits& l)
      : context(c), deps(d), limits(l), tools(d.tools), sink(said.wrap(d.sink)) {}

  bool stopped() const { return context.stop.stop_requested(); }
  RunResult ended(Outcome outcome) {
    run.outcome = outcome;
    return std::move(run);
  }
  RunResult cancelled() { return kernex::cancelled(std::move(run), context, said); }

  Context& context;
  const LoopDeps& deps;
  const Limits& limits;
  RunResult run;
  std::uint32_t tools_run = 0;
  // The router in use: the caller's, until a context tool changes what the executors offer.
  const ToolRouter* tools;
  ToolRouter refreshed;
  SaidSoFar said;
  StreamSink sink;
};

// One model call, recorded (a failed one too); a completed one counts as a turn.
Result<Response> ask_model(Loop& loop) {
  const auto t0 = std::chrono::steady_clock::now();
  loop.said.start_call();
  bool replayed = false;
  auto response =
      model_answer(loop.deps, *loop.tools, loop.context, loop.sink, loop.run.turns + 1, replayed);
  const double latency_ms = ms_since(t0);
  if (!response) {
    record_provider_call(loop.deps, loop.run, response, Usage{}, latency_ms);
    return response;
  }
  ++loop.run.turns;
  if (!response->model.empty()) loop.run.model = response->model;
  record_provider_call(loop.deps, loop.run, response, add_usage(loop.run, *response, loop.deps),
                       latency_ms, replayed);
  loop.said.completed(response->text);
  return response;
}

// An answer without tool calls ends the run, unless it misses the response format and turns are
// left: then the model is asked again (nullopt), what it said staying in the transcript.
std::optional<RunResult> answer_turn(Loop& loop, const Response& response) {
  Context& context = loop.context;
  RunResult& run = loop.run;
  auto structured = structured_answer(context.generation.response_format, response.text);
  if (!structured && run.turns < loop.limits.max_turns()) {
    context.turn.push_back(ContextEntry::assistant(response.text));
    context.turn.push_back(ContextEntry::user(
        structured_retry_prompt(context.generation.response_format, structured.error())));
    return std::nullopt;
  }
  if (!structured) {  // the turns ran out before a conforming answer: a limit, not an end
    run.text = response.text;
    return loop.ended(Outcome::MaxTurns);
  }
  run.text = *structured;
  run.outcome = Outcome::EndTurn;
  if (loop.deps.hooks != nullptr) loop.deps.hooks->on_stop(loop.deps.scope, run.text);
  return std::move(run);
}

// What a turn's tool calls left: a stop request, a budget used up, calls for the client.
struct ToolRound {
  bool cancel = false;
  bool exhausted = false;
  std::vector<ToolCall> for_client;
};

// A call the run executes itself, unless the run's tool-call budget is used up.
ToolResult budgeted_call(Loop& loop, const ToolCall& call, const std::string& key,
                         ToolRound& round) {
  const LoopDeps& deps = loop.deps;
  const auto& budget = loop.limits.budgets.tool_call_budget;
  const bool over_budget =
      deps.tree != nullptr ? !deps.tree->take_tool_call() : budget && loop.tools_run >= *budget;
  if (over_budget) {
    round.exhausted = true;
    return error_result(call, "Tool call not run: the run's tool-call budget of " +
                                  std::to_string(budget.value_or(0)) + " is used up");
  }
  ++loop.tools_run;
  emit(deps, StreamEvent::Kind::ToolRun, call,
       call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace), false);
  if (deps.cursor != nullptr) *deps.cursor = LoopCursor{key, 0};
  ToolResult result = run_tool(deps, *loop.tools, loop.context, call, {}, key);
  if (deps.cursor != nullptr) *deps.cursor = LoopCursor{};
  emit(deps, StreamEvent::Kind::ToolResult, call, result.content, result.is_error);
  return result;
}

// Every call gets a result, run or not, so the transcript stays well-formed for the provider (and
// for memory, which keeps a cancelled run's turn); the client's tools are left to the client.
ToolRound run_tool_calls(Loop& loop, const std::vector<ToolCall>& calls) {
  ToolRound round;
  std::size_t index = 0;
  for (const ToolCall& call : calls) {
    if (is_client_tool(*loop.tools, loop.context, call.name)) {
      round.for_client.push_back(
          call);  // the client runs it; its result comes with its next request
      ++index;
      continue;
    }
    // Sub-runs share the root's approver: their span keeps their keys apart from the root's
    // and each other's ("0.1:1.0"); the root's are "<turn>.<index>", as its journal's.
    const std::string key = (loop.deps.depth == 0 ? std::string() : loop.deps.span + ":") +
                            std::to_string(loop.run.turns) + "." + std::to_string(index++);
    round.cancel = round.cancel || loop.stopped();
    if (round.cancel) {
      loop.context.turn.push_back(
          ContextEntry::tool(error_result(call, "Tool call not run: the run was cancelled")));
      continue;
    }
    ToolResult result = budgeted_call(loop, call, key, round);
    loop.run.tool_calls.push_back({call, result});
    loop.context.turn.push_back(ContextEntry::tool(result));
  }
  return round;
}

// A turn with tool calls: the calls join the transcript and run; the run ends on a stop request,
// on calls for the client or on a used-up budget (else nullopt: the next turn, with the tools a
// context tool may have changed).
std::optional<RunResult> tool_turn(Loop& loop, Response& response) {
  Context& context = loop.context;
  RunResult& run = loop.run;
  // parallel_tool_calls: false, and a provider that cannot say so: the first call only.
  if (context.generation.parallel_tool_calls == false && response.tool_calls.size() > 1)
    response.tool_calls.resize(1);
  ContextEntry assistant = ContextEntry::assistant(response.text);
  assistant.tool_calls = response.tool_calls;
  assistant.provider_state = response.provider_state;
  context.turn.push_back(std::move(assistant));

  const std::vector<std::string> sources_before = tool_sources(context);
  ToolRound round = run_tool_calls(loop, response.tool_calls);
  if (round.cancel) return loop.cancelled();
  if (!round.for_client.empty()) {
    run.text = response.text;
    run.client_tool_calls = std::move(round.for_client);
    run.turn = context.turn;
    return loop.ended(Outcome::ClientToolCalls);
  }
  if (loop.deps.executors != nullptr && tool_sources(context) != sources_before) {
    loop.refreshed = ToolRouter::collect(*loop.deps.executors, context, loop.deps.context_tools,
                                         loop.deps.tool_lists);
    loop.tools = &loop.refreshed;
    if (loop.deps.router_in_use != nullptr) *loop.deps.router_in_use = loop.tools;
  }
  if (auto outcome = budget_outcome(loop.deps, loop.limits, run)) return loop.ended(*outcome);
  if (round.exhausted) return loop.ended(Outcome::BudgetTools);
  return std::nullopt;
}

}  // namespace

// The loop: until a stop request or the turn limit, ask the model; an answer without tool calls
// ends the run (answer_turn), tool calls run and the model is asked again (tool_turn).
Result<RunResult> run_agent_loop(Context& context, const LoopDeps& deps, const Limits& limits) {
  Loop loop(context, deps, limits);
  loop.run.provider = deps.provider_name;
  loop.run.model = context.model.value_or(deps.provider->default_model());
  if (deps.router_in_use != nullptr) *deps.router_in_use = loop.tools;
  while (true) {
    if (loop.stopped()) return loop.cancelled();
    if (loop.run.turns >= limits.max_turns()) return loop.ended(Outcome::MaxTurns);
    auto response = ask_model(loop);
    if (!response) {
      // A provider aborts its request on a stop request: that failure is the cancellation.
      if (loop.stopped()) return loop.cancelled();
      return fail(ErrorCode::Provider,
                  "provider '" + deps.provider_name + "' failed on turn " +
                      std::to_string(loop.run.turns + 1),
                  response.error());
    }
    std::optional<RunResult> end =
        response->tool_calls.empty() ? answer_turn(loop, *response) : tool_turn(loop, *response);
    if (end) return std::move(*end);
  }
}

}  // namespace kernex
