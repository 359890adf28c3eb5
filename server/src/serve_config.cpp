#include "kernex/server/serve_config.hpp"

#include "kernex/server/keys.hpp"

#include "kernex/config.hpp"
#include "kernex/number.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>

#include "kernex/config_fields.hpp"
#include "serve_schema.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;
using config::FieldValue;
using config::Section;

// The section has no lines of its own (it arrives as JSON): errors name the key path.
config::Where at(const std::string& path) {
  return config::Where{"", 0, path.empty() ? std::string("serve") : "serve." + path};
}

std::unexpected<Error> bad(const std::string& path, const std::string& what) {
  return config::field_error(at(path), what);
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// `v` must be a mapping (`shape` words it) whose keys are all in `section`.
Result<void> table(const Json& v, const std::string& path, const Section& section,
                   std::string_view shape) {
  if (!v.is_object()) return bad(path, "expected " + std::string(shape));
  for (const auto& [key, value] : v.items())
    KERNEX_RETURN_IF_ERROR(config::known_key(section, key, at(child(path, key))));
  return {};
}

// The typed reads of one field of `section`; null reads as unset.
Result<std::optional<std::uint64_t>> integer(const Section& section, std::string_view key,
                                             const Json& v, const std::string& path) {
  return config::read_integer(*section.find(key), FieldValue::of(v), at(path));
}

// A string that must be there when its key is (null included).
Result<std::string> string_value(const Json& v, const std::string& path) {
  KERNEX_ASSIGN_OR_RETURN(auto s, config::read_string(FieldValue::of(v), at(path)));
  if (!s) return bad(path, "expected a string, got null");
  return std::move(*s);
}

Result<std::optional<std::size_t>> choice(const Section& section, std::string_view key,
                                          const Json& v, const std::string& path) {
  return config::read_enum(*section.find(key), FieldValue::of(v), at(path));
}

Result<TenantLimitsConfig> limits_value(const Json& v, const std::string& path) {
  KERNEX_RETURN_IF_ERROR(table(v, path, schema::kTenantLimits,
                               "a mapping {concurrent_runs, tokens_per_day, cost_per_day_usd}"));
  using schema::kTenantLimits;
  TenantLimitsConfig out;
  if (auto it = v.find("concurrent_runs"); it != v.end()) {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(kTenantLimits, it.key(), *it, child(path, it.key())));
    if (n) out.concurrent_runs = static_cast<std::uint32_t>(*n);
  }
  if (auto it = v.find("tokens_per_day"); it != v.end()) {
    KERNEX_ASSIGN_OR_RETURN(out.tokens_per_day,
                            integer(kTenantLimits, it.key(), *it, child(path, it.key())));
  }
  if (auto it = v.find("cost_per_day_usd"); it != v.end()) {
    KERNEX_ASSIGN_OR_RETURN(out.cost_per_day_usd,
                            config::read_number(*kTenantLimits.find(it.key()), FieldValue::of(*it),
                                                at(child(path, it.key()))));
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

// The url and the one secret of a webhook entry.
Result<void> webhook_target(const Json& v, const std::string& path, WebhookEndpointConfig& out) {
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
  return {};
}

// One entry of serve.webhooks: {url, secret | secret_env, events, max_age_s?, backoff?,
// timeout_ms?}.
Result<WebhookEndpointConfig> webhook_value(const Json& v, const std::string& path) {
  using schema::kWebhook;
  KERNEX_RETURN_IF_ERROR(table(v, path, kWebhook, "a mapping {url, secret_env or secret, events}"));
  WebhookEndpointConfig out;
  KERNEX_RETURN_IF_ERROR(webhook_target(v, path, out));
  auto events = v.find("events");
  if (events == v.end()) return bad(path + ".events", "missing (the event types to send)");
  KERNEX_ASSIGN_OR_RETURN(out.events, webhook_events(*events, path + ".events"));
  if (auto it = v.find("max_age_s"); it != v.end()) {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(kWebhook, it.key(), *it, path + ".max_age_s"));
    if (n) out.max_age = std::chrono::seconds(*n);
  }
  for (auto [name, field] :
       {std::pair{"backoff_base_ms", &out.backoff_base},
        std::pair{"backoff_cap_ms", &out.backoff_cap}, std::pair{"timeout_ms", &out.timeout}}) {
    if (auto it = v.find(name); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(kWebhook, name, *it, path + "." + name));
      if (n) *field = std::chrono::milliseconds(*n);
    }
  }
  if (out.backoff_cap < out.backoff_base)
    return bad(path + ".backoff_cap_ms", "must be at least backoff_base_ms");
  return out;
}

bool env_name(const std::string& s) {
  if (s.empty() || s.size() > 255 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_'; });
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
    KERNEX_RETURN_IF_ERROR(table(v, "limits", schema::kLimits, "a mapping {default, tenants}"));
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
      KERNEX_RETURN_IF_ERROR(table(value, path, schema::kTenant, "a mapping {workspace}"));
      if (auto it = value.find("workspace"); it != value.end()) {
        KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, path + ".workspace"));
        out.tenant_workspaces[name] = path_of(s);
      }
    }
    return {};
  }

  static Result<AgentProfile> agent(const Json& value, const std::string& path) {
    KERNEX_RETURN_IF_ERROR(
        table(value, path, schema::kAgent, "a mapping {provider, model, system_prompt, skills}"));
    AgentProfile agent;
    for (auto [key, field] :
         {std::pair{"provider", &agent.provider}, std::pair{"model", &agent.model}}) {
      if (auto it = value.find(key); it != value.end()) {
        KERNEX_ASSIGN_OR_RETURN(auto s, string_value(*it, path + "." + key));
        *field = s;
      }
    }
    if (auto it = value.find("system_prompt"); it != value.end()) {
      KERNEX_ASSIGN_OR_RETURN(agent.system_prompt, string_value(*it, path + ".system_prompt"));
    }
    if (auto it = value.find("skills"); it != value.end()) {
      if (!it->is_array()) return bad(path + ".skills", "expected a list of skill names");
      for (const auto& s : *it) {
        if (!s.is_string()) return bad(path + ".skills", "expected a list of skill names");
        agent.skills.push_back(s.get<std::string>());
      }
    }
    return agent;
  }

  Result<void> agents(const Json& v) {
    if (!v.is_object())
      return bad("agents",
                 "expected a mapping of model names to {provider, model, system_prompt, skills}");
    for (const auto& [name, value] : v.items()) {
      KERNEX_ASSIGN_OR_RETURN(out.agents[name], agent(value, "agents." + name));
    }
    return {};
  }

  Result<void> cluster(const Json& v) {
    using schema::kCluster;
    KERNEX_RETURN_IF_ERROR(table(
        v, "cluster", kCluster, "a mapping {lease_s, on_lost, max_attempts, max_runs, pool_size}"));
    for (const auto& [key, value] : v.items()) {
      const std::string path = "cluster." + key;
      if (key == "on_lost") {
        KERNEX_ASSIGN_OR_RETURN(auto i, choice(kCluster, key, value, path));
        if (i) out.cluster.retry_lost = *i == 0;
        continue;
      }
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(kCluster, key, value, path));
      if (!n) continue;
      if (key == "lease_s") out.cluster.lease = std::chrono::seconds(*n);
      if (key == "max_attempts") out.cluster.max_attempts = static_cast<unsigned>(*n);
      if (key == "max_runs") out.cluster.max_runs = *n;
      if (key == "pool_size") out.cluster.pool_size = *n;
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
    using schema::kApprovals;
    KERNEX_RETURN_IF_ERROR(table(v, "approvals", kApprovals, "a mapping {timeout_s}"));
    if (auto it = v.find("park"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto b, config::read_bool(FieldValue::of(*it), at("approvals.park")));
      if (b) out.park_approvals = *b;
    }
    if (auto it = v.find("timeout_s"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(kApprovals, it.key(), *it, "approvals.timeout_s"));
      if (n) out.approval_timeout = std::chrono::seconds(*n);
    }
    return {};
  }

  Result<void> stream(const Json& v) {
    using schema::kStream;
    KERNEX_RETURN_IF_ERROR(table(v, "stream", kStream, "a mapping {buffer_bytes, slow_timeout_s}"));
    if (auto it = v.find("buffer_bytes"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(kStream, it.key(), *it, "stream.buffer_bytes"));
      if (n) out.stream.buffer_bytes = *n;
    }
    if (auto it = v.find("slow_timeout_s"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(kStream, it.key(), *it, "stream.slow_timeout_s"));
      if (n) out.stream.slow_timeout = std::chrono::seconds(*n);
    }
    return {};
  }

  Result<void> openai(const Json& v) {
    using schema::kOpenAi;
    KERNEX_RETURN_IF_ERROR(table(v, "openai", kOpenAi, "a mapping {on_disconnect, parked_ttl_s}"));
    if (auto it = v.find("parked_ttl_s"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(kOpenAi, it.key(), *it, "openai.parked_ttl_s"));
      if (n) out.openai.parked_ttl = std::chrono::seconds(*n);
    }
    if (auto it = v.find("on_disconnect"); it != v.end()) {
      KERNEX_ASSIGN_OR_RETURN(auto i, choice(kOpenAi, it.key(), *it, "openai.on_disconnect"));
      if (i) out.openai.cancel_on_disconnect = *i == 0;
    }
    return {};
  }

  Result<void> metrics(const Json& v) {
    KERNEX_RETURN_IF_ERROR(table(v, "metrics", schema::kMetrics, "a mapping {token_env, listen}"));
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

  Result<void> scalar(const config::Field& field, const Json& v);
  Result<void> key(const std::string& key, const Json& v);
};

// The top-level keys that hold one value (integers, strings, paths, the busy policy).
Result<void> Reader::scalar(const config::Field& field, const Json& v) {
  const std::string key(field.name);
  if (field.type == config::FieldType::Integer) {
    KERNEX_ASSIGN_OR_RETURN(auto read, config::read_integer(field, FieldValue::of(v), at(key)));
    if (!read) return {};
    const std::uint64_t n = *read;
    if (key == "threads") out.threads = static_cast<unsigned>(n);
    if (key == "run_threads") out.run_threads = static_cast<unsigned>(n);
    if (key == "run_stack_kib") out.run_stack_kib = static_cast<std::size_t>(n);
    if (key == "run_stack_reserve") out.run_stack_reserve = static_cast<std::size_t>(n);
    if (key == "max_body_bytes") out.max_body_bytes = n;
    if (key == "max_header_bytes") out.max_header_bytes = n;
    if (key == "max_connections") out.max_connections = n;
    if (key == "header_timeout_ms") out.header_timeout = std::chrono::milliseconds(n);
    if (key == "idle_timeout_ms") out.idle_timeout = std::chrono::milliseconds(n);
    if (key == "shutdown_grace_ms") out.shutdown_grace = std::chrono::milliseconds(n);
    if (key == "event_retention_s") out.event_retention = std::chrono::seconds(n);
    if (key == "heartbeat_s") out.heartbeat = std::chrono::seconds(n);
    return {};
  }
  if (field.type == config::FieldType::Enum) {  // if_busy
    KERNEX_ASSIGN_OR_RETURN(auto i, config::read_enum(field, FieldValue::of(v), at(key)));
    if (i) out.if_busy = std::array{IfBusy::Reject, IfBusy::Enqueue, IfBusy::Interrupt}[*i];
    return {};
  }
  KERNEX_ASSIGN_OR_RETURN(auto s, string_value(v, key));
  if (key == "listen") {
    auto hp = parse_listen(s);
    if (!hp) return bad(key, hp.error().message);
    out.host = hp->first;
    out.port = hp->second;
  } else {
    if (s.empty()) return bad(key, "expected a path, got an empty string");
    (key == "keys_file" ? out.keys_file : out.workspaces_root) = path_of(s);
  }
  return {};
}

Result<void> Reader::key(const std::string& key, const Json& v) {
  const config::Field& field = *schema::kTop.find(key);
  if (v.is_null()) return {};  // `key:` alone: the default stays
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
  if (key == "agents") return agents(v);
  return scalar(field, v);
}

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
    KERNEX_RETURN_IF_ERROR(table(section, "", schema::kTop, "a mapping of server settings"));
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
