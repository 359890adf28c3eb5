// Running a skill's script toolbox (kernex::Toolbox) in the sandbox: the one translation from
// toolbox + runner options to a SandboxProfile, argv and environment, and from SpawnResult to the
// ToolResult the model sees. Shared by the toolbox-script plugin and `kernex tool run`, so both run
// a toolbox exactly alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/context.hpp"
#include "kernex/json.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/profile.hpp"
#include "kernex/sandbox/spawn.hpp"
#include "kernex/tool.hpp"

namespace kernex::sandbox {

// How toolboxes run. Plugin config keys (all optional):
//   workspace    read-write directory and working directory (default: the current directory)
//   profile      YAML file holding a SandboxProfile (default: the built-in default profile)
//   timeout      seconds per call (default: the profile's, 120 s)
//   max_output   bytes of stdout kept for the model (default 30000; the rest is marked truncated)
//   network_ports  TCP ports a toolbox with `network: true` may connect to (default [443, 80])
//   protect      extra paths never granted (the kernel's own files, its config, what the config
//                names and its data dir, are kept out of reach by every policy through the
//                kernel-file registry, kernex/kernel_files.hpp)
struct ToolboxRunOptions {
  SandboxProfile base;
  std::filesystem::path workspace;
  // Overlay mode, set by the host only (never read from a config): `workspace` is seen through an
  // overlay whose layers lie in this directory (WorkspaceOverlay::in).
  std::optional<std::filesystem::path> workspace_layers;
  std::optional<std::chrono::milliseconds> timeout;
  std::size_t max_output = 30'000;
  std::vector<std::uint16_t> network_ports = {443, 80};
  std::vector<std::filesystem::path> protect;

  // Reads the keys above from a plugin's JSON config; `origin` names it in errors
  // ("toolbox-script").
  static Result<ToolboxRunOptions> from_json(const Json& config, std::string_view origin);
};

// The profile one toolbox runs under: the base profile with the workspace (through its overlay when
// `workspace_layers` is set), the toolbox's network (`network: true` adds `network_ports`),
// `env_passthrough` and literal `env` (hijacking names are dropped with a warning),
// `allowed_commands` (narrowed by the base profile's list when both are set), and its skill folder
// (`source_dir`) readable but kept read-only and not executable.
SandboxProfile toolbox_profile(const Toolbox& toolbox, const ToolboxRunOptions& options);

// "scripts/run.sh" -> "<skill_dir>/scripts/run.sh" when `arg` is a relative path naming a file
// shipped in the skill folder (not leaving it, not starting with '-'); nullopt otherwise. Toolbox
// and MCP server arguments alike.
std::optional<std::string> skill_file(const std::filesystem::path& skill_dir,
                                      const std::string& arg);

// argv for one call: command, then args where an argument that is exactly "{name}" takes the JSON
// argument `name` (string, number or boolean; anything else is an error), and a literal relative
// argument naming a file shipped in the skill folder becomes that file's absolute path. A
// substituted value starting with '-' is refused unless a "--" argument precedes it. Errors are
// ErrorCode::Tool with a message for the model.
Result<std::vector<std::string>> toolbox_argv(const Toolbox& toolbox, const Json& arguments);

// What the model sees: exit 0 -> stdout; otherwise an error naming the exit status or signal (or
// the timeout) with stdout and the tail of stderr. Truncation markers stay visible.
ToolResult toolbox_result(const Toolbox& toolbox, const ToolCall& call, const SpawnResult& result,
                          std::chrono::milliseconds timeout);

// The workspace a call works in: the host's (Context::workspace) when set, else `configured`.
// The host creates it, except inside a registered tool area (kernel_files.hpp), where it is made
// (0700) on first use; one that is missing or not a directory is an ErrorCode::Tool error naming
// it.
Result<std::filesystem::path> call_workspace(const std::optional<std::filesystem::path>& requested,
                                             const std::filesystem::path& configured);

// What the host says about one call (from kernex::Context): its stop token and workspace.
struct CallScope {
  std::stop_token stop;
  std::optional<std::filesystem::path> workspace;  // unset: ToolboxRunOptions::workspace
  // Context::workspace_layers: overlay mode (only with `workspace`).
  std::optional<std::filesystem::path> workspace_layers;

  static CallScope of(const Context& context) {
    return {context.stop, context.workspace, context.workspace_layers};
  }
};

// Where one call works: the host's workspace when the run set one, else the configured one.
struct CallWorkspace {
  std::filesystem::path dir;
  // The host chose `dir` (Context::workspace): it replaces the configured workspace as the
  // read-write grant and working directory, and policies and processes are kept per key().
  bool host = false;
  // Host only (Context::workspace_layers): `dir` is seen through an overlay whose layers lie here.
  std::optional<std::filesystem::path> layers;

  // What caches of policies and processes are keyed by: empty for the configured workspace, else
  // the host's workspace and, in overlay mode, the layers, so a session in overlay mode shares
  // nothing with a plain one or with another session.
  std::string key() const;
};

// call_workspace for the scope's workspace; layers without a workspace are an ErrorCode::Tool
// error.
Result<CallWorkspace> call_workspace(const CallScope& scope,
                                     const std::filesystem::path& configured);

// toolbox_profile where `where` says: a host workspace (with its overlay) replaces the configured
// one as the read-write grant and is the working directory too.
SandboxProfile toolbox_profile(const Toolbox& toolbox, ToolboxRunOptions options,
                               const CallWorkspace& where);

// The text a tool result gives when the host stopped the run while the tool ran.
std::string cancelled_text(const std::string& what);

// Runs toolboxes, building one Policy per distinct toolbox, workspace and overlay layers (cached:
// the Landlock ruleset, seccomp BPF and mount namespace are made once). Thread-safe.
class ToolboxRunner {
 public:
  explicit ToolboxRunner(ToolboxRunOptions options) : options_(std::move(options)) {}

  const ToolboxRunOptions& options() const { return options_; }
  // Tool failures (bad arguments, refusals, a sandbox that can't be enforced, non-zero exit, a
  // stop request) are results with is_error = true; the message says what went wrong.
  ToolResult run(const Toolbox& toolbox, const ToolCall& call, const CallScope& scope = {});
  // The cached policy for `toolbox` working `where` (default: in the configured workspace).
  Result<std::shared_ptr<const Policy>> policy_for(const Toolbox& toolbox,
                                                   const CallWorkspace& where = {});

 private:
  ToolboxRunOptions options_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Policy>>
      policies_;  // by toolbox fields and CallWorkspace::key()
};

}  // namespace kernex::sandbox
