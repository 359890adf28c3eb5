#include "kernex/server/serve_config.hpp"

#include "kernex/server/keys.hpp"

#include "kernex/config.hpp"
#include "kernex/number.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>

namespace kernex::server {
namespace {

namespace fs = std::filesystem;

std::unexpected<Error> bad(const std::string& path, const std::string& what) {
  return fail(ErrorCode::Config,
              (path.empty() ? std::string("serve") : "serve." + path) + ": " + what);
}

Result<void> only_keys(const Json& object, const std::string& path,
                       std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    bool ok = false;
    for (auto k : known) ok = ok || k == key;
    if (ok) continue;
    std::string list;
    for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    return bad(path.empty() ? key : path + "." + key,
               "unknown key (expected one of: " + list + ")");
  }
  return {};
}

// YAML scalars arrive as signed integers (nlohmann's number_integer), so a non-negative signed
// value counts as whole too.
Result<std::uint64_t> unsigned_value(const Json& v, const std::string& path, std::uint64_t max) {
  const bool whole =
      v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
  if (!whole || v.get<std::uint64_t>() > max) {
    return bad(path,
               "expected a whole number from 0 to " + std::to_string(max) + ", got " + v.dump());
  }
  return v.get<std::uint64_t>();
}

Result<std::string> string_value(const Json& v, const std::string& path) {
  if (!v.is_string()) return bad(path, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

Result<std::chrono::milliseconds> millis(const Json& v, const std::string& path) {
  KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(v, path, 86'400'000));
  if (n == 0) return bad(path, "must be positive");
  return std::chrono::milliseconds(n);
}

Result<TenantLimitsConfig> limits_value(const Json& v, const std::string& path) {
  if (!v.is_object())
    return bad(path, "expected a mapping {concurrent_runs, tokens_per_day, cost_per_day_usd}");
  if (auto r = only_keys(v, path, {"concurrent_runs", "tokens_per_day", "cost_per_day_usd"}); !r) {
    return std::unexpected(r.error());
  }
  TenantLimitsConfig out;
  if (auto it = v.find("concurrent_runs"); it != v.end() && !it->is_null()) {
    KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, path + ".concurrent_runs", 1'000'000));
    out.concurrent_runs = static_cast<std::uint32_t>(n);
  }
  if (auto it = v.find("tokens_per_day"); it != v.end() && !it->is_null()) {
    KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, path + ".tokens_per_day", UINT64_MAX));
    out.tokens_per_day = n;
  }
  if (auto it = v.find("cost_per_day_usd"); it != v.end() && !it->is_null()) {
    if (auto problem = number_problem(*it, 0, kMaxCostBudgetUsd))
      return bad(path + ".cost_per_day_usd", *problem);
    out.cost_per_day_usd = it->get<double>();
  }
  return out;
}

bool is_http_url(const std::string& url) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (url.size() > scheme.size() && url.compare(0, scheme.size(), scheme) == 0 &&
        url[scheme.size()] != '/')
      return url.find_first_of(" \t\r\n") == std::string::npos;
  }
  return false;
}

Result<std::vector<std::string>> webhook_events(const Json& v, const std::string& path) {
  std::string known;
  for (auto t : kWebhookEventTypes) known += (known.empty() ? "" : ", ") + std::string(t);
  if (!v.is_array() || v.empty()) return bad(path, "expected a non-empty list of: " + known);
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string() || std::find(std::begin(kWebhookEventTypes), std::end(kWebhookEventTypes),
                                    e.get<std::string>()) == std::end(kWebhookEventTypes))
      return bad(path, "unknown event " + e.dump() + " (expected one of: " + known + ")");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// One entry of serve.webhooks: {url, secret | secret_env, events, max_age_s?, backoff?,
// timeout_ms?}.
Result<WebhookEndpointConfig> webhook_value(const Json& v, const std::string& path) {
  if (!v.is_object()) return bad(path, "expected a mapping {url, secret_env or secret, events}");
  KERNEX_RETURN_IF_ERROR(only_keys(v, path,
                                   {"url", "secret", "secret_env", "events", "max_age_s",
                                    "backoff_base_ms", "backoff_cap_ms", "timeout_ms"}));
  WebhookEndpointConfig out;
  auto url = v.find("url");
  if (url == v.end()) return bad(path + ".url", "missing (an http:// or https:// URL)");
  KERNEX_ASSIGN_OR_RETURN(out.url, string_value(*url, path + ".url"));
  if (!is_http_url(out.url)) return bad(path + ".url", "expected an http:// or https:// URL");
  const bool inline_secret = v.contains("secret"), env_secret = v.contains("secret_env");
  if (inline_secret == env_secret)
    return bad(path, "expected exactly one of secret_env (preferred) or secret");
  const std::string key = inline_secret ? "secret" : "secret_env";
  KERNEX_ASSIGN_OR_RETURN(auto secret, string_value(v[key], path + "." + key));
  if (secret.empty()) return bad(path + "." + key, "must not be empty");
  (inline_secret ? out.secret : out.secret_env) = secret;
  auto events = v.find("events");
  if (events == v.end()) return bad(path + ".events", "missing (the event types to send)");
  KERNEX_ASSIGN_OR_RETURN(out.events, webhook_events(*events, path + ".events"));
  if (auto it = v.find("max_age_s"); it != v.end()) {
    KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, path + ".max_age_s", 86'400 * 30));
    if (n == 0) return bad(path + ".max_age_s", "must be positive");
    out.max_age = std::chrono::seconds(n);
  }
  for (auto [name, field] :
       {std::pair{"backoff_base_ms", &out.backoff_base},
        std::pair{"backoff_cap_ms", &out.backoff_cap}, std::pair{"timeout_ms", &out.timeout}}) {
    if (auto it = v.find(name); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(*field, millis(*it, path + "." + name));
    }
  }
  if (out.backoff_cap < out.backoff_base)
    return bad(path + ".backoff_cap_ms", "must be at least backoff_base_ms");
  return out;
}

struct Reader {
  const Config& config;
  ServeConfig out;

  fs::path path_of(const std::string& text) const {
    fs::path p(text);
    if (p.is_relative() && config.source) p = config.source->parent_path() / p;
    return p.lexically_normal();
  }

  Result<void> limits(const Json& v) {
    if (!v.is_object()) return bad("limits", "expected a mapping {default, tenants}");
    if (auto r = only_keys(v, "limits", {"default", "tenants"}); !r) return r;
    if (auto it = v.find("default"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto l, limits_value(*it, "limits.default"));
      out.default_limits = l;
    }
    if (auto it = v.find("tenants"); it != v.end()) {
      if (!it->is_object())
        return bad("limits.tenants", "expected a mapping of tenant names to limits");
      for (const auto& [name, value] : it->items()) {
        if (!valid_tenant_name(name))
          return bad("limits.tenants." + name, "not a tenant name ([A-Za-z0-9_.-]{1,64})");
        KERNEX_ASSIGN_OR_RETURN(auto l, limits_value(value, "limits.tenants." + name));
        out.tenant_limits[name] = l;
      }
    }
    return {};
  }

  Result<void> tenants(const Json& v) {
    if (!v.is_object()) return bad("tenants", "expected a mapping of tenant names to {workspace}");
    for (const auto& [name, value] : v.items()) {
      const std::string path = "tenants." + name;
      if (!valid_tenant_name(name)) return bad(path, "not a tenant name ([A-Za-z0-9_.-]{1,64})");
      if (!value.is_object()) return bad(path, "expected a mapping {workspace}");
      if (auto r = only_keys(value, path, {"workspace"}); !r) return r;
      if (auto it = value.find("workspace"); it != value.end()) {
        KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, path + ".workspace"));
        out.tenant_workspaces[name] = path_of(s);
      }
    }
    return {};
  }

  Result<void> agents(const Json& v) {
    if (!v.is_object())
      return bad("agents",
                 "expected a mapping of model names to {provider, model, system_prompt, skills}");
    for (const auto& [name, value] : v.items()) {
      const std::string path = "agents." + name;
      if (!value.is_object())
        return bad(path, "expected a mapping {provider, model, system_prompt, skills}");
      if (auto r = only_keys(value, path, {"provider", "model", "system_prompt", "skills"}); !r)
        return r;
      AgentProfile agent;
      for (auto [key, field] :
           {std::pair{"provider", &agent.provider}, std::pair{"model", &agent.model}}) {
        if (auto it = value.find(key); it != value.end()) {
          KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, path + "." + key));
          *field = s;
        }
      }
      if (auto it = value.find("system_prompt"); it != value.end()) {
        KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, path + ".system_prompt"));
        agent.system_prompt = s;
      }
      if (auto it = value.find("skills"); it != value.end()) {
        if (!it->is_array()) return bad(path + ".skills", "expected a list of skill names");
        for (const auto& s : *it) {
          if (!s.is_string()) return bad(path + ".skills", "expected a list of skill names");
          agent.skills.push_back(s.get<std::string>());
        }
      }
      out.agents[name] = std::move(agent);
    }
    return {};
  }

  Result<void> cluster(const Json& v) {
    if (!v.is_object())
      return bad("cluster",
                 "expected a mapping {lease_s, on_lost, max_attempts, max_runs, pool_size}");
    if (auto r = only_keys(v, "cluster",
                           {"lease_s", "on_lost", "max_attempts", "max_runs", "pool_size"});
        !r)
      return r;
    for (const auto& [key, value] : v.items()) {
      const std::string path = "cluster." + key;
      if (key == "on_lost") {
        const std::string s = value.is_string() ? value.get<std::string>() : "";
        if (s != "retry" && s != "interrupt")
          return bad(path, "expected retry or interrupt, got " + value.dump());
        out.cluster.retry_lost = s == "retry";
        continue;
      }
      const std::uint64_t max = key == "lease_s"        ? 3600
                                : key == "max_attempts" ? 100
                                : key == "max_runs"     ? 100'000
                                                        : 1000;
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(value, path, max));
      if (n == 0) return bad(path, "must be positive");
      if (key == "lease_s") out.cluster.lease = std::chrono::seconds(n);
      if (key == "max_attempts") out.cluster.max_attempts = static_cast<unsigned>(n);
      if (key == "max_runs") out.cluster.max_runs = n;
      if (key == "pool_size") out.cluster.pool_size = n;
    }
    return {};
  }

  Result<void> webhooks(const Json& v) {
    if (!v.is_array()) return bad("webhooks", "expected a list of {url, secret_env, events}");
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string path = "webhooks[" + std::to_string(i) + "]";
      KERNEX_ASSIGN_OR_RETURN(auto endpoint, webhook_value(v[i], path));
      for (const auto& other : out.webhooks) {
        if (other.url == endpoint.url) return bad(path + ".url", "listed twice: " + endpoint.url);
      }
      out.webhooks.push_back(std::move(endpoint));
    }
    return {};
  }

  Result<void> approvals(const Json& v) {
    if (!v.is_object()) return bad("approvals", "expected a mapping {timeout_s}");
    KERNEX_RETURN_IF_ERROR(only_keys(v, "approvals", {"timeout_s", "park"}));
    if (auto it = v.find("park"); it != v.end()) {
      if (!it->is_boolean()) return bad("approvals.park", "expected true or false");
      out.park_approvals = it->get<bool>();
    }
    if (auto it = v.find("timeout_s"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, "approvals.timeout_s", 86'400 * 30));
      if (n == 0) return bad("approvals.timeout_s", "must be positive");
      out.approval_timeout = std::chrono::seconds(n);
    }
    return {};
  }

  Result<void> stream(const Json& v) {
    if (!v.is_object()) return bad("stream", "expected a mapping {buffer_bytes, slow_timeout_s}");
    KERNEX_RETURN_IF_ERROR(only_keys(v, "stream", {"buffer_bytes", "slow_timeout_s"}));
    if (auto it = v.find("buffer_bytes"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, "stream.buffer_bytes", 64u << 20));
      if (n < 4096) return bad("stream.buffer_bytes", "must be at least 4096");
      out.stream.buffer_bytes = n;
    }
    if (auto it = v.find("slow_timeout_s"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, "stream.slow_timeout_s", 3600));
      if (n == 0) return bad("stream.slow_timeout_s", "must be positive");
      out.stream.slow_timeout = std::chrono::seconds(n);
    }
    return {};
  }

  Result<void> openai(const Json& v) {
    if (!v.is_object()) return bad("openai", "expected a mapping {on_disconnect, parked_ttl_s}");
    KERNEX_RETURN_IF_ERROR(only_keys(v, "openai", {"on_disconnect", "parked_ttl_s"}));
    if (auto it = v.find("parked_ttl_s"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(*it, "openai.parked_ttl_s", 30 * 86'400));
      if (n == 0) return bad("openai.parked_ttl_s", "must be positive");
      out.openai.parked_ttl = std::chrono::seconds(n);
    }
    if (auto it = v.find("on_disconnect"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, "openai.on_disconnect"));
      if (s != "cancel" && s != "finish")
        return bad("openai.on_disconnect", "expected cancel or finish, got '" + s + "'");
      out.openai.cancel_on_disconnect = s == "cancel";
    }
    return {};
  }

  Result<void> metrics(const Json& v) {
    if (!v.is_object()) return bad("metrics", "expected a mapping {token_env, listen}");
    KERNEX_RETURN_IF_ERROR(only_keys(v, "metrics", {"token_env", "listen"}));
    if (auto it = v.find("token_env"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, "metrics.token_env"));
      if (!env_name(s))
        return bad("metrics.token_env",
                   "expected the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*), got '" +
                       s + "'");
      out.metrics.token_env = s;
    }
    if (auto it = v.find("listen"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, "metrics.listen"));
      auto hp = parse_listen(s);
      if (!hp) return bad("metrics.listen", hp.error().message);
      out.metrics.listen_host = hp->first;
      out.metrics.listen_port = hp->second;
    }
    return {};
  }

  static bool env_name(const std::string& s) {
    if (s.empty() || s.size() > 255 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
    return std::all_of(s.begin(), s.end(),
                       [](unsigned char c) { return std::isalnum(c) || c == '_'; });
  }

  Result<void> key(const std::string& key, const Json& v) {
    if (key == "listen") {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(v, key));
      auto hp = parse_listen(s);
      if (!hp) return bad(key, hp.error().message);
      out.host = hp->first;
      out.port = hp->second;
      return {};
    }
    if (key == "threads") {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(v, key, 256));
      out.threads = static_cast<unsigned>(n);
      return {};
    }
    if (key == "run_threads") {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(v, key, 100'000));
      out.run_threads = static_cast<unsigned>(n);
      return {};
    }
    if (key == "run_stack_kib") {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(v, key, 65'536));
      if (n < 128) return bad(key, "expected at least 128 (KiB), got " + std::to_string(n));
      out.run_stack_kib = static_cast<std::size_t>(n);
      return {};
    }
    if (key == "keys_file") {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(v, key));
      out.keys_file = path_of(s);
      return {};
    }
    if (key == "if_busy") {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(v, key));
      auto p = parse_if_busy(s);
      if (!p) return bad(key, "expected reject, enqueue or interrupt, got '" + s + "'");
      out.if_busy = *p;
      return {};
    }
    if (key == "max_body_bytes" || key == "max_header_bytes" || key == "max_connections") {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(v, key, std::uint64_t{1} << 32));
      if (n == 0) return bad(key, "must be positive");
      (key == "max_body_bytes"     ? out.max_body_bytes
       : key == "max_header_bytes" ? out.max_header_bytes
                                   : out.max_connections) = n;
      return {};
    }
    if (key == "header_timeout_ms" || key == "idle_timeout_ms" || key == "shutdown_grace_ms") {
      KERNEX_ASSIGN_OR_RETURN(auto ms, millis(v, key));
      (key == "header_timeout_ms" ? out.header_timeout
       : key == "idle_timeout_ms" ? out.idle_timeout
                                  : out.shutdown_grace) = ms;
      return {};
    }
    if (key == "event_retention_s" || key == "heartbeat_s") {
      KERNEX_ASSIGN_OR_RETURN(auto n, unsigned_value(v, key, 86'400 * 7));
      if (n == 0) return bad(key, "must be positive");
      (key == "event_retention_s" ? out.event_retention : out.heartbeat) = std::chrono::seconds(n);
      return {};
    }
    if (key == "workspaces") {
      KERNEX_ASSIGN_OR_RETURN(auto s, string_value(v, key));
      out.workspaces_root = path_of(s);
      return {};
    }
    if (key == "cors_origins") {
      if (!v.is_array())
        return bad(key, "expected a list of origins (\"https://chat.example.com\" or \"*\")");
      for (const auto& o : v) {
        if (!o.is_string() || o.get<std::string>().empty())
          return bad(key, "expected a list of origins");
        out.cors_origins.push_back(o.get<std::string>());
      }
      return {};
    }
    if (key == "limits") return limits(v);
    if (key == "tenants") return tenants(v);
    if (key == "cluster") return cluster(v);
    if (key == "webhooks") return webhooks(v);
    if (key == "approvals") return approvals(v);
    if (key == "stream") return stream(v);
    if (key == "metrics") return metrics(v);
    if (key == "openai") return openai(v);
    return agents(v);
  }
};

}  // namespace

std::optional<IfBusy> parse_if_busy(std::string_view text) {
  if (text == "reject") return IfBusy::Reject;
  if (text == "enqueue") return IfBusy::Enqueue;
  if (text == "interrupt") return IfBusy::Interrupt;
  return std::nullopt;
}

std::string_view to_string(IfBusy policy) noexcept {
  switch (policy) {
    case IfBusy::Reject:
      return "reject";
    case IfBusy::Enqueue:
      return "enqueue";
    case IfBusy::Interrupt:
      return "interrupt";
  }
  return "reject";
}

Result<std::pair<std::string, std::uint16_t>> parse_listen(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return fail(ErrorCode::Config,
                "listen address '" + std::string(text) + "': expected HOST:PORT");
  }
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535 ||
      host.empty()) {
    return fail(ErrorCode::Config, "listen address '" + std::string(text) +
                                       "': expected HOST:PORT with a port 0-65535");
  }
  return std::pair{std::string(host), static_cast<std::uint16_t>(port)};
}

Result<ServeConfig> ServeConfig::from(const Config& config) {
  Reader reader{config, {}};
  if (auto it = config.sections.find("serve");
      it != config.sections.end() && !it->second.is_null()) {
    const Json& section = it->second;
    if (!section.is_object()) return bad("", "expected a mapping of server settings");
    if (auto r = only_keys(section, "",
                           {"listen",
                            "threads",
                            "run_threads",
                            "run_stack_kib",
                            "keys_file",
                            "if_busy",
                            "max_body_bytes",
                            "max_header_bytes",
                            "max_connections",
                            "header_timeout_ms",
                            "idle_timeout_ms",
                            "shutdown_grace_ms",
                            "event_retention_s",
                            "heartbeat_s",
                            "workspaces",
                            "cors_origins",
                            "limits",
                            "tenants",
                            "agents",
                            "cluster",
                            "webhooks",
                            "approvals",
                            "stream",
                            "metrics",
                            "openai"});
        !r) {
      return std::unexpected(r.error());
    }
    for (const auto& [key, value] : section.items()) {
      KERNEX_RETURN_IF_ERROR(reader.key(key, value));
    }
  }
  if (reader.out.keys_file.empty()) reader.out.keys_file = config.data_dir / "serve-keys.json";
  if (reader.out.workspaces_root.empty())
    reader.out.workspaces_root = config.data_dir / "workspaces";
  return reader.out;
}

}  // namespace kernex::server
