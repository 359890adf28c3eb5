// The `serve:` section: defaults, every key, and the typed errors a hand-written file gets.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernex/config.hpp"
#include "kernex/server/serve_config.hpp"

namespace kernex::server {
namespace {

Result<ServeConfig> parse(const std::string& yaml) {
  KERNEX_ASSIGN_OR_RETURN(auto config, Config::parse_yaml(yaml, "kernex.yaml"));
  config.data_dir = "/data";
  return ServeConfig::from(config);
}

TEST(ServeConfig, DefaultsWithoutASection) {
  auto c = parse("provider: replay\n");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 8080);
  EXPECT_EQ(c->if_busy, IfBusy::Reject);
  EXPECT_EQ(c->keys_file, "/data/serve-keys.json");
  EXPECT_EQ(c->workspaces_root, "/data/workspaces");
  EXPECT_EQ(c->event_retention, std::chrono::seconds(600));
  EXPECT_EQ(c->approval_timeout, std::chrono::seconds(3600));
  EXPECT_FALSE(c->run_stack_reserve) << "unset: the build's default (RunFiber::default_reserve)";
}

TEST(ServeConfig, ReadsEveryKey) {
  auto c = parse(R"(serve:
  listen: "[::1]:9000"
  threads: 3
  run_stack_reserve: 0
  keys_file: /etc/kernex/keys.json
  if_busy: enqueue
  max_body_bytes: 2048
  max_header_bytes: 1024
  max_connections: 10
  header_timeout_ms: 500
  idle_timeout_ms: 700
  shutdown_grace_ms: 900
  event_retention_s: 60
  limits:
    default: {concurrent_runs: 2}
    tenants: {acme: {concurrent_runs: 1, tokens_per_day: 100, cost_per_day_usd: 0.5}}
  tenants:
    acme: {workspace: /srv/acme}
  agents:
    helper: {provider: replay, model: m1, system_prompt: be brief, skills: [a, b]}
  approvals: {timeout_s: 90}
)");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 9000);
  EXPECT_EQ(c->threads, 3u);
  EXPECT_EQ(c->run_stack_reserve, std::optional<std::size_t>(0));
  EXPECT_EQ(c->keys_file, "/etc/kernex/keys.json");
  EXPECT_EQ(c->if_busy, IfBusy::Enqueue);
  EXPECT_EQ(c->max_body_bytes, 2048u);
  EXPECT_EQ(c->header_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->default_limits.concurrent_runs, 2u);
  ASSERT_TRUE(c->tenant_limits.contains("acme"));
  EXPECT_EQ(c->tenant_limits["acme"].tokens_per_day, 100u);
  EXPECT_EQ(c->tenant_workspaces["acme"], "/srv/acme");
  ASSERT_TRUE(c->agents.contains("helper"));
  EXPECT_EQ(c->agents["helper"].model, "m1");
  EXPECT_EQ(c->agents["helper"].skills, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c->approval_timeout, std::chrono::seconds(90));
}

TEST(ServeConfig, RejectsWhatItDoesNotKnow) {
  struct Case {
    const char* yaml;
    const char* names;
  } cases[] = {
      {"serve:\n  listn: 1.2.3.4:5\n", "serve.listn: unknown key"},
      {"serve:\n  listen: nowhere\n", "serve.listen"},
      {"serve:\n  listen: 1.2.3.4:99999\n", "serve.listen"},
      {"serve:\n  if_busy: fork\n", "serve.if_busy"},
      {"serve:\n  threads: -1\n", "serve.threads"},
      {"serve:\n  run_stack_reserve: 16385\n", "serve.run_stack_reserve"},
      {"serve:\n  run_stack_reserve: -5\n", "serve.run_stack_reserve"},
      {"serve:\n  run_stack_reserve: many\n", "serve.run_stack_reserve"},
      {"serve:\n  max_body_bytes: 0\n", "serve.max_body_bytes"},
      {"serve:\n  header_timeout_ms: lots\n", "serve.header_timeout_ms"},
      {"serve:\n  limits: {default: {runs: 1}}\n", "serve.limits.default.runs"},
      {"serve:\n  tenants: {\"../x\": {workspace: /w}}\n", "serve.tenants"},
      {"serve:\n  agents: {a: {temperature: 1}}\n", "serve.agents.a.temperature"},
      {"serve: [1, 2]\n", "serve: expected a mapping"},
      {"serve:\n  approvals: {timeout_s: 0}\n", "serve.approvals.timeout_s"},
      {"serve:\n  approvals: {timeout: 5}\n", "serve.approvals.timeout"},
      {"serve:\n  approvals: 5\n", "serve.approvals"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.yaml);
    ASSERT_FALSE(r) << c.yaml;
    EXPECT_EQ(r.error().code, ErrorCode::Config) << c.yaml;
    EXPECT_NE(r.error().describe().find(c.names), std::string::npos)
        << c.yaml << " -> " << r.error().describe();
  }
}

TEST(ServeConfig, ReadsWebhooks) {
  auto c = parse(R"(serve:
  webhooks:
    - url: https://hooks.example.com/kernex
      secret_env: KX_HOOK_SECRET
      events: [run.completed, run.failed]
      max_age_s: 3600
    - url: http://127.0.0.1:9000/in
      secret: inline-secret
      events: [approval.requested, approval.resolved]
      backoff_base_ms: 50
      backoff_cap_ms: 1000
      timeout_ms: 500
)");
  ASSERT_TRUE(c) << c.error().describe();
  ASSERT_EQ(c->webhooks.size(), 2u);
  const auto& a = c->webhooks[0];
  EXPECT_EQ(a.url, "https://hooks.example.com/kernex");
  EXPECT_EQ(a.secret_env, "KX_HOOK_SECRET");
  EXPECT_EQ(a.secret, "");
  EXPECT_EQ(a.events, (std::vector<std::string>{"run.completed", "run.failed"}));
  EXPECT_EQ(a.max_age, std::chrono::seconds(3600));
  EXPECT_EQ(a.backoff_base, std::chrono::milliseconds(1000));
  EXPECT_EQ(a.backoff_cap, std::chrono::milliseconds(3'600'000));
  const auto& b = c->webhooks[1];
  EXPECT_EQ(b.secret, "inline-secret");
  EXPECT_EQ(b.max_age, std::chrono::seconds(86'400));
  EXPECT_EQ(b.backoff_base, std::chrono::milliseconds(50));
  EXPECT_EQ(b.backoff_cap, std::chrono::milliseconds(1000));
  EXPECT_EQ(b.timeout, std::chrono::milliseconds(500));
}

TEST(ServeConfig, WebhookErrorsNameTheField) {
  const std::string head = "serve:\n  webhooks:\n    - ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"url: ftp://x/\n      secret: s\n      events: [run.failed]", "serve.webhooks[0].url"},
      {"url: /relative\n      secret: s\n      events: [run.failed]", "serve.webhooks[0].url"},
      {"secret: s\n      events: [run.failed]", "serve.webhooks[0].url: missing"},
      {"url: http://h/\n      events: [run.failed]", "exactly one of secret_env"},
      {"url: http://h/\n      secret: s\n      secret_env: E\n      events: [run.failed]",
       "exactly one of secret_env"},
      {"url: http://h/\n      secret: \"\"\n      events: [run.failed]",
       "serve.webhooks[0].secret: must not be empty"},
      {"url: http://h/\n      secret: s", "serve.webhooks[0].events: missing"},
      {"url: http://h/\n      secret: s\n      events: [run.started]",
       "serve.webhooks[0].events: unknown event \"run.started\""},
      {"url: http://h/\n      secret: s\n      events: []", "serve.webhooks[0].events"},
      {"url: http://h/\n      secret: s\n      events: [run.failed]\n      colour: red",
       "serve.webhooks[0].colour: unknown key"},
      {"url: http://h/\n      secret: s\n      events: [run.failed]\n      max_age_s: 0",
       "serve.webhooks[0].max_age_s"},
      {"url: http://h/\n      secret: s\n      events: [run.failed]\n      backoff_base_ms: "
       "500\n      backoff_cap_ms: 100",
       "serve.webhooks[0].backoff_cap_ms"},
      {"url: http://h/\n      secret: s\n      events: [run.failed]\n    - url: http://h/\n "
       "     secret: t\n      events: [run.failed]",
       "serve.webhooks[1].url: listed twice"},
  };
  for (const auto& [yaml, expected] : cases) {
    auto c = parse(head + yaml + "\n");
    ASSERT_FALSE(c) << yaml;
    EXPECT_EQ(c.error().code, ErrorCode::Config) << yaml;
    EXPECT_NE(c.error().message.find(expected), std::string::npos)
        << yaml << "\n -> " << c.error().message;
  }
  auto not_a_list = parse("serve:\n  webhooks: {url: http://h/}\n");
  ASSERT_FALSE(not_a_list);
  EXPECT_NE(not_a_list.error().message.find("serve.webhooks: expected a list"), std::string::npos);
}

TEST(ServeConfig, StreamAndMetricsDefaults) {
  auto c = parse("provider: replay\n");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_LE(c->stream.buffer_bytes, std::size_t{1} << 20) << "a follower's default bound";
  EXPECT_GE(c->stream.buffer_bytes, 4096u);
  EXPECT_EQ(c->stream.slow_timeout, std::chrono::seconds(30));
  EXPECT_FALSE(c->metrics.enabled()) << "/metrics is off unless asked for";
  EXPECT_TRUE(c->metrics.token_env.empty());
  EXPECT_TRUE(c->metrics.listen_host.empty());
}

TEST(ServeConfig, ReadsStreamAndMetrics) {
  auto c = parse(R"(serve:
  stream:
    buffer_bytes: 65536
    slow_timeout_s: 5
  metrics:
    token_env: KERNEX_METRICS_TOKEN
    listen: "127.0.0.1:9100"
)");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->stream.buffer_bytes, 65536u);
  EXPECT_EQ(c->stream.slow_timeout, std::chrono::seconds(5));
  EXPECT_EQ(c->metrics.token_env, "KERNEX_METRICS_TOKEN");
  EXPECT_EQ(c->metrics.listen_host, "127.0.0.1");
  EXPECT_EQ(c->metrics.listen_port, 9100);
  EXPECT_TRUE(c->metrics.enabled());
  auto v6 = parse("serve:\n  metrics: {listen: \"[::1]:0\"}\n");
  ASSERT_TRUE(v6) << v6.error().describe();
  EXPECT_EQ(v6->metrics.listen_host, "::1");
  EXPECT_TRUE(v6->metrics.token_env.empty());
}

TEST(ServeConfig, StreamAndMetricsErrorsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"stream: 5", "serve.stream: expected a mapping"},
      {"stream: {buffer_bytes: 0}", "serve.stream.buffer_bytes"},
      {"stream: {buffer_bytes: 100}", "serve.stream.buffer_bytes: must be at least 4096"},
      {"stream: {buffer_bytes: -1}", "serve.stream.buffer_bytes"},
      {"stream: {buffer_bytes: 1.5}", "serve.stream.buffer_bytes"},
      {"stream: {buffer_bytes: \"1MiB\"}", "serve.stream.buffer_bytes"},
      {"stream: {buffer_bytes: 999999999999}", "serve.stream.buffer_bytes"},
      {"stream: {slow_timeout_s: 0}", "serve.stream.slow_timeout_s: must be positive"},
      {"stream: {slow_timeout_s: 99999}", "serve.stream.slow_timeout_s"},
      {"stream: {slow_timeout_s: true}", "serve.stream.slow_timeout_s"},
      {"stream: {buffer: 4096}", "serve.stream.buffer: unknown key"},
      {"metrics: [a]", "serve.metrics: expected a mapping"},
      {"metrics: {token: abc}", "serve.metrics.token: unknown key"},
      {"metrics: {token_env: 5}", "serve.metrics.token_env: expected a string"},
      {"metrics: {token_env: \"\"}", "serve.metrics.token_env"},
      {"metrics: {token_env: \"A B\"}", "serve.metrics.token_env"},
      {"metrics: {token_env: \"1TOKEN\"}", "serve.metrics.token_env"},
      {"metrics: {token_env: \"X=Y\"}", "serve.metrics.token_env"},
      {"metrics: {listen: 9100}", "serve.metrics.listen: expected a string"},
      {"metrics: {listen: \"localhost\"}", "serve.metrics.listen"},
      {"metrics: {listen: \"127.0.0.1:70000\"}", "serve.metrics.listen"},
      {"metrics: {listen: \":9100\"}", "serve.metrics.listen"},
  };
  for (const auto& [yaml, expected] : cases) {
    auto c = parse("serve:\n  " + yaml + "\n");
    ASSERT_FALSE(c) << yaml;
    EXPECT_EQ(c.error().code, ErrorCode::Config) << yaml;
    EXPECT_NE(c.error().message.find(expected), std::string::npos)
        << yaml << "\n -> " << c.error().message;
  }
}

}  // namespace
}  // namespace kernex::server
