// Outbound webhooks of `kernex serve`: events go into the outbox (webhook_outbox.hpp) where they
// become durable, and one worker thread per endpoint POSTs them, signed, retrying with
// exponential backoff and jitter until delivered or too old. Events of one run reach an endpoint
// in the order they were made; rows left pending by a previous server are sent at start.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/server/serve_config.hpp"
#include "run_store.hpp"

namespace kernex::server {

// "t=<t>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed with secret>".
std::string webhook_signature(std::string_view secret, std::int64_t t, std::string_view body);

// Reads an environment variable (tests pass their own).
using EnvReader = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> process_env(const std::string& name);

class OutboxStore;

// The data of a run.completed / run.failed event.
Json run_event_data(const std::string& run_id, const std::string& tenant,
                    const std::string& session, RunStatus status, const Json& result);

class Webhooks {
 public:
  // Resolves each endpoint's secret (secret_env from `env`: an unset variable is a Config error
  // naming it) and opens the outbox of `serve_db`. Sends nothing until start().
  static Result<std::unique_ptr<Webhooks>> create(std::vector<WebhookEndpointConfig> endpoints,
                                                  const std::filesystem::path& serve_db,
                                                  const EnvReader& env = process_env);
  // The same on an outbox already open (cluster mode: PostgreSQL, cluster_outbox.hpp).
  static Result<std::unique_ptr<Webhooks>> create(std::vector<WebhookEndpointConfig> endpoints,
                                                  std::unique_ptr<OutboxStore> outbox,
                                                  const EnvReader& env = process_env);
  ~Webhooks();  // stop()

  void start();  // a worker per endpoint
  void stop();   // in-flight attempts are aborted and stay pending

  // A durable event of `type` for every endpoint that wants it (the approvals call this for
  // approval.requested / approval.resolved); data gets "tenant". Returns the event id, or "" when
  // no endpoint wants it.
  Result<std::string> publish(const std::string& type, const std::string& tenant, Json data);
  // run.completed (done or cancelled) / run.failed, written in the run end's transaction.
  FinishHook finish_hook();
  // For a store that writes run ends itself (cluster mode): the endpoints wanting an event type,
  // and a wake-up for the run-end workers. Both outlive this object (shared state).
  struct Sink {
    std::function<std::vector<std::string>(const std::string& type)> wanting;
    std::function<void()> wake;
  };
  Sink sink();

 private:
  struct State;  // shared with the finish hook, which may outlive this object in a RunStore
  explicit Webhooks(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace kernex::server
