// The `serve:` section of kernex.yaml: where `kernex serve` listens, who may call it, and the
// limits that keep one client from starving the rest.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernex/config.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::server {

// What a message to a busy session does (LangGraph's "double-texting").
enum class IfBusy { Reject, Enqueue, Interrupt };
std::optional<IfBusy> parse_if_busy(std::string_view text);
std::string_view to_string(IfBusy policy) noexcept;

struct TenantLimitsConfig {
  std::optional<std::uint32_t> concurrent_runs;
  std::optional<std::uint64_t> tokens_per_day;
  std::optional<double> cost_per_day_usd;
};

// An OpenAI `model` name that selects a provider, a model and extra instructions.
struct AgentProfile {
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::string system_prompt;
  std::vector<std::string> skills;
};

// Several `kernex serve` nodes on one PostgreSQL (memory: {name: postgres}): how long a node's
// claim on a run lasts without renewal, and what happens to a run whose node was lost.
struct ClusterConfig {
  std::chrono::seconds lease{10};
  bool retry_lost = true;     // on_lost: retry (run again from its message) | interrupt (fail it)
  unsigned max_attempts = 3;  // executions of one run before a lost one fails
  std::size_t max_runs = 64;  // runs one node executes at once
  std::size_t pool_size = 8;  // PostgreSQL connections of the run store
};

// An outbound webhook endpoint (serve.webhooks[]): the events it wants, signed with its secret.
struct WebhookEndpointConfig {
  std::string url;         // http:// or https://
  std::string secret;      // inline `secret`; empty when `secret_env` names it
  std::string secret_env;  // the environment variable holding the secret, read at serve start
  std::vector<std::string> events;       // run.completed, run.failed, approval.requested/resolved
  std::chrono::seconds max_age{86'400};  // give up on an event this long after it was made
  std::chrono::milliseconds backoff_base{1'000};     // first retry waits up to this...
  std::chrono::milliseconds backoff_cap{3'600'000};  // ...doubling up to this
  std::chrono::milliseconds timeout{10'000};         // one delivery attempt, connect to answer
};
// `stream:` every SSE follower (a run's events, OpenAI stream:true): the most text a connection
// keeps waiting for the client, and how long a write may stall on a client that does not read
// before the connection is dropped (it reconnects with Last-Event-ID and loses nothing).
struct StreamConfig {
  std::size_t buffer_bytes = 256u << 10;
  std::chrono::seconds slow_timeout{30};
};

// `metrics:` who may read /metrics (every tenant's usage and cost). Off unless one is set: a
// bearer token from the environment, or a listener of its own that serves only /metrics.
// Forwarding headers and loopback addresses never open it.
struct MetricsConfig {
  std::string token_env;          // the environment variable holding the token
  std::string listen_host;        // empty: no separate listener
  std::uint16_t listen_port = 0;  // with listen_host
  bool enabled() const { return !token_env.empty() || !listen_host.empty(); }
};

// `openai:` the OpenAI-compatible endpoints. on_disconnect: what a client that goes away before
// its answer does to the run: cancel it (default; what it said is saved as for any cancel) or let
// it finish (its answer is kept in the run, readable at GET /v1/runs/{r}). parked_ttl_s: how long
// a run that stopped on the client's tool calls waits for the request carrying their results.
struct OpenAiConfig {
  bool cancel_on_disconnect = true;
  std::chrono::seconds parked_ttl{86'400};
};

// The event types an endpoint may ask for.
inline constexpr std::string_view kWebhookEventTypes[] = {
    "run.completed", "run.failed", "approval.requested", "approval.resolved"};

struct ServeConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;
  unsigned threads = 0;  // 0: the number of CPUs
  // The most runs executing at once (server/src/run_pool.hpp); further ones queue, first come
  // first served. Each run is a fiber whose slices run on these threads (server/src/run_fiber.hpp):
  // one waiting on its model (http:// or https://) or on a person holds none; one in a tool, hook,
  // memory call or DNS lookup holds one. Threads are made as needed and reused; idle ones beyond
  // max(4, 4 x CPUs) exit after 30 s. 0: 256.
  unsigned run_threads = 0;
  std::size_t run_stack_kib = 512;  // each run's fiber stack, and each run thread's
  // Fiber stacks made (their top pages written) before the server listens, and kept for reuse:
  // a cold server's first burst of that many new runs pays no stack's mmap or first-access faults
  // (server/src/run_fiber.hpp). ~32 KiB resident each at start (1024: 32 MiB), used or not; kept
  // ones hold what their runs touched. Unset: 1024, or none in an ASan build (4x stacks, ~0.3 s
  // more each start; the suites start hundreds).
  std::optional<std::size_t> run_stack_reserve;
  std::filesystem::path keys_file;  // default <data_dir>/serve-keys.json
  IfBusy if_busy = IfBusy::Reject;
  std::size_t max_body_bytes = 1u << 20;
  std::size_t max_header_bytes = 16u << 10;
  std::size_t max_connections = 20'000;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds shutdown_grace{30'000};
  std::chrono::seconds event_retention{600};
  std::chrono::seconds heartbeat{15};
  TenantLimitsConfig default_limits{64, std::nullopt, std::nullopt};
  std::map<std::string, TenantLimitsConfig> tenant_limits;
  std::map<std::string, std::filesystem::path> tenant_workspaces;
  std::map<std::string, AgentProfile> agents;
  std::filesystem::path workspaces_root;  // <data_dir>/workspaces
  // Origins whose browser pages may call the API (CORS); "*" for any. Empty: none.
  std::vector<std::string> cors_origins;
  ClusterConfig cluster;
  std::vector<WebhookEndpointConfig> webhooks;
  // `approvals: {timeout_s}`: how long a tool call waits for a person before it is denied.
  std::chrono::seconds approval_timeout{3600};
  // `approvals: {park}`: a run waiting for a person holds no run thread (parked, submitted again
  // on the decision); its stream is the same as a waiting run's (RunState::begin_attempt).
  bool park_approvals = true;
  // Skill folders that did not load (folder name -> why), so a request naming one is told why,
  // not only that it is unknown. Set by the host that loaded the skills (ServeOptions).
  std::map<std::string, std::string> refused_skills;
  StreamConfig stream;
  MetricsConfig metrics;
  OpenAiConfig openai;

  // Reads config.sections["serve"] (absent: defaults). Unknown keys and wrong types are errors
  // naming the key; relative paths resolve against the config file's directory.
  static Result<ServeConfig> from(const Config& config);
};

// "HOST:PORT" or "[v6]:PORT".
Result<std::pair<std::string, std::uint16_t>> parse_listen(std::string_view text);

}  // namespace kernex::server
