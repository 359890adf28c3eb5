#include "kernex/kernel.hpp"
#include "kernex/kernel_files.hpp"

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "agent_loop.hpp"
#include "context_builder.hpp"
#include "hook_chain.hpp"
#include "kernel_run_services.hpp"
#include "plugin_loading.hpp"
#include "provider_pool.hpp"
#include "kernex/log.hpp"
#include "random_bits.hpp"
#include "recorded_result.hpp"
#include "run_plan.hpp"
#include "run_tree.hpp"

namespace kernex {
namespace {

// Summaries come from the run's own provider, with tools switched off: compaction must not
// be able to run tools outside the loop's hooks and rules (a kernex defect).
class ProviderSummarizer final : public Summarizer {
 public:
  explicit ProviderSummarizer(std::shared_ptr<Provider> provider)
      : provider_(std::move(provider)) {}

  Result<std::string> summarize(const std::string& text) override {
    Context ctx(
        "Summarise the conversation below in at most 200 words. Focus on decisions made, files "
        "touched, errors "
        "encountered and unresolved questions; skip small talk. Reply with the summary only, no "
        "preamble.\n\n---\n" +
        text + "\n---");
    ctx.allowed_tools = std::vector<std::string>{};
    KERNEX_ASSIGN_OR_RETURN(auto response, provider_->complete(ctx, {}, {}));
    return response.text;
  }

 private:
  std::shared_ptr<Provider> provider_;
};

// Feeds the store's audit log with every tool call that ran (stores without one ignore it). For a
// store that saves audit rows with the exchange, the run's rows wait for its exchange (take());
// what no exchange takes is recorded on its own at the run's end (flush()).
class MemoryAuditHook final : public HookRunner {
 public:
  MemoryAuditHook(std::shared_ptr<MemoryStore> store, MemoryScope scope)
      : store_(std::move(store)),
        scope_(std::move(scope)),
        with_exchange_(store_->audits_in_exchange()) {}
  void post_tool(const HookScope& scope, const ToolCall& call, ToolResult& result) override {
    AuditRecord rec;
    rec.conversation_id = scope.session_id;
    rec.sender_id = scope.sender_id;
    rec.agent = scope.agent_name;
    rec.tool = call.name;
    rec.arguments = call.arguments;
    rec.result = recorded_result(result.content);  // bounded: see recorded_result.hpp
    rec.status = result.is_error ? "error" : "ok";
    if (with_exchange_) {
      std::lock_guard lock(mutex_);  // a turn's tools may run in parallel
      pending_.push_back(std::move(rec));
      return;
    }
    record(rec);
  }
  std::vector<AuditRecord> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(pending_, {});
  }
  void flush(std::vector<AuditRecord> records) {
    for (const auto& rec : records) record(rec);
  }
  void flush() { flush(take()); }

 private:
  // Also called from AuditFlush's destructor, outside the hook chain's guard: a store plugin
  // that throws is logged, never lets the exception out.
  void record(const AuditRecord& rec) noexcept {
    try {
      if (auto r = store_->record_tool_call(scope_, rec);
          !r && r.error().code != ErrorCode::Unsupported) {
        log(LogLevel::Warn, "audit log: " + r.error().describe());
      }
    } catch (const std::exception& e) {
      log(LogLevel::Warn, std::string("audit log: the memory store threw: ") + e.what());
    } catch (...) {
      log(LogLevel::Warn, "audit log: the memory store threw");
    }
  }

  std::shared_ptr<MemoryStore> store_;
  MemoryScope scope_;  // the run's: one hook per run that writes memory
  const bool with_exchange_;
  std::mutex mutex_;
  std::vector<AuditRecord> pending_;
};

// Records at the run's end, whichever way it ends, the audit rows no exchange took.
struct AuditFlush {
  std::shared_ptr<MemoryAuditHook> hook;
  ~AuditFlush() {
    if (hook) hook->flush();
  }
};

std::string random_id() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "run-%016llx",
                static_cast<unsigned long long>(detail::random_u64()));
  return buf;
}

}  // namespace

// What hosts may add to a kernel in code (add_hook, ...). Runs take a copy when they start, so
// adding while other threads run is safe and a run sees one consistent set.
struct HostParts {
  HookChain hooks;  // hook plugins, then the host's
  std::vector<std::shared_ptr<ToolExecutor>> toolboxes;
  std::shared_ptr<Guardrail> guardrail;
  std::shared_ptr<Summarizer> summarizer;
  std::vector<std::shared_ptr<ContextSource>> sources;
};

struct Kernel::Impl {
  Config config;
  PluginHost host;
  std::shared_ptr<MemoryStore> memory;
  PermissionRules rules;
  PricingTable pricing;

  mutable std::mutex parts_mutex;
  HostParts parts;

  // Instances leased to runs and their sub-queries (provider_pool.hpp), by name and options.
  ProviderPool providers{[this](const std::string& name, const Json& options) {
    return host.create_provider(name, options);
  }};
  // The toolboxes' shared tool lists, merged once for the runs (merged_tools.hpp); after `host`,
  // so it is gone before the plugins whose lists it holds are unloaded.
  MergedToolsCache tool_lists;

  HostParts snapshot() const {
    std::lock_guard lock(parts_mutex);
    return parts;
  }

  Result<std::shared_ptr<Provider>> provider_for(const std::string& name, const Json& options) {
    return providers.lease(name, options);
  }

  // The input guardrail: a blocked request is an error, a sanitized one runs with the new text.
  static Result<Request> screen_input(const HostParts& parts, Request request) {
    if (!parts.guardrail) return request;
    GuardrailAction action = parts.guardrail->check_input(request.text);
    if (action.kind == GuardrailAction::Kind::Block)
      return fail(ErrorCode::Guardrail, "guardrail blocked: " + action.text);
    if (action.kind == GuardrailAction::Kind::Sanitize) request.text = action.text;
    return request;
  }

  // What would make the run fail after it paid for a provider call is refused before the first
  // one: a message the memory store would refuse to save (not valid UTF-8, over its size cap).
  // Invalid budgets and provider settings are refused by plan_run and provider_for, before too.
  Result<void> check_before_paying(const RunPlan& plan, const Request& request) const {
    if (!plan.uses_memory || !memory) return {};
    if (auto keepable = memory->check_message(ContextEntry::user(request.text)); !keepable) {
      return fail(ErrorCode::Usage, "the message was refused before any provider request: " +
                                        keepable.error().message);
    }
    return {};
  }

  struct RunContext {
    Context context;
    std::string conversation_id;  // empty when the run leaves memory alone
  };

  // The run's one Context: the base prompt, what the sources add (skills), the run's extra
  // prompt, then memory (history, memory sections, compaction) or the history the run was
  // given, then the run's model, tools, stop token and workspace (with its overlay layers).
  Result<RunContext> build_run_context(const RunPlan& plan, const Request& request,
                                       const RunOptions& options,
                                       const std::vector<std::shared_ptr<ContextSource>>& sources,
                                       Summarizer* summarizer) {
    RunContext out{Context(request.text), {}};
    Context& context = out.context;
    context.system_prompt = config.system_prompt;
    for (const auto& source : sources) {
      if (!source) continue;
      Result<void> added = [&]() -> Result<void> {
        try {
          return source->contribute(context, request);
        } catch (const std::exception& e) {
          return fail(ErrorCode::Internal, std::string("context source threw: ") + e.what());
        }
      }();
      if (!added) return std::unexpected(added.error());
    }
    if (!options.extra_system_prompt.empty()) {
      context.system_prompt = context.system_prompt.empty()
                                  ? options.extra_system_prompt
                                  : context.system_prompt + "\n\n" + options.extra_system_prompt;
    }
    if (plan.uses_memory && memory) {
      ContextInputs inputs;
      inputs.store = memory.get();
      inputs.key = plan.conversation;
      inputs.scope = options.memory_scope;
      inputs.limits = &config.limits;
      inputs.summarizer = summarizer;
      inputs.history_given = options.history.has_value();  // memory_with_history
      KERNEX_ASSIGN_OR_RETURN(auto added, add_memory(inputs, request, context));
      out.conversation_id = std::move(added.conversation_id);
      if (options.history) context.history = *options.history;
    } else if (plan.parent == nullptr && options.history) {
      context.history = *options.history;
    }
    if (options.model) context.model = options.model;
    context.turn = options.turn;
    context.generation = options.generation;
    context.client_tools = options.client_tools;
    context.allowed_tools = options.allowed_tools;
    context.stop = options.stop;
    if (options.workspace_layers && !options.workspace) {
      return fail(ErrorCode::Config,
                  "RunOptions::workspace_layers needs RunOptions::workspace: the overlay's layers "
                  "lie over the run's workspace");
    }
    context.workspace = options.workspace;
    context.workspace_layers = options.workspace_layers;
    return out;
  }

  // A root run opens its tree (the plan's limits, a trajectory); a sub-run joins its parent's.
  std::shared_ptr<RunTree> tree_for(const RunPlan& plan, const RunOptions& options,
                                    const std::string& conversation_id) {
    if (plan.parent != nullptr) return plan.parent->tree();
    std::shared_ptr<Trajectory> trajectory = options.trajectory;
    // A Config built in code without a data dir records nothing rather than write to the cwd.
    if (!trajectory && config.trajectories && !config.data_dir.empty()) {
      auto opened = open_trajectory(config.data_dir / "trajectories");
      if (opened) {
        trajectory = *opened;
      } else {
        log(LogLevel::Warn, "no trajectory for this run: " + opened.error().describe());
      }
    }
    std::string session = conversation_id;
    if (session.empty()) session = trajectory ? trajectory->run_id() : random_id();
    return std::make_shared<RunTree>(plan.limits, std::move(trajectory), std::move(session),
                                     options.approver);
  }

  std::shared_ptr<KernelRunServices> services_for(const RunPlan& plan,
                                                  std::shared_ptr<RunTree> tree,
                                                  const std::shared_ptr<Provider>& provider,
                                                  const RunOptions& options,
                                                  const std::optional<std::string>& model) {
    KernelRunServices::Setup services;
    services.depth = plan.parent != nullptr ? plan.parent->depth() + 1 : 0;
    services.span = plan.parent != nullptr ? tree->child_span(plan.parent->span()) : "0";
    services.tree = std::move(tree);
    services.provider = provider;
    // Batched sub-queries lease instances of their own, as runs do.
    services.more_providers = [this, name = plan.provider,
                               provider_options = plan.provider_options] {
      return provider_for(name, provider_options);
    };
    services.model = model;
    services.pricing = &pricing;
    services.sub_runner = options.sub_runner;
    services.stop = options.stop;
    if (plan.parent != nullptr) services.parent_code_run = plan.parent->code_run();
    return std::make_shared<KernelRunServices>(std::move(services));
  }

  // The memory audit hook of a run that may write memory (it comes first in the run's chain).
  std::shared_ptr<MemoryAuditHook> audit_hook(const RunPlan& plan, const RunOptions& options) {
    if (!memory || !plan.audits_to_memory) return nullptr;
    return std::make_shared<MemoryAuditHook>(memory, options.memory_scope);
  }

  // What the loop works with.
  LoopDeps loop_deps(const RunPlan& plan, const HostParts& parts, const ToolRouter& router,
                     HookChain& hooks, const Request& request, const RunOptions& options,
                     const std::string& conversation_id, RunTree& tree,
                     const std::shared_ptr<KernelRunServices>& services) {
    hooks.add_all(parts.hooks);
    LoopDeps deps;
    deps.provider_name = plan.provider;
    deps.tools = &router;
    deps.executors = &parts.toolboxes;
    deps.tool_lists = &tool_lists;
    deps.hooks = hooks.empty() ? nullptr : &hooks;
    deps.rules = rules.empty() ? nullptr : &rules;
    deps.pricing = &pricing;
    deps.scope = HookScope{conversation_id, request.sender_id, plan.provider};
    deps.handles = RunHandles{services, tree.trajectory_ptr(), options.read_grants};
    deps.sink = options.sink;
    deps.tree = &tree;
    deps.span = services->span();
    deps.depth = services->depth();
    // Only the root loop is journaled: a resumed run replays it, sub-runs are inside its tools.
    if (plan.parent == nullptr) deps.journal = options.journal.get();
    return deps;
  }

  // Tools for the run's code: those of the router in use, run as the loop runs a model's call.
  static KernelRunServices::ToolAccess code_tool_access(const LoopDeps& deps,
                                                        const ToolRouter*& router_in_use,
                                                        Context& context) {
    return {[&router_in_use] { return router_in_use->code_specs(); },
            [&deps, &router_in_use, &context](ToolCall call, const std::string& code_run,
                                              std::size_t max_bytes) {
              return run_code_tool(deps, *router_in_use, context, std::move(call), code_run,
                                   max_bytes);
            }};
  }

  // The loop with the run's own code around it (before_loop, after_loop) and the output
  // guardrail on a finished answer.
  static Result<RunResult> loop(Context& context, const LoopDeps& deps, const RunPlan& plan,
                                const RunOptions& options, const HostParts& parts,
                                const std::string& conversation_id) {
    std::uint32_t extension_calls = 0;
    const RunOptions::ToolCaller call_tool = [&](const std::string& name, Json arguments) {
      return run_tool(
          deps, *deps.tools, context,
          ToolCall{"kernex-" + std::to_string(++extension_calls), name, std::move(arguments)});
    };
    if (options.before_loop) {
      KERNEX_RETURN_IF_ERROR(options.before_loop(context, call_tool));
    }
    auto looped = run_agent_loop(context, deps, plan.limits);
    if (!looped) return looped;
    looped->conversation_id = conversation_id;
    // A cancelled run does no more work: what it said so far is its answer.
    if (options.after_loop && looped->outcome != Outcome::Cancelled) {
      KERNEX_RETURN_IF_ERROR(options.after_loop(*looped, call_tool));
    }
    if (parts.guardrail && looped->outcome == Outcome::EndTurn) {
      GuardrailAction action = parts.guardrail->check_output(looped->text);
      if (action.kind == GuardrailAction::Kind::Block)
        return fail(ErrorCode::Guardrail, "guardrail blocked: " + action.text);
      if (action.kind == GuardrailAction::Kind::Sanitize) looped->text = action.text;
    }
    return looped;
  }

  // conversation_id: so `kernex memory forget --conversation ID` finds the run's trajectory.
  static void record_start(RunTree& tree, const RunOptions& options, const Request& request,
                           const std::string& provider, const std::string& model,
                           const std::string& conversation_id) {
    if (Trajectory* t = tree.trajectory()) {
      Json event{{"run_id", t->run_id()},    {"kind", options.kind},
                 {"question", request.text}, {"provider", provider},
                 {"model", model},           {"max_depth", tree.limits().max_depth}};
      if (!conversation_id.empty()) event["conversation_id"] = conversation_id;
      // Not waited for: nothing outside has seen the run yet, and its next record() (the first
      // provider_call, or run_end) returns only once this line is written too.
      t->record_soon("run_start", std::move(event));
    }
  }

  // A root run ends with run_end; a sub-run is one sub_call (rlm_query) of its parent's span.
  static void record_end(RunTree& tree, const KernelRunServices& services, const Request& request,
                         const Result<RunResult>& run,
                         std::chrono::steady_clock::time_point started) {
    Trajectory* t = tree.trajectory();
    if (t == nullptr) return;
    Json event = Json::object();
    if (run) {
      event = {{"outcome", std::string(to_string(run->outcome))},
               {"text", run->text},
               {"turns", run->turns},
               {"input_tokens", run->usage.input_tokens},
               {"output_tokens", run->usage.output_tokens},
               {"cost_usd", run->usage.cost_usd},
               {"model", run->model}};
      if (run->result) event["result"] = *run->result;
    } else {
      event["error"] = run.error().describe();
    }
    event["latency_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    if (services.depth() == 0) {
      const Usage total = tree.used();
      event["tree_input_tokens"] = total.input_tokens;
      event["tree_output_tokens"] = total.output_tokens;
      event["tree_cost_usd"] = total.cost_usd;
      event["tree_tool_calls"] = tree.tool_calls_used();
      t->record("run_end", std::move(event));
      return;
    }
    const std::string& span = services.span();
    event["span"] = span;
    event["parent"] = span.substr(0, span.rfind('.'));
    event["depth"] = services.depth();
    event["kind"] = "rlm_query";
    if (!services.parent_code_run().empty()) event["code_run"] = services.parent_code_run();
    event["prompt"] = request.text;
    if (run) event["answer"] = run->text;
    t->record("sub_call", std::move(event));
  }

  // The exchange with its tool calls (a cancelled run's partial answer is in its turn) and what
  // it cost, in one store write.
  static Result<void> save_exchange(MemoryStore& memory, const MemoryScope& scope,
                                    const std::string& conversation_id, const Request& request,
                                    const Context& context, const RunResult& run,
                                    const std::string& key, MemoryAuditHook* audit) {
    ExchangeRecord record;
    record.conversation_id = conversation_id;
    record.idempotency_key = key;
    record.messages.push_back(ContextEntry::user(request.text));
    record.messages.insert(record.messages.end(), context.turn.begin(), context.turn.end());
    if (run.outcome == Outcome::EndTurn)
      record.messages.push_back(ContextEntry::assistant(run.text));
    record.usage =
        UsageRecord{conversation_id, request.sender_id, run.model, run.provider, run.usage};
    if (audit != nullptr) record.audits = audit->take();
    if (auto saved = memory.save_exchange(scope, record); !saved) {
      if (audit != nullptr) audit->flush(std::move(record.audits));  // the calls did run
      return fail(ErrorCode::Memory, "saving the exchange failed", saved.error());
    }
    return {};
  }

  // Per-run tools of the sources (e.g. activate_skill), in source order.
  static Result<std::vector<std::shared_ptr<ContextTool>>> context_tools(
      const Request& request, const std::vector<std::shared_ptr<ContextSource>>& sources) {
    std::vector<std::shared_ptr<ContextTool>> out;
    for (const auto& source : sources) {
      if (!source) continue;
      try {
        for (auto& tool : source->context_tools(request)) {
          if (tool) out.push_back(std::move(tool));
        }
      } catch (const std::exception& e) {
        return fail(ErrorCode::Internal,
                    std::string("context source threw while offering tools: ") + e.what());
      }
    }
    return out;
  }
};

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::EndTurn:
      return "end_turn";
    case Outcome::MaxTurns:
      return "max_turns";
    case Outcome::BudgetTokens:
      return "budget_exhausted:tokens";
    case Outcome::BudgetCost:
      return "budget_exhausted:cost";
    case Outcome::BudgetTools:
      return "budget_exhausted:tools";
    case Outcome::Cancelled:
      return "cancelled";
    case Outcome::ClientToolCalls:
      return "client_tool_calls";
  }
  return "end_turn";
}

Json to_json(const RunResult& r) {
  Json calls = Json::array();
  for (const auto& rec : r.tool_calls) {
    calls.push_back({{"id", rec.call.id},
                     {"name", rec.call.name},
                     {"arguments", rec.call.arguments},
                     {"result", rec.result.content},
                     {"is_error", rec.result.is_error}});
  }
  Json out{{"text", r.text},
           {"outcome", std::string(to_string(r.outcome))},
           {"turns", r.turns},
           {"usage",
            {{"input_tokens", r.usage.input_tokens},
             {"output_tokens", r.usage.output_tokens},
             {"cache_read_tokens", r.usage.cache_read_tokens},
             {"cache_write_tokens", r.usage.cache_write_tokens},
             {"total_tokens", r.usage.total_tokens()}}},
           {"cost_usd", r.usage.cost_usd},
           {"tool_calls", calls},
           {"model", r.model},
           {"provider", r.provider},
           {"conversation_id", r.conversation_id},
           {"run_id", r.run_id},
           {"result", r.result.value_or(Json(nullptr))}};
  if (r.outcome == Outcome::ClientToolCalls) {
    out["client_tool_calls"] = r.client_tool_calls;
    out["turn"] = r.turn;
  }
  return out;
}

Kernel::Kernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Kernel::~Kernel() = default;

namespace {

// The configured plugin dirs, then the default ones (kernel files: no tool may write them).
PluginHost discover_plugins(const Config& config) {
  std::vector<std::filesystem::path> dirs = config.plugin_dirs;
  for (auto& d : PluginHost::default_dirs()) {
    register_kernel_file(d, KernelFileAccess::ReadOnly, "plugin dir");
    dirs.push_back(std::move(d));
  }
  // Mapped when the config first uses one (plugin_loading.hpp), not all of them at every boot.
  const detail::DeferredPluginLoading deferred;
  PluginHost host = PluginHost::discover(dirs);
  for (const auto& info : host.plugins()) {
    if (!info.ok()) log(LogLevel::Warn, "plugin skipped: " + info.error->describe());
  }
  return host;
}

// The configured memory store, if any; stores that keep files put them in the kernel's data dir
// unless told otherwise.
Result<std::shared_ptr<MemoryStore>> create_memory(PluginHost& host, const Config& config) {
  if (!config.memory) return std::shared_ptr<MemoryStore>();
  Json memory_config = config.memory->config.is_object() ? config.memory->config : Json::object();
  if (!memory_config.contains("data_dir") && !config.data_dir.empty())
    memory_config["data_dir"] = config.data_dir.string();
  if (auto path = memory_config.find("path"); path != memory_config.end() && path->is_string()) {
    register_kernel_file(path->get<std::string>(), KernelFileAccess::Hidden, "memory store");
  }
  auto store = host.create_memory(config.memory->name, memory_config);
  if (!store)
    return fail(ErrorCode::Plugin, "memory plugin '" + config.memory->name + "'", store.error());
  return *store;
}

Result<void> add_hooks(PluginHost& host, const Config& config, HookChain& hooks) {
  for (const auto& ref : config.hooks) {
    // A hook's log (the audit hook's `file`) is history: a tool that could read or forge it would
    // hide what it did.
    if (auto file = ref.config.is_object() ? ref.config.find("file") : ref.config.end();
        ref.config.is_object() && file != ref.config.end() && file->is_string()) {
      register_kernel_file(file->get<std::string>(), KernelFileAccess::Hidden, "hook log");
    }
    auto hook = host.create_hook(ref.name, ref.config);
    if (!hook) return fail(ErrorCode::Plugin, "hook plugin '" + ref.name + "'", hook.error());
    hooks.add(ref.name, *hook);
  }
  return {};
}

// The REPL keeps saved skills and checkpoints in the kernel's data dir (never a sandbox's).
Json toolbox_options(const Config& config, const std::string& name, Json options) {
  if (name == "repl" && !config.data_dir.empty() && (options.is_object() || options.is_null()) &&
      !options.contains("data_dir")) {
    std::error_code ec;
    const auto dir = std::filesystem::absolute(config.data_dir, ec);
    if (!ec) options["data_dir"] = dir.lexically_normal().string();
  }
  return options;
}

// The configured toolboxes; with none named, every toolbox found, skipping one that needs options
// it wasn't given.
Result<std::vector<std::shared_ptr<ToolExecutor>>> create_toolboxes(PluginHost& host,
                                                                    const Config& config) {
  std::vector<std::shared_ptr<ToolExecutor>> out;
  if (config.toolboxes) {
    for (const auto& ref : *config.toolboxes) {
      auto box = host.create_toolbox(ref.name, toolbox_options(config, ref.name, ref.config));
      if (!box) return fail(ErrorCode::Plugin, "toolbox plugin '" + ref.name + "'", box.error());
      out.push_back(*box);
    }
    return out;
  }
  for (const auto& info : host.plugins()) {
    if (!info.ok() || info.kind != PluginKind::Toolbox) continue;
    auto box = host.create_toolbox(info.name, toolbox_options(config, info.name, Json::object()));
    if (box) {
      out.push_back(*box);
    } else {
      log(LogLevel::Info,
          "toolbox plugin '" + info.name + "' not loaded by default: " + box.error().describe());
    }
  }
  return out;
}

// The permissions file's rules, then the config's own.
Result<PermissionRules> permission_rules(const Config& config) {
  std::vector<std::string> allow, deny, ask;
  if (config.permissions_file) {
    KERNEX_ASSIGN_OR_RETURN(auto rules, PermissionRules::load_yaml_file(*config.permissions_file));
    allow = rules.allow();
    deny = rules.deny();
    ask = rules.ask();
  }
  allow.insert(allow.end(), config.allow.begin(), config.allow.end());
  deny.insert(deny.end(), config.deny.begin(), config.deny.end());
  ask.insert(ask.end(), config.ask.begin(), config.ask.end());
  return PermissionRules(std::move(allow), std::move(deny), std::move(ask));
}

}  // namespace

// Kernel files registered -> plugins discovered -> memory, hooks, toolboxes created -> permission
// rules and pricing loaded.
Result<std::unique_ptr<Kernel>> Kernel::create(Config config) {
  auto impl = std::make_unique<Impl>();
  // Again here: a Config built in code, or a data dir changed after loading (--data-dir).
  register_kernel_files(config);
  impl->host = discover_plugins(config);
  KERNEX_ASSIGN_OR_RETURN(impl->memory, create_memory(impl->host, config));
  KERNEX_RETURN_IF_ERROR(add_hooks(impl->host, config, impl->parts.hooks));
  KERNEX_ASSIGN_OR_RETURN(impl->parts.toolboxes, create_toolboxes(impl->host, config));
  KERNEX_ASSIGN_OR_RETURN(impl->rules, permission_rules(config));
  auto pricing = PricingTable::load_yaml_file(config.pricing_file.value_or(default_pricing_file()));
  if (!pricing) return std::unexpected(pricing.error());
  impl->pricing = std::move(*pricing);

  impl->config = std::move(config);
  return std::unique_ptr<Kernel>(new Kernel(std::move(impl)));
}

Result<RunResult> Kernel::run(const Request& incoming, const RunOptions& options) {
  Impl& k = *impl_;
  const HostParts parts = k.snapshot();
  KERNEX_ASSIGN_OR_RETURN(auto request, Impl::screen_input(parts, incoming));

  // The plan: provider, limits and memory, from the config and the run's options.
  KERNEX_ASSIGN_OR_RETURN(auto plan, plan_run(k.config, options, request));
  KERNEX_RETURN_IF_ERROR(k.check_before_paying(plan, request));
  auto provider = k.provider_for(plan.provider, plan.provider_options);
  if (!provider) return std::unexpected(provider.error());

  // The Context: the kernel's sources, then the run's (skills), then memory.
  std::vector<std::shared_ptr<ContextSource>> sources = parts.sources;
  sources.insert(sources.end(), options.sources.begin(), options.sources.end());
  ProviderSummarizer fallback_summarizer(*provider);
  auto built =
      k.build_run_context(plan, request, options, sources,
                          parts.summarizer ? parts.summarizer.get() : &fallback_summarizer);
  if (!built) return std::unexpected(built.error());
  Context& context = built->context;
  const std::string& conversation_id = built->conversation_id;

  // The run tree and what tools may call back into.
  std::shared_ptr<RunTree> tree = k.tree_for(plan, options, conversation_id);
  auto services = k.services_for(plan, tree, *provider, options, context.model);
  const auto started = std::chrono::steady_clock::now();
  if (plan.parent == nullptr)
    k.record_start(*tree, options, request, plan.provider,
                   context.model.value_or((*provider)->default_model()), conversation_id);

  // The loop: provider and tools, through hooks and rules.
  auto context_tools = Impl::context_tools(request, sources);
  if (!context_tools) return std::unexpected(context_tools.error());
  ToolRouter router = ToolRouter::collect(parts.toolboxes, context, *context_tools, &k.tool_lists);
  HookChain hooks;
  const AuditFlush audit{k.audit_hook(plan, options)};
  if (audit.hook) hooks.add("memory-audit", audit.hook);
  LoopDeps deps =
      k.loop_deps(plan, parts, router, hooks, request, options, conversation_id, *tree, services);
  deps.provider = provider->get();
  deps.context_tools = std::move(*context_tools);
  const ToolRouter* router_in_use = &router;
  deps.router_in_use = &router_in_use;
  LoopCursor cursor;
  deps.cursor = &cursor;
  services->bind_tools(Impl::code_tool_access(deps, router_in_use, context));
  auto run = Impl::loop(context, deps, plan, options, parts, conversation_id);
  services->unbind_tools();
  // A run that failed or was cancelled may have left its instance mid-request: not reused.
  if (!run || run->outcome == Outcome::Cancelled) ProviderPool::discard(*provider);
  if (run) run->result = services->submitted();
  if (run && tree->trajectory() != nullptr) run->run_id = tree->trajectory()->run_id();
  k.record_end(*tree, *services, request, run, started);
  if (!run) return run;

  // Save: the exchange goes to memory, cancelled runs included.
  if (plan.uses_memory && k.memory) {
    if (options.before_save) {
      KERNEX_RETURN_IF_ERROR(options.before_save());
    }
    if (auto saved = Impl::save_exchange(*k.memory, options.memory_scope, conversation_id, request,
                                         context, *run, options.exchange_key, audit.hook.get());
        !saved) {
      return std::unexpected(saved.error());
    }
  }
  return run;
}

void Kernel::add_hook(std::shared_ptr<HookRunner> hook) {
  std::lock_guard lock(impl_->parts_mutex);
  impl_->parts.hooks.add("host", std::move(hook));
}
void Kernel::add_toolbox(std::shared_ptr<ToolExecutor> executor) {
  std::lock_guard lock(impl_->parts_mutex);
  if (executor) impl_->parts.toolboxes.push_back(std::move(executor));
}
void Kernel::set_guardrail(std::shared_ptr<Guardrail> guardrail) {
  std::lock_guard lock(impl_->parts_mutex);
  impl_->parts.guardrail = std::move(guardrail);
}
void Kernel::set_summarizer(std::shared_ptr<Summarizer> summarizer) {
  std::lock_guard lock(impl_->parts_mutex);
  impl_->parts.summarizer = std::move(summarizer);
}
void Kernel::add_context_source(std::shared_ptr<ContextSource> source) {
  std::lock_guard lock(impl_->parts_mutex);
  if (source) impl_->parts.sources.push_back(std::move(source));
}

const Config& Kernel::config() const { return impl_->config; }
const PluginHost& Kernel::plugins() const { return impl_->host; }
const PermissionRules& Kernel::permissions() const { return impl_->rules; }
Result<std::shared_ptr<Provider>> Kernel::create_provider(const RunOptions& options) const {
  KERNEX_ASSIGN_OR_RETURN(auto plan, plan_run(impl_->config, options, Request{}));
  return impl_->host.create_provider(plan.provider, plan.provider_options);
}

std::shared_ptr<HookRunner> Kernel::hooks() const {
  auto chain = std::make_shared<HookChain>();
  chain->add_all(impl_->snapshot().hooks);
  return chain;
}
const PricingTable& Kernel::pricing() const { return impl_->pricing; }
std::shared_ptr<MemoryStore> Kernel::memory() const { return impl_->memory; }

}  // namespace kernex
