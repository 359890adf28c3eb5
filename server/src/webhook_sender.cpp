#include "webhook_sender.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "kernex/http/client.hpp"
#include "kernex/log.hpp"
#include "sqlite_db.hpp"
#include "webhook_outbox.hpp"

namespace kernex::server {
namespace {

// How often an idle worker looks at the outbox anyway: rows `kernex serve webhooks retry` made
// pending from another process carry no wake-up.
constexpr std::chrono::milliseconds kPoll{1000};
constexpr std::size_t kBatch = 64;
// Delivered rows are kept this long for `kernex serve webhooks list`, then pruned at start.
constexpr std::chrono::milliseconds kKeepDelivered = std::chrono::hours(24 * 7);

struct Endpoint {
  WebhookEndpointConfig config;  // secret resolved
  std::mutex mutex;
  std::condition_variable_any cv;
  bool woken = false;
  std::jthread worker;

  void wake() {
    {
      std::lock_guard lock(mutex);
      woken = true;
    }
    cv.notify_all();
  }
  bool wants(const std::string& type) const {
    return std::find(config.events.begin(), config.events.end(), type) != config.events.end();
  }
};

// Full jitter between the base and the exponential bound of this attempt, so a fleet of
// endpoints that failed together does not retry together.
std::int64_t backoff_ms(const WebhookEndpointConfig& c, std::int64_t attempts,
                        std::mt19937_64& rng) {
  const std::int64_t base = c.backoff_base.count(), cap = c.backoff_cap.count();
  std::int64_t bound = base;
  for (std::int64_t i = 1; i < attempts && bound < cap; ++i) bound *= 2;
  bound = std::min(bound, cap);
  return std::uniform_int_distribution<std::int64_t>(base, std::max(base, bound))(rng);
}

enum class Attempt { Delivered, Failed, Stopped };

Attempt attempt(http::Client& client, OutboxStore& outbox, const Endpoint& ep, const OutboxRow& row,
                std::mt19937_64& rng, std::stop_token stop) {
  const std::int64_t t = unix_ms_now() / 1000;
  http::Request req;
  req.url = ep.config.url;
  req.body = row.body;
  req.stop = stop;
  req.headers = {{"Content-Type", "application/json"},
                 {"X-Kernex-Event-Id", row.event_id},
                 {"X-Kernex-Event-Type", row.type},
                 {"X-Kernex-Signature", webhook_signature(ep.config.secret, t, row.body)}};
  auto response = client.send(req);
  if (response && response->status / 100 == 2) {
    if (auto r = outbox.mark_delivered(row); !r) log(LogLevel::Error, r.error().describe());
    return Attempt::Delivered;
  }
  if (stop.stop_requested()) return Attempt::Stopped;  // stays pending, as it was
  const std::string error =
      response ? "HTTP " + std::to_string(response->status) : response.error().describe();
  const std::int64_t attempts = row.attempts + 1;
  const std::int64_t max_age_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(ep.config.max_age).count();
  auto gave_up = outbox.mark_failed(row, backoff_ms(ep.config, attempts, rng), max_age_ms, error);
  if (!gave_up) {
    log(LogLevel::Error, gave_up.error().describe());
  } else if (*gave_up) {
    log(LogLevel::Warn, "webhook " + row.event_id + " to " + ep.config.url + " failed after " +
                            std::to_string(attempts) + " attempts: " + error);
  }
  return Attempt::Failed;
}

void deliver_loop(OutboxStore& outbox, Endpoint& ep, std::stop_token stop) {
  http::ClientOptions options;
  options.max_retries = 0;  // the outbox retries, with its own backoff
  options.connect_timeout = options.read_timeout = options.total_timeout = ep.config.timeout;
  options.max_response_bytes = 1u << 20;
  options.user_agent = "kernex-webhooks/1";
  http::Client client(options);
  std::mt19937_64 rng(std::random_device{}());
  // Until a delivery succeeds the endpoint counts as down: the first success (after a restart
  // too) makes its backed-off rows due at once instead of hours later.
  bool down = true;
  while (!stop.stop_requested()) {
    auto rows = outbox.take_due(ep.config.url, kBatch);
    if (!rows) log(LogLevel::Error, "webhooks: " + rows.error().describe());
    bool sent = false;
    for (const auto& row : rows ? *rows : std::vector<OutboxRow>{}) {
      const Attempt a = attempt(client, outbox, ep, row, rng, stop);
      if (a == Attempt::Stopped) return;
      if (a == Attempt::Delivered && down) (void)outbox.hurry_now(ep.config.url);
      down = a == Attempt::Failed;
      sent = sent || a == Attempt::Delivered;
    }
    if (sent) continue;  // the next events of those runs may be due now
    std::chrono::milliseconds wait = kPoll;
    if (auto next = outbox.wait_ms(ep.config.url); next && *next)
      wait = std::clamp(std::chrono::milliseconds(**next), std::chrono::milliseconds(0), kPoll);
    std::unique_lock lock(ep.mutex);
    ep.cv.wait_for(lock, stop, wait, [&] { return ep.woken; });
    ep.woken = false;
  }
}

}  // namespace

Json run_event_data(const std::string& run_id, const std::string& tenant,
                    const std::string& session, RunStatus status, const Json& result) {
  Json data{{"run_id", run_id},
            {"session_id", session},
            {"tenant", tenant},
            {"status", std::string(to_string(status))}};
  if (status == RunStatus::Failed) {
    data["outcome"] = "error";
    data["error"] = {{"code", result.value("code", "")}, {"message", result.value("message", "")}};
  } else {
    data["outcome"] = result.is_object() ? result.value("outcome", "") : "";
    data["result"] = result;
  }
  return data;
}

struct Webhooks::State {
  std::unique_ptr<OutboxStore> outbox;
  std::vector<std::unique_ptr<Endpoint>> endpoints;

  std::vector<std::string> wanting(const std::string& type) const {
    std::vector<std::string> urls;
    for (const auto& ep : endpoints) {
      if (ep->wants(type)) urls.push_back(ep->config.url);
    }
    return urls;
  }
  void wake(const std::string& type) {
    for (auto& ep : endpoints) {
      if (ep->wants(type)) ep->wake();
    }
  }
};

std::string webhook_signature(std::string_view secret, std::int64_t t, std::string_view body) {
  std::string message = std::to_string(t) + ".";
  message.append(body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &size);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "t=" + std::to_string(t) + ",v1=";
  for (unsigned int i = 0; i < size; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

Result<std::unique_ptr<Webhooks>> Webhooks::create(std::vector<WebhookEndpointConfig> endpoints,
                                                   std::unique_ptr<OutboxStore> outbox,
                                                   const EnvReader& env) {
  auto state = std::make_shared<State>();
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    auto& c = endpoints[i];
    if (!c.secret_env.empty()) {
      auto value = env(c.secret_env);
      if (!value || value->empty())
        return fail(ErrorCode::Config, "serve.webhooks[" + std::to_string(i) +
                                           "].secret_env: the environment variable " +
                                           c.secret_env + " is not set (or empty)");
      c.secret = *value;
    }
    auto ep = std::make_unique<Endpoint>();
    ep->config = std::move(c);
    state->endpoints.push_back(std::move(ep));
  }
  state->outbox = std::move(outbox);
  return std::unique_ptr<Webhooks>(new Webhooks(std::move(state)));
}

Result<std::unique_ptr<Webhooks>> Webhooks::create(std::vector<WebhookEndpointConfig> endpoints,
                                                   const std::filesystem::path& serve_db,
                                                   const EnvReader& env) {
  KERNEX_ASSIGN_OR_RETURN(auto outbox, WebhookOutbox::open(serve_db));
  return create(std::move(endpoints), std::move(outbox), env);
}

Webhooks::~Webhooks() { stop(); }

void Webhooks::start() {
  if (auto pruned = state_->outbox->prune_older(kKeepDelivered); !pruned)
    log(LogLevel::Warn, "webhooks: " + pruned.error().describe());
  for (auto& ep : state_->endpoints) {
    if (ep->worker.joinable()) continue;
    Endpoint* e = ep.get();
    OutboxStore* outbox = state_->outbox.get();
    ep->worker =
        std::jthread([outbox, e](std::stop_token stop) { deliver_loop(*outbox, *e, stop); });
  }
}

void Webhooks::stop() {
  for (auto& ep : state_->endpoints) ep->worker.request_stop();
  for (auto& ep : state_->endpoints) {
    if (ep->worker.joinable()) ep->worker.join();
    ep->worker = std::jthread();
  }
}

Result<std::string> Webhooks::publish(const std::string& type, const std::string& tenant,
                                      Json data) {
  if (std::find(std::begin(kWebhookEventTypes), std::end(kWebhookEventTypes), type) ==
      std::end(kWebhookEventTypes))
    return fail(ErrorCode::Internal, "webhooks: unknown event type '" + type + "'");
  const auto urls = state_->wanting(type);
  if (urls.empty()) return std::string();
  if (!data.is_object()) data = Json{{"value", data}};
  data["tenant"] = tenant;
  const WebhookEvent event = make_webhook_event(type, data);
  KERNEX_RETURN_IF_ERROR(state_->outbox->put(event, urls, tenant));
  state_->wake(type);
  return event.id;
}

Webhooks::Sink Webhooks::sink() {
  std::shared_ptr<State> state = state_;
  return Sink{[state](const std::string& type) { return state->wanting(type); },
              [state] {
                state->wake("run.completed");
                state->wake("run.failed");
              }};
}

FinishHook Webhooks::finish_hook() {
  std::shared_ptr<State> state = state_;
  FinishHook hook;
  hook.in_transaction = [state](sqlite3* db, const std::string& run_id, RunStatus status,
                                const Json& result) -> Result<void> {
    const std::string type = status == RunStatus::Failed ? "run.failed" : "run.completed";
    const auto urls = state->wanting(type);
    if (urls.empty()) return {};
    Statement st(db, "SELECT tenant, session FROM runs WHERE id = ?");
    if (!st.ok()) return db_error(db, "webhook run lookup");
    st.bind(1, run_id);
    if (st.step() != SQLITE_ROW) return {};  // a run forgotten meanwhile: nothing to tell
    const Json data = run_event_data(run_id, st.text(0), st.text(1), status, result);
    return WebhookOutbox::enqueue(db, make_webhook_event(type, data), urls, unix_ms_now());
  };
  hook.after_commit = [state] {
    state->wake("run.completed");
    state->wake("run.failed");
  };
  return hook;
}

}  // namespace kernex::server
