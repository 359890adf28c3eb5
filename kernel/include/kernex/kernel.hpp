// The host-facing API: create a Kernel from a Config and run turns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/approval.hpp"
#include "kernex/config.hpp"
#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/hooks.hpp"
#include "kernex/memory.hpp"
#include "kernex/message.hpp"
#include "kernex/permissions.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/pricing.hpp"
#include "kernex/provider.hpp"
#include "kernex/run_journal.hpp"
#include "kernex/run_services.hpp"
#include "kernex/toolbox.hpp"
#include "kernex/trajectory.hpp"

namespace kernex {

// ClientToolCalls: the model called tools of the host's client (RunOptions::client_tools); the
// run stops there and hands them over (RunResult::client_tool_calls).
enum class Outcome {
  EndTurn,
  MaxTurns,
  BudgetTokens,
  BudgetCost,
  BudgetTools,
  Cancelled,
  ClientToolCalls
};
// "end_turn", "max_turns", "budget_exhausted:tokens|cost|tools", "cancelled",
// "client_tool_calls"
std::string_view to_string(Outcome outcome) noexcept;

struct ToolCallRecord {
  ToolCall call;
  ToolResult result;
};

struct RunResult {
  std::string text;
  Outcome outcome = Outcome::EndTurn;
  std::uint32_t turns = 0;  // model calls made
  Usage usage;              // summed over turns, cost included
  std::string model;
  std::string provider;
  std::vector<ToolCallRecord> tool_calls;
  std::string conversation_id;  // empty without a memory plugin
  std::string run_id;           // the trajectory's id; empty when none was written
  // What the run's code submitted last (submit_result in a REPL), if anything.
  std::optional<Json> result;
  // Outcome::ClientToolCalls: the calls for the client, and the turn so far (the assistant's
  // calls and the results of the run's own tools) to hand back as RunOptions::turn, with the
  // client's results after it, when the client answers.
  std::vector<ToolCall> client_tool_calls;
  std::vector<ContextEntry> turn;
};

Json to_json(const RunResult& result);

class ContextSource;

// Per-run overrides of the config.
struct RunOptions {
  std::optional<std::string> provider;
  Json provider_options = Json::object();  // merged over the config's options for that provider
  std::optional<std::string> model;
  Budgets budgets;  // each one set overrides the config's limits
  // None: every tool; empty: no tools; names: only those tools are offered and callable.
  std::optional<std::vector<std::string>> allowed_tools;
  StreamSink sink;  // set to receive stream events
  // Where this run records its events; unset: the kernel opens one under the data dir (unless
  // the config's `trajectories` is false). "run" or "rlm", recorded in run_start.
  std::shared_ptr<Trajectory> trajectory;
  std::string kind = "run";
  // A stop request ends the run with Outcome::Cancelled: the provider request is aborted, a
  // running tool's processes are killed, and what was said so far is saved to memory.
  std::stop_token stop;
  // The working directory of this run's tools (Context::workspace); unset: each toolbox's own.
  std::optional<std::filesystem::path> workspace;
  // Overlay mode (Context::workspace_layers): the directory holding the run's `upper/` and `work/`
  // layers, which the host creates out of every tool's reach. Needs `workspace`.
  std::optional<std::filesystem::path> workspace_layers;
  // Files outside the workspace that this run's sandboxed tools may read (RunHandles::read_grants),
  // e.g. the contexts of `kernex rlm --context`.
  std::vector<std::string> read_grants;
  // Whose conversation this is in memory; unset: {config.channel, request.sender_id,
  // config.project}. A server sets it per tenant and session.
  std::optional<ConversationKey> conversation;
  // The tenant whose memory this run reads and writes (every store call is in this scope).
  MemoryScope memory_scope = MemoryScope::local();
  // Set: the run's whole history (e.g. the messages of an OpenAI-style request); memory is then
  // neither read nor written for this run.
  std::optional<std::vector<ContextEntry>> history;
  // With `history`: memory is still the conversation's (its memory sections in the prompt, the
  // exchange saved to it), while the model sees `history` rather than the stored one (an OpenAI
  // request naming a session: the client's messages are the conversation, and regenerate or
  // edit never duplicates it).
  bool memory_with_history = false;
  // This turn so far (after the message): a parked run's assistant tool calls and tool results,
  // the client's included. The loop goes on from there instead of asking for a new turn.
  std::vector<ContextEntry> turn;
  // Sampling, response format and tool choice for every model call (Context::generation).
  Generation generation;
  // Tools the host's client runs itself, offered beside the run's own (Context::client_tools).
  std::vector<ToolSpec> client_tools;
  // Appended to the system prompt for this run (after the config's and the sources').
  std::string extra_system_prompt;
  // Contribute to this run's Context after the kernel's own sources (e.g. skills a request
  // asked for).
  std::vector<std::shared_ptr<ContextSource>> sources;
  // How deep rlm_query may recurse; unset: the config's limits.max_depth.
  std::optional<std::uint32_t> max_depth;
  // Sub-runs only: the services of the run that started this one (rlm_query). The sub-run
  // shares that run's tree (budgets, trajectory), one level deeper, and leaves memory alone.
  std::shared_ptr<RunServices> parent;
  // How rlm_query starts a sub-agent in this run (the rlm driver sets it); unset: unsupported.
  std::function<Result<std::string>(const std::string& prompt,
                                    const std::optional<std::string>& context,
                                    const std::shared_ptr<RunServices>& parent)>
      sub_runner;
  // Code run around the loop with a tool caller bound to this run's Context, so hooks, rules
  // and the trajectory apply: `before` once the Context is built, `after` on the loop's result.
  using ToolCaller = std::function<ToolResult(const std::string& name, Json arguments)>;
  std::function<Result<void>(Context&, const ToolCaller&)> before_loop;
  std::function<Result<void>(RunResult&, const ToolCaller&)> after_loop;
  // Called just before the run's exchange is saved to memory, cancelled runs included; an error
  // skips the save and becomes the run's error. A server sharing runs between nodes saves only
  // while its node still holds the run, so a stalled node cannot save an exchange twice.
  std::function<Result<void>()> before_save;
  // Set: the run's exchange is saved under this key (ExchangeRecord::idempotency_key), so a run
  // started again after its exchange was saved does not save it twice.
  std::string exchange_key;
  // Asks a person about calls that need approval (ask rules, hooks answering ask); unset: such
  // calls are denied ("needs approval"). Sub-runs use their root's.
  Approver approver;
  // Set: the run records its model answers and tool calls there and, started again with the
  // same journal (after a crash), replays them instead of repeating them (run_journal.hpp).
  std::shared_ptr<RunJournal> journal;
};

// Adds to every run's Context before memory and the provider: system prompt text, toolboxes,
// MCP servers, a model. Skill activation is one (kernex::skills::SkillContextSource).
class ContextSource {
 public:
  virtual ~ContextSource() = default;
  virtual Result<void> contribute(Context& context, const Request& request) = 0;
  // Tools this source offers for one run (asked once per run, after contribute), whose calls
  // may change that run's Context; see ContextTool. None by default.
  virtual std::vector<std::shared_ptr<ContextTool>> context_tools(const Request& request) {
    (void)request;
    return {};
  }
};

class Kernel {
 public:
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Discovers plugins, loads memory, hooks, toolboxes, rules and prices. Provider plugins are
  // created per run (their options can change per run).
  static Result<std::unique_ptr<Kernel>> create(Config config);

  // One turn of the agentic loop: context -> provider -> tools -> memory.
  Result<RunResult> run(const Request& request, const RunOptions& options = {});

  // Hosts may supply extra pieces in code.
  void add_hook(std::shared_ptr<HookRunner> hook);
  void add_toolbox(std::shared_ptr<ToolExecutor> executor);
  void set_guardrail(std::shared_ptr<Guardrail> guardrail);
  void set_summarizer(std::shared_ptr<Summarizer> summarizer);
  // Sources contribute to every run's Context in the order added.
  void add_context_source(std::shared_ptr<ContextSource> source);

  const Config& config() const;
  const PluginHost& plugins() const;
  const PermissionRules& permissions() const;
  // The configured hook chain (config hooks, then add_hook's) as one runner, for hosts that call
  // tools outside a run (`kernex mcp serve`): the same pre_tool / post_tool a run's calls get.
  std::shared_ptr<HookRunner> hooks() const;
  // A fresh instance of the provider a run with `options` would use (its name and the config's
  // options with the run's merged over them), for hosts that query it outside a run; ErrorCode::
  // Config when no provider is named anywhere.
  Result<std::shared_ptr<Provider>> create_provider(const RunOptions& options) const;
  const PricingTable& pricing() const;
  // The memory store runs read and write (null without one): hosts list and forget sessions.
  std::shared_ptr<MemoryStore> memory() const;

 private:
  struct Impl;
  explicit Kernel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex
