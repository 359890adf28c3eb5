#include "kernex/server/server.hpp"

#include <csignal>
#include <cstdlib>
#include <ostream>
#include <optional>
#include <thread>

#include "api.hpp"
#include "http_server.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/log.hpp"
#include "kernex/server/keys.hpp"
#include "kernex/server/metrics.hpp"
#include "kernex/server/serve_config.hpp"
#include "kernex/server/tenant_limits.hpp"
#include "log_context.hpp"
#include "cluster_limits.hpp"
#include "cluster_outbox.hpp"
#include "cluster_runs.hpp"
#include "run_manager.hpp"
#include "webhook_sender.hpp"
#include "workspace_probe.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;

bool is_loopback_host(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || host.rfind("127.", 0) == 0;
}

// Who a request is. Without a keys file everyone is tenant "local" (loopback only); once the
// file exists (at start or later, `kernex serve keys add`) every request needs a key.
class Authenticator {
 public:
  explicit Authenticator(fs::path file) : file_(std::move(file)) {}

  Result<void> refresh() {
    std::lock_guard lock(mutex_);
    std::error_code ec;
    if (!keys_) {
      if (!fs::exists(file_, ec)) return {};
      KERNEX_ASSIGN_OR_RETURN(auto loaded, KeyStore::load(file_));
      keys_.emplace(std::move(loaded));
      return {};
    }
    KERNEX_RETURN_IF_ERROR(keys_->reload_if_changed());
    return {};
  }

  bool required() const {
    std::lock_guard lock(mutex_);
    return keys_.has_value();
  }

  std::optional<std::string> tenant(const HttpRequest& req) const {
    std::lock_guard lock(mutex_);
    if (!keys_) return std::string("local");
    const std::string header = req.header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (header.size() <= kBearer.size() || header.compare(0, kBearer.size(), kBearer) != 0)
      return std::nullopt;
    return keys_->tenant_for(std::string_view(header).substr(kBearer.size()));
  }

 private:
  fs::path file_;
  mutable std::mutex mutex_;
  std::optional<KeyStore> keys_;
};

class Limits final : public RunAdmission {
 public:
  explicit Limits(const ServeConfig& config) {
    auto convert = [](const TenantLimitsConfig& c) {
      return TenantLimit{c.concurrent_runs, c.tokens_per_day, c.cost_per_day_usd};
    };
    limits_.set_default(convert(config.default_limits));
    for (const auto& [tenant, l] : config.tenant_limits) limits_.set(tenant, convert(l));
  }
  std::optional<ApiError> admit(const std::string& tenant) override {
    Admission a = limits_.try_start(tenant);
    if (a) return std::nullopt;
    ApiError e = api_error(429, "rate_limited", a.message);
    e.retry_after_s = static_cast<unsigned>(std::max<long long>(1, a.retry_after.count()));
    return e;
  }
  void release(const std::string& tenant, std::uint64_t tokens, double cost_usd) override {
    limits_.finish(tenant, tokens, cost_usd);
  }
  TenantLimit limit_for(const std::string& tenant) const { return limits_.limit_for(tenant); }

 private:
  TenantLimits limits_;
};

class Observer final : public RunObserver {
 public:
  explicit Observer(ServerMetrics& m) : m_(m) {}
  void first_token(std::chrono::duration<double> after) override {
    m_.time_to_first_token_seconds.observe(after.count());
  }
  void run_finished(const std::string& tenant, const std::string& model, const std::string& outcome,
                    const Usage& usage, std::chrono::duration<double> took) override {
    m_.record_run(outcome, tenant, model, usage.input_tokens, usage.output_tokens, usage.cost_usd,
                  took.count());
  }

 private:
  ServerMetrics& m_;
};

void install_log_sink() {
  set_log_sink([](LogLevel level, std::string_view message) {
    if (level == LogLevel::Debug) return;
    std::string line = "kernex serve [" + std::string(to_string(level)) + "] ";
    const std::string& context = log_context();
    if (!context.empty() && message.find("req=") == std::string_view::npos) line += context + " ";
    line.append(message);
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
  });
}

// The metrics token from the environment variable serve.metrics.token_env names ("" without
// one); a named variable that is unset or empty is a configuration error.
Result<std::string> metrics_token_of(const ServeConfig& config) {
  if (config.metrics.token_env.empty()) return std::string();
  const char* value = std::getenv(config.metrics.token_env.c_str());
  if (value == nullptr || *value == '\0')
    return fail(ErrorCode::Config, "serve.metrics.token_env: the environment variable " +
                                       config.metrics.token_env + " is not set (or empty)");
  const std::string token = value;
  if (token.size() < 16)
    log(LogLevel::Warn, "serve.metrics.token_env: the token in " + config.metrics.token_env +
                            " is shorter than 16 characters; use a long random one");
  return token;
}

void announce_metrics(const ServeConfig& config, std::uint16_t port) {
  const std::string& h = config.metrics.listen_host;
  const std::string url = "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" +
                          std::to_string(port) + "/metrics";
  log(LogLevel::Info,
      "metrics on " + url + (config.metrics.token_env.empty() ? "" : " (bearer token required)"));
}

// Followers' cost on /metrics (what stream_stats() counts).
class StreamGauges {
 public:
  explicit StreamGauges(ServerMetrics& m)
      : followers_(m.registry.gauge("kernex_stream_followers", "Open event streams (SSE).")),
        buffered_(m.registry.gauge("kernex_stream_buffered_bytes",
                                   "Bytes of rendered events waiting in followers' buffers.")),
        peak_(m.registry.gauge("kernex_stream_buffered_bytes_peak",
                               "The most bytes followers' buffers held at once.")),
        slow_(
            m.registry.gauge("kernex_stream_slow_disconnects",
                             "Followers dropped for not reading (serve.stream.slow_timeout_s).")) {}
  void update(const StreamStats& s) {
    followers_.set(static_cast<double>(s.followers));
    buffered_.set(static_cast<double>(s.buffered_bytes));
    peak_.set(static_cast<double>(s.buffered_bytes_peak));
    slow_.set(static_cast<double>(s.slow_disconnects));
  }

 private:
  Gauge &followers_, &buffered_, &peak_, &slow_;
};

}  // namespace

// Cluster mode's webhooks (the outbox in PostgreSQL) and limits (counted there), for the store's
// transactions; returns them with the admission ClusterRuns reports usage to.
static Result<std::pair<ClusterHooks, RunAdmission*>> cluster_hooks(
    const ServeConfig& config, const pg::Options& options, const Limits* local,
    std::unique_ptr<Webhooks>& webhooks) {
  ClusterHooks hooks;
  if (!config.webhooks.empty()) {
    std::chrono::milliseconds slowest{0};
    for (const auto& e : config.webhooks) slowest = std::max(slowest, e.timeout);
    KERNEX_ASSIGN_OR_RETURN(auto outbox, ClusterOutbox::open(options, slowest));
    KERNEX_ASSIGN_OR_RETURN(webhooks, Webhooks::create(config.webhooks, std::move(outbox)));
    add_webhook_hooks(hooks, webhooks->sink());
  }
  if (!local) return std::pair{std::move(hooks), static_cast<RunAdmission*>(nullptr)};
  KERNEX_ASSIGN_OR_RETURN(auto limits,
                          ClusterLimits::open(options, [local](const std::string& tenant) {
                            return local->limit_for(tenant);
                          }));
  RunAdmission* counted = limits.get();
  ClusterLimits::add_to(hooks, std::move(limits));  // the store's hook keeps it alive
  return std::pair{std::move(hooks), counted};
}

// approval.requested / approval.resolved into the webhook outbox (serve.db, or PostgreSQL in
// cluster mode), before any run starts.
static void publish_approvals(Approvals& approvals, Webhooks* hooks) {
  if (!hooks) return;
  approvals.on_event([hooks](const std::string& type, const std::string& tenant, const Json& data) {
    if (auto sent = hooks->publish(type, tenant, data); !sent)
      log(LogLevel::Error,
          "serve: webhook event " + type + " not stored: " + sent.error().describe());
  });
}

// The PostgreSQL database serve's own stores share with the postgres memory store (cluster
// mode); nullopt when memory is elsewhere and they live in <data_dir>/serve.db.
static std::optional<pg::Options> shared_pg(const Kernel& kernel, const char* what) {
  const auto& memory = kernel.config().memory;
  if (!memory || memory->name != "postgres") return std::nullopt;
  pg::Options options;
  if (auto it = memory->config.find("dsn"); it != memory->config.end() && it->is_string())
    options.dsn = *it;
  options.what = what;
  options.application_name = "kernex-serve";
  return options;
}

// With the postgres memory store, runs live in the same database and every node shares them;
// otherwise this process keeps them in <data_dir>/serve.db, beside the webhook outbox.
static Result<std::unique_ptr<Runs>> make_runs(Kernel& kernel, const ServeConfig& config,
                                               std::vector<skills::Skill> skills,
                                               RunObserver* observer, Limits* admission,
                                               std::unique_ptr<Webhooks>& webhooks) {
  if (auto shared = shared_pg(kernel, "serve run store")) {
    pg::Options& options = *shared;
    const auto third =
        std::chrono::duration_cast<std::chrono::milliseconds>(config.cluster.lease) / 3;
    options.statement_timeout = std::max(std::chrono::milliseconds(1000), third);
    options.idle_in_transaction_timeout = std::max(std::chrono::milliseconds(1000), third);
    KERNEX_ASSIGN_OR_RETURN(auto store, ClusterStore::open(options, config.cluster.pool_size));
    KERNEX_ASSIGN_OR_RETURN(auto hooks, cluster_hooks(config, options, admission, webhooks));
    store->set_hooks(std::move(hooks.first));
    ClusterRuns::Deps deps{&kernel,          &config,  std::move(skills),
                           std::move(store), observer, hooks.second};
    auto runs = std::make_unique<ClusterRuns>(std::move(deps));
    publish_approvals(*runs->approvals(), webhooks.get());  // into the outbox in PostgreSQL
    return std::unique_ptr<Runs>(std::move(runs));
  }
  const auto db = kernel.config().data_dir / "serve.db";
  auto store = RunStore::open(db);
  if (!store) return std::unexpected(store.error());
  if (!config.webhooks.empty()) {
    KERNEX_ASSIGN_OR_RETURN(
        webhooks, Webhooks::create(config.webhooks, kernel.config().data_dir / "serve.db"));
    (*store)->on_finish(webhooks->finish_hook());
  }
  KERNEX_ASSIGN_OR_RETURN(auto journals, JournalStore::open(db));
  KERNEX_ASSIGN_OR_RETURN(auto approvals, ApprovalStore::open(db));
  RunManager::Deps deps;
  deps.kernel = &kernel;
  deps.config = &config;
  deps.skills = std::move(skills);
  deps.store = std::move(*store);
  deps.observer = observer;
  deps.admission = admission;
  deps.webhooks = webhooks.get();
  deps.journals = std::move(journals);
  deps.approvals = std::make_unique<Approvals>(std::move(approvals), config.approval_timeout);
  publish_approvals(*deps.approvals, webhooks.get());
  return std::unique_ptr<Runs>(std::make_unique<RunManager>(std::move(deps)));
}

// The Responses API's stored responses: beside the runs, in PostgreSQL when the nodes share it,
// else in serve.db.
static Result<std::shared_ptr<ResponseStore>> open_response_store(Kernel& kernel,
                                                                  const ServeConfig& config) {
  if (auto options = shared_pg(kernel, "serve response store")) {
    KERNEX_ASSIGN_OR_RETURN(auto store, PgResponseStore::open(*options, config.cluster.pool_size));
    return std::shared_ptr<ResponseStore>(std::move(store));
  }
  KERNEX_ASSIGN_OR_RETURN(auto store,
                          SqliteResponseStore::open(kernel.config().data_dir / "serve.db"));
  return std::shared_ptr<ResponseStore>(std::move(store));
}

// Runs parked on the client's tool calls: where the stored responses are.
static Result<std::shared_ptr<ParkedStore>> open_parked_store(Kernel& kernel,
                                                              const ServeConfig& config) {
  if (auto options = shared_pg(kernel, "serve parked calls")) {
    KERNEX_ASSIGN_OR_RETURN(auto store, PgParkedStore::open(*options, config.openai.parked_ttl));
    return std::shared_ptr<ParkedStore>(std::move(store));
  }
  KERNEX_ASSIGN_OR_RETURN(auto store, SqliteParkedStore::open(kernel.config().data_dir / "serve.db",
                                                              config.openai.parked_ttl));
  return std::shared_ptr<ParkedStore>(std::move(store));
}

namespace {

// Without a keys file every request is tenant "local": only a loopback listener may run so.
Result<void> check_open(const ServeConfig& config, const Authenticator& auth) {
  if (auth.required()) return {};
  if (!is_loopback_host(config.host)) {
    return fail(ErrorCode::Config,
                "no keys file at " + config.keys_file.string() + ": refusing to listen on " +
                    config.host +
                    " without authentication; add a key with `kernex serve keys add TENANT` "
                    "or listen on 127.0.0.1");
  }
  log(LogLevel::Warn, "no keys file at " + config.keys_file.string() +
                          ": no authentication, loopback only (every request is tenant 'local')");
  return {};
}

HttpOptions http_options(const ServeConfig& config) {
  HttpOptions http;
  http.host = config.host;
  http.port = config.port;
  http.threads =
      config.threads ? config.threads : std::max(1u, std::thread::hardware_concurrency());
  http.max_body_bytes = config.max_body_bytes;
  http.max_header_bytes = config.max_header_bytes;
  http.max_connections = config.max_connections;
  http.header_timeout = config.header_timeout;
  http.idle_timeout = config.idle_timeout;
  http.heartbeat = config.heartbeat;
  http.stream_buffer_bytes = config.stream.buffer_bytes;
  http.slow_timeout = config.stream.slow_timeout;
  return http;
}

// The separate /metrics listener of serve.metrics.listen, bound; null when there is none.
Result<std::unique_ptr<HttpServer>> metrics_listener(const ServeConfig& config,
                                                     const HttpOptions& http,
                                                     const std::string& token,
                                                     const std::function<std::string()>& text) {
  if (config.metrics.listen_host.empty()) {
    if (token.empty()) {
      log(LogLevel::Info,
          "/metrics is off: set serve.metrics.token_env (the name of an environment variable "
          "holding a bearer token for your scraper) or serve.metrics.listen (HOST:PORT of a "
          "listener serving only /metrics) to turn it on");
    }
    return nullptr;
  }
  HttpOptions m = http;
  m.host = config.metrics.listen_host;
  m.port = config.metrics.listen_port;
  m.threads = 1;
  m.max_connections = 64;
  auto server = std::make_unique<HttpServer>(
      m, [&token, &text](const HttpRequest& r) { return metrics_listener_reply(r, token, text); });
  auto bound = server->listen();
  if (!bound) return fail(ErrorCode::Config, "serve.metrics.listen: " + bound.error().message);
  announce_metrics(config, *bound);
  return server;
}

// serve's configuration, with the command line's --listen and refused skills.
Result<ServeConfig> serve_config(const Kernel& kernel, const ServeOptions& options) {
  KERNEX_ASSIGN_OR_RETURN(auto config, ServeConfig::from(kernel.config()));
  if (options.listen) {
    KERNEX_ASSIGN_OR_RETURN(auto hp, parse_listen(*options.listen));
    config.host = hp.first;
    config.port = hp.second;
  }
  config.refused_skills = options.refused_skills;
  return config;
}

void announce_listening(const std::string& host_name, std::uint16_t port, unsigned threads,
                        std::ostream* announce) {
  const std::string host =
      host_name.find(':') != std::string::npos ? "[" + host_name + "]" : host_name;
  if (announce != nullptr)
    *announce << "kernex serve: listening on http://" << host << ":" << port << std::endl;
  log(LogLevel::Info, "listening on http://" + host + ":" + std::to_string(port) + " with " +
                          std::to_string(threads) + " threads");
}

// What the server does on its own clock: finished runs leave memory, expired parked calls are
// deleted, and the keys file is read again.
void schedule_upkeep(HttpServer& server, Runs& runs, std::shared_ptr<ParkedStore> parked,
                     Authenticator& auth) {
  server.every(std::chrono::seconds(30), [&runs] { runs.evict_expired(); });
  // Expired parked calls: found by no request, deleted in one statement a minute, not per park.
  server.every(std::chrono::seconds(60), [parked = std::move(parked)] {
    if (auto r = parked->prune_expired(); !r)
      log(LogLevel::Warn, "serve: expired parked calls not pruned: " + r.error().describe());
  });
  server.every(std::chrono::seconds(1), [&auth] {
    if (auto r = auth.refresh(); !r)
      log(LogLevel::Error,
          "keys file: " + r.error().describe() + " (keeping the keys read before)");
  });
}

// Serves until SIGTERM or SIGINT, then drains: no new connections, running runs get `grace`, and
// the server stops once they ended.
void run_until_drained(HttpServer& server, Runs& runs, std::chrono::milliseconds grace) {
  std::thread drainer;
  server.run([&](int signal) {
    if (drainer.joinable()) return;
    log(LogLevel::Info, std::string("signal ") + (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
                            ": draining (no new runs; running runs have " +
                            std::to_string(grace.count()) + " ms)");
    server.stop_accepting();
    drainer = std::thread([&] {
      runs.shutdown(grace);
      server.stop(std::chrono::milliseconds(1000));
    });
  });
  if (drainer.joinable()) drainer.join();
}

}  // namespace

Result<void> serve(Kernel& kernel, std::vector<skills::Skill> skills, const ServeOptions& options) {
  KERNEX_ASSIGN_OR_RETURN(auto config, serve_config(kernel, options));
  install_log_sink();
  // Sessions' workspaces lie in the (hidden) data dir, or on storage every node shares (cluster
  // mode): tools may be granted their own one there. A node that cannot write there stops here.
  const auto& memory = kernel.config().memory;
  KERNEX_RETURN_IF_ERROR(
      probe_workspaces(config, kernel.config().data_dir, memory && memory->name == "postgres"));
  register_tool_area(config.workspaces_root, "serve workspaces");
  Authenticator auth(config.keys_file);
  KERNEX_RETURN_IF_ERROR(auth.refresh());
  KERNEX_RETURN_IF_ERROR(check_open(config, auth));
  ServerMetrics metrics;
  Observer observer(metrics);
  Limits limits(config);
  std::unique_ptr<Webhooks> webhooks;  // null without serve.webhooks
  KERNEX_ASSIGN_OR_RETURN(
      auto made, make_runs(kernel, config, std::move(skills), &observer, &limits, webhooks));
  Runs& runs = *made;
  KERNEX_ASSIGN_OR_RETURN(auto responses, open_response_store(kernel, config));
  KERNEX_ASSIGN_OR_RETURN(auto parked, open_parked_store(kernel, config));
  const std::shared_ptr<ParkedStore> parked_rows = parked;  // pruned below, once a minute

  const HttpOptions http = http_options(config);
  KERNEX_ASSIGN_OR_RETURN(const std::string metrics_token, metrics_token_of(config));
  std::unique_ptr<HttpServer> server;
  StreamGauges streams(metrics);
  const std::function<std::string()> metrics_text = [&] {
    metrics.active_runs.set(static_cast<double>(runs.active_runs()));
    metrics.queue_depth.set(static_cast<double>(runs.queued_runs()));
    metrics.connections.set(static_cast<double>(server ? server->connections() : 0));
    if (server) streams.update(server->stream_stats());
    return metrics.render();
  };
  Api api(Api::Deps{&runs, [&auth](const HttpRequest& r) { return auth.tenant(r); }, metrics_text,
                    !metrics_token.empty() && config.metrics.listen_host.empty(), metrics_token,
                    std::move(responses), std::move(parked)});
  server = std::make_unique<HttpServer>(http, [&api](const HttpRequest& r) {
    LogContext scope("req=" + r.request_id);
    return api.handle(r);
  });
  KERNEX_ASSIGN_OR_RETURN(auto port, server->listen());
  KERNEX_ASSIGN_OR_RETURN(auto metrics_server,
                          metrics_listener(config, http, metrics_token, metrics_text));
  std::thread metrics_thread;
  if (metrics_server) metrics_thread = std::thread([&] { metrics_server->run(nullptr); });
  runs.resume_unfinished();
  if (webhooks) webhooks->start();  // with the deliveries a previous server left pending
  schedule_upkeep(*server, runs, parked_rows, auth);
  announce_listening(config.host, port, http.threads, options.announce);

  run_until_drained(*server, runs, config.shutdown_grace);
  if (metrics_server) {
    metrics_server->stop_accepting();
    metrics_server->stop(std::chrono::milliseconds(0));
    metrics_thread.join();
  }
  runs.shutdown(std::chrono::milliseconds(0));
  if (webhooks) webhooks->stop();  // what is still pending goes out at the next start
  log(LogLevel::Info, "stopped");
  return {};
}

}  // namespace kernex::server
