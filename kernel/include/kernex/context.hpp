// The Context a provider completes: the run's data (prompt, history, this turn's tool exchange,
// what tools and model it may use). Live objects of the run are in RunHandles, beside it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "kernex/generation.hpp"
#include "kernex/json.hpp"
#include "kernex/tool.hpp"

namespace kernex {

// One message of history. Roles by convention: "user", "assistant", "tool" (not validated,
// as in kernex). An assistant entry may carry tool calls; a "tool" entry carries one result.
struct ContextEntry {
  std::string role;
  std::string content;
  std::vector<ToolCall> tool_calls;       // assistant only
  std::optional<ToolResult> tool_result;  // role "tool" only
  // Opaque provider data replayed unchanged with this entry (e.g. Anthropic thinking blocks).
  Json provider_state;

  static ContextEntry user(std::string text) { return {"user", std::move(text), {}, {}, {}}; }
  static ContextEntry assistant(std::string text) {
    return {"assistant", std::move(text), {}, {}, {}};
  }
  static ContextEntry tool(ToolResult result);

  bool operator==(const ContextEntry&) const = default;
};

struct ApiMessage {
  std::string role;
  std::string content;
  bool operator==(const ApiMessage&) const = default;
};

// How history beyond max_context_messages is handled.
enum class CompactionStrategy { Drop, Summarize };

struct Context {
  std::string system_prompt;
  std::vector<ContextEntry> history;  // oldest first
  std::string current_message;
  // Entries produced during this turn after current_message: assistant tool calls and tool
  // results, appended by the kernel's loop. Empty on the first model call.
  std::vector<ContextEntry> turn;
  std::vector<McpServer> mcp_servers;
  std::vector<Toolbox> toolboxes;
  std::optional<std::vector<std::string>> allowed_tools;
  std::optional<std::string> model;
  // How the model should generate (sampling, response format, tool choice), as the host's
  // client asked; each provider maps the fields it supports and leaves the rest.
  Generation generation;
  // Tools the host's client runs itself (OpenAI `tools`), offered beside the run's own. A call
  // to one is not run: the loop ends the run with Outcome::ClientToolCalls and hands it over.
  std::vector<ToolSpec> client_tools;
  // Never serialized: the host's stop request for this run (`kernex serve` cancel). Providers
  // abort their request when it fires and toolboxes kill the process group of a running tool;
  // the loop then ends the run with Outcome::Cancelled. Default: a token that never stops.
  std::stop_token stop;
  // Never serialized: the working directory of this run's tools, set by the host (`kernex
  // serve` gives each session its own). Set: every toolbox works there instead of its
  // configured workspace, and stateful tool processes (REPL workers, MCP servers) are kept per
  // workspace, never shared with a run that has another one. Unset: the toolbox's own config.
  std::optional<std::filesystem::path> workspace;
  // Never serialized; set only together with `workspace`, by the host: the run's overlay mode. A
  // kernel-owned directory holding `upper/` and `work/` (sandbox::WorkspaceOverlay::in): every
  // sandboxed process of the run sees `workspace` through an overlayfs mount whose writes land in
  // `upper/`, never in the real tree. Stateful tool processes and sandbox policies are kept per
  // (workspace, layers), so an overlay session shares none with a plain one or another session.
  std::optional<std::filesystem::path> workspace_layers;

  Context() = default;
  explicit Context(std::string message) : current_message(std::move(message)) {}

  // Flatten for single-text providers: "[System]", then history as "[User]" / "[Assistant]" /
  // "[Tool result]" parts, then "[User]" current message, then the turn's entries, joined by
  // "\n\n" (kernex's rule for a run without a provider-side session).
  std::string to_prompt_string() const;

  // (system, messages): history verbatim, then {"user", current_message} always, then turn
  // entries. Tool calls/results are rendered into content for text-only consumers; providers
  // that speak tools read history/turn directly.
  std::pair<std::string, std::vector<ApiMessage>> to_api_messages() const;

  // Every message a provider should send, in order: history, the user message, turn entries.
  std::vector<ContextEntry> messages() const;

  // Whether tools are offered at all (kernex: allowed_tools == Some([]) disables them).
  bool tools_enabled() const { return !allowed_tools || !allowed_tools->empty(); }
};

void to_json(Json& j, const ContextEntry& v);
void from_json(const Json& j, ContextEntry& v);
void to_json(Json& j, const ApiMessage& v);
void from_json(const Json& j, ApiMessage& v);
void to_json(Json& j, const Context& v);
void from_json(const Json& j, Context& v);

}  // namespace kernex
