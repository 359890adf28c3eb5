// The field tables of kernex.yaml's `serve:` section (kernex/config_fields.hpp): every key, its
// type, range, default and doc, read by serve_config.cpp.
#pragma once

#include <array>
#include <string_view>

#include "kernex/config.hpp"
#include "kernex/config_fields.hpp"

namespace kernex::server::schema {

using config::Field;
using config::Section;
using enum config::FieldType;

inline constexpr std::uint64_t kDayMs = 86'400'000;
inline constexpr std::uint64_t kMonthS = 86'400 * 30;

inline constexpr std::array<std::string_view, 3> kIfBusy{"reject", "enqueue", "interrupt"};
inline constexpr std::array<std::string_view, 2> kOnLost{"retry", "interrupt"};
inline constexpr std::array<std::string_view, 2> kOnDisconnect{"cancel", "finish"};

inline constexpr std::array kTopFields{
    Field{"listen", String, "HOST:PORT the API listens on", "127.0.0.1:8080"},
    Field{"threads", Integer, "HTTP threads; 0: the number of CPUs", "0", 0, 256},
    Field{"run_threads", Integer, "runs executing at once; 0: 256", "0", 0, 100'000},
    Field{.name = "run_stack_kib",
          .type = Integer,
          .doc = "each run's fiber stack, and each run thread's",
          .default_text = "512",
          .min = 128,
          .max = 65'536,
          .unit = "KiB"},
    Field{"run_stack_reserve", Integer,
          "run stacks made before the server listens (ASan builds: 0)", "1024", 0, 16'384},
    Field{"keys_file", Path, "the API keys file", "<data_dir>/serve-keys.json"},
    Field{.name = "if_busy",
          .type = Enum,
          .doc = "a message for a conversation that is running",
          .default_text = "reject",
          .choices = kIfBusy},
    Field{"max_body_bytes", Integer, "largest request body", "1048576", 1, 1ULL << 32},
    Field{"max_header_bytes", Integer, "largest request head", "16384", 1, 1ULL << 32},
    Field{"max_connections", Integer, "open connections at once", "20000", 1, 1ULL << 32},
    Field{"header_timeout_ms",
          Integer,
          "time to read a request head",
          "10000",
          1,
          kDayMs,
          {},
          {},
          {},
          "ms"},
    Field{"idle_timeout_ms", Integer, "keep-alive idle time", "60000", 1, kDayMs, {}, {}, {}, "ms"},
    Field{"shutdown_grace_ms",
          Integer,
          "time runs get to end on shutdown",
          "30000",
          1,
          kDayMs,
          {},
          {},
          {},
          "ms"},
    Field{"event_retention_s",
          Integer,
          "how long a finished run's events stay readable",
          "600",
          1,
          86'400 * 7,
          {},
          {},
          {},
          "s"},
    Field{"heartbeat_s", Integer, "SSE keep-alive interval", "15", 1, 86'400 * 7, {}, {}, {}, "s"},
    Field{"workspaces", Path, "root of the tenants' workspaces", "<data_dir>/workspaces"},
    Field{"cors_origins", List, "origins whose pages may call the API; \"*\": any", "[]"},
    Field{"limits", Table, "{default, tenants}: per-tenant limits"},
    Field{"tenants", Table, "tenant name -> {workspace}"},
    Field{"agents", Table, "model name -> {provider, model, system_prompt, skills}"},
    Field{"cluster", Table, "several nodes on one PostgreSQL"},
    Field{"webhooks", List, "outbound webhook endpoints"},
    Field{"approvals", Table, "{timeout_s, park}"},
    Field{"stream", Table, "{buffer_bytes, slow_timeout_s}"},
    Field{"metrics", Table, "{token_env, listen}: who may read /metrics"},
    Field{"openai", Table, "{on_disconnect, parked_ttl_s}"},
};

inline constexpr std::array kLimitsFields{
    Field{"default", Table, "limits of every tenant without its own"},
    Field{"tenants", Table, "tenant name -> limits"},
};

inline constexpr std::array kTenantLimitsFields{
    Field{"concurrent_runs", Integer, "runs of the tenant at once", "64", 0, 1'000'000},
    Field{"tokens_per_day", Integer, "billed tokens per UTC day", "unset", 0, UINT64_MAX},
    Field{.name = "cost_per_day_usd",
          .type = Number,
          .doc = "cost per UTC day",
          .number_min = 0,
          .number_max = kMaxCostBudgetUsd},
};

inline constexpr std::array kTenantFields{
    Field{"workspace", Path, "the tenant's workspace", "<workspaces>/<tenant>"},
};

inline constexpr std::array kAgentFields{
    Field{"provider", String, "the provider plugin", "the config's"},
    Field{"model", String, "the provider's model", "the provider's"},
    Field{"system_prompt", String, "instructions added to the system prompt", "\"\""},
    Field{"skills", List, "skills activated for every request", "[]"},
};

inline constexpr std::array kClusterFields{
    Field{"lease_s",
          Integer,
          "how long a node's claim on a run lasts",
          "10",
          1,
          3600,
          {},
          {},
          {},
          "s"},
    Field{.name = "on_lost",
          .type = Enum,
          .doc = "a run whose node was lost",
          .default_text = "retry",
          .choices = kOnLost},
    Field{"max_attempts", Integer, "executions of one run before a lost one fails", "3", 1, 100},
    Field{"max_runs", Integer, "runs one node executes at once", "64", 1, 100'000},
    Field{"pool_size", Integer, "PostgreSQL connections of the run store", "8", 1, 1000},
};

inline constexpr std::array kWebhookFields{
    Field{"url", String, "http:// or https:// URL", "required"},
    Field{"secret", String, "the signing secret (prefer secret_env)"},
    Field{"secret_env", String, "the environment variable holding the secret"},
    Field{"events", List, "event types to send", "required"},
    Field{"max_age_s",
          Integer,
          "give up on an event this long after it was made",
          "86400",
          1,
          kMonthS,
          {},
          {},
          {},
          "s"},
    Field{"backoff_base_ms",
          Integer,
          "first retry waits up to this",
          "1000",
          1,
          kDayMs,
          {},
          {},
          {},
          "ms"},
    Field{"backoff_cap_ms",
          Integer,
          "longest wait between retries",
          "3600000",
          1,
          kDayMs,
          {},
          {},
          {},
          "ms"},
    Field{"timeout_ms", Integer, "one delivery attempt", "10000", 1, kDayMs, {}, {}, {}, "ms"},
};

inline constexpr std::array kApprovalsFields{
    Field{"timeout_s",
          Integer,
          "how long a call waits for a person",
          "3600",
          1,
          kMonthS,
          {},
          {},
          {},
          "s"},
    Field{"park", Bool, "a waiting run holds no run thread", "false"},
};

inline constexpr std::array kStreamFields{
    Field{"buffer_bytes",
          Integer,
          "text a connection keeps waiting for the client",
          "262144",
          4096,
          64u << 20,
          {},
          {},
          {},
          "bytes"},
    Field{"slow_timeout_s", Integer, "how long a write may stall", "30", 1, 3600, {}, {}, {}, "s"},
};

inline constexpr std::array kMetricsFields{
    Field{"token_env", String, "environment variable holding the bearer token", "unset"},
    Field{"listen", String, "HOST:PORT of a listener serving only /metrics", "unset"},
};

inline constexpr std::array kOpenAiFields{
    Field{.name = "on_disconnect",
          .type = Enum,
          .doc = "a client that goes away before its answer",
          .default_text = "cancel",
          .choices = kOnDisconnect},
    Field{"parked_ttl_s",
          Integer,
          "how long a run waits for its client's tool results",
          "86400",
          1,
          kMonthS,
          {},
          {},
          {},
          "s"},
};

inline constexpr Section kTop{"serve", kTopFields};
inline constexpr Section kLimits{"serve.limits", kLimitsFields};
inline constexpr Section kTenantLimits{"serve.limits.default", kTenantLimitsFields};
inline constexpr Section kTenant{"serve.tenants.<name>", kTenantFields};
inline constexpr Section kAgent{"serve.agents.<name>", kAgentFields};
inline constexpr Section kCluster{"serve.cluster", kClusterFields};
inline constexpr Section kWebhook{"serve.webhooks[]", kWebhookFields};
inline constexpr Section kApprovals{"serve.approvals", kApprovalsFields};
inline constexpr Section kStream{"serve.stream", kStreamFields};
inline constexpr Section kMetrics{"serve.metrics", kMetricsFields};
inline constexpr Section kOpenAi{"serve.openai", kOpenAiFields};

}  // namespace kernex::server::schema
