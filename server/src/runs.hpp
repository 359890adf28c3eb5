// What the HTTP API asks of runs, whether one process keeps them (RunManager, serve.db) or a
// cluster of nodes shares them (ClusterRuns, PostgreSQL). Both give the same answers to a client.
#pragma once

#include <chrono>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api_error.hpp"
#include "kernex/kernel.hpp"
#include "kernex/server/serve_config.hpp"
#include "run_state.hpp"

namespace kernex::server {

class Approvals;

// What the manager tells the server about runs (metrics), from the runs' threads.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void first_token(std::chrono::duration<double> after_start) = 0;
  virtual void run_finished(const std::string& tenant, const std::string& model,
                            const std::string& outcome, const Usage& usage,
                            std::chrono::duration<double> took) = 0;
};

// Per-tenant admission (concurrent runs, tokens and cost per day).
class RunAdmission {
 public:
  virtual ~RunAdmission() = default;
  // An error (429 with Retry-After) when the tenant may not start another run now.
  virtual std::optional<ApiError> admit(const std::string& tenant) = 0;
  virtual void release(const std::string& tenant, std::uint64_t tokens, double cost_usd) = 0;
};

struct RunRequest {
  std::string tenant;
  std::string session;  // empty: a one-off run (OpenAI request without a session)
  std::string message;
  std::string sender;  // who wrote it; default: the session
  std::string user;    // OpenAI `user`: keys recall and facts in a named session (user_memory.hpp)
  std::vector<std::string> skills;
  std::optional<std::string> provider;
  std::optional<std::string> model;
  std::string extra_system_prompt;
  // The history the run is given (OpenAI requests: the client's messages are the conversation,
  // session or not); unset: the session's memory.
  std::optional<std::vector<ContextEntry>> history;
  std::vector<ContextEntry> turn;      // a tool exchange to go on from (RunOptions::turn)
  Generation generation;               // OpenAI sampling, response_format, tool_choice
  std::vector<ToolSpec> client_tools;  // the OpenAI client's tools
  std::string api_model;               // the OpenAI `model` the client asked for (metrics)
  // What the node that takes the request stores as the run ends, before it is heard of
  // (RunState::set_before_end). Not part of the stored request: no other node runs it.
  RunState::BeforeEnd before_end;

  Json to_json() const;
  static std::optional<RunRequest> from_json(const Json& j);
};

class Runs {
 public:
  virtual ~Runs() = default;
  // Starts (or queues) a run; the run is stored before this returns.
  virtual std::expected<std::shared_ptr<RunState>, ApiError> submit(RunRequest request,
                                                                    IfBusy if_busy) = 0;
  // A run of this tenant (live, or read back from the store); null when none.
  virtual std::shared_ptr<RunState> find(const std::string& tenant, const std::string& run_id) = 0;
  virtual std::expected<std::shared_ptr<RunState>, ApiError> cancel(const std::string& tenant,
                                                                    const std::string& run_id) = 0;
  virtual std::expected<Json, ApiError> session_runs(const std::string& tenant,
                                                     const std::string& session,
                                                     std::size_t limit) = 0;
  virtual std::expected<Json, ApiError> history(const std::string& tenant,
                                                const std::string& session, std::size_t limit,
                                                std::optional<std::int64_t> before) = 0;
  // Whether this tenant ever ran anything in `session` (and didn't forget it).
  virtual bool session_exists(const std::string& tenant, const std::string& session) = 0;
  virtual std::expected<void, ApiError> forget(const std::string& tenant,
                                               const std::string& session) = 0;
  // Runs what was acknowledged but never finished (kill -9, power loss).
  virtual void resume_unfinished() = 0;
  // Drains: refuse new runs, wait up to `grace` for active ones, then cancel them and wait.
  virtual void shutdown(std::chrono::milliseconds grace) = 0;
  // Drops finished runs from memory once the retention passed (the store keeps them).
  virtual void evict_expired() = 0;
  virtual std::size_t active_runs() const = 0;
  virtual std::size_t queued_runs() const = 0;
  virtual const ServeConfig& config() const = 0;
  virtual Kernel& kernel() = 0;
  // The approvals of runs that wait for a person (serve.db, or PostgreSQL in cluster mode).
  virtual Approvals* approvals() { return nullptr; }
};

}  // namespace kernex::server
