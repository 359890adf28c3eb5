// Third tenant battery (issue 32): `kernex serve` with two tenants, attacked over loopback HTTP
// as a hosting operator's clients could. Each TEST names its class of attack:
//   Battery3Metrics*    /metrics: off without serve.metrics, a token nobody else has, its own
//                       listener; loopback, tenants' keys and forwarding headers open nothing
//   Battery3Proxy*      X-Forwarded-For, Forwarded and X-Real-IP change no decision
//   Battery3Followers*  followers that never read, of one tenant's run, cost bounded memory,
//                       cannot follow another tenant's run, and malformed Last-Event-IDs are
//                       refused with a typed error; an MCP client of `kernex mcp serve` that
//                       never reads stdout stops the server, not its memory
// (Other helpers add recall, facts and forget attacks to this file in TESTs of their own.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>

#include <cstdlib>
#include <memory>
#include <regex>
#include <thread>

#include "follower_support.hpp"
#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;

constexpr const char* kTokenEnv = "KERNEX_BATTERY3_METRICS_TOKEN";
constexpr const char* kToken = "battery3-scraper-token-5f0c9a7e2b";

const Headers kProxyHeaders[] = {
    {{"X-Forwarded-For", "127.0.0.1"}},
    {{"X-Forwarded-For", "::1, 127.0.0.1"}},
    {{"Forwarded", "for=127.0.0.1;proto=http"}},
    {{"Forwarded", "for=\"[::1]\""}},
    {{"X-Real-IP", "127.0.0.1"}},
    {{"X-Forwarded-Host", "localhost"}, {"X-Forwarded-Proto", "http"}},
    {{"X-Forwarded-For", "127.0.0.1"}, {"X-Real-IP", "127.0.0.1"}, {"Forwarded", "for=localhost"}},
};

// Two tenants (alpha, beta) with keys, a replay provider, and `serve_body` as serve: settings.
class Battery3 : public ::testing::Test {
 protected:
  void start(const std::string& serve_body, bool expect_up = true) {
    ::setenv(kTokenEnv, kToken, 1);
    std::string script;
    for (int i = 0; i < 20; ++i) script += replay_text("answer " + std::to_string(i));
    w_.write_config(
        w_.replay_provider(script),
        "  keys_file: " + (w_.data_dir / "serve-keys.json").string() + "\n" + serve_body);
    auto a = w_.keys({"add", "alpha"});
    ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
    alpha_ = printed_key(a.out);
    auto b = w_.keys({"add", "beta"});
    ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
    beta_ = printed_key(b.out);
    if (expect_up) {
      ASSERT_TRUE(w_.start());
    }
  }
  int port() const { return w_.port(); }
  HttpResponse metrics(const Headers& h = {}, int port = 0) {
    return request(port ? port : w_.port(), "GET", "/metrics", "", h);
  }
  // The port of the metrics listener, from the start log.
  int metrics_port() {
    const std::string log = w_.log();
    std::smatch m;
    const std::regex re("metrics on http://127\\.0\\.0\\.1:([0-9]+)/metrics");
    if (!std::regex_search(log, m, re)) return 0;
    return std::stoi(m[1].str());
  }

  ServeWorld w_;
  std::string alpha_, beta_;
};

// ---------------------------------------------------------------------------------------------
// Metrics

TEST_F(Battery3, Battery3MetricsOffWithoutSettingAndTheLogSaysHow) {
  start("");
  auto plain = metrics();
  EXPECT_EQ(plain.status, 404) << plain.describe();
  EXPECT_EQ(plain.error_code(), "not_found");
  EXPECT_EQ(plain.body.find("kernex_"), std::string::npos);
  // Loopback peer, a tenant's key, a made-up token, proxy headers: still off.
  for (const auto& h : {bearer(alpha_), bearer(beta_), bearer(kToken), bearer("")}) {
    auto r = metrics(h);
    EXPECT_EQ(r.status, 404) << r.describe();
    EXPECT_EQ(r.body.find("kernex_runs_total"), std::string::npos);
  }
  for (const auto& h : kProxyHeaders) EXPECT_EQ(metrics(h).status, 404);
  const std::string log = w_.log();
  EXPECT_THAT(log, HasSubstr("/metrics is off"));
  EXPECT_THAT(log, HasSubstr("serve.metrics.token_env"));
  EXPECT_THAT(log, HasSubstr("serve.metrics.listen"));
}

TEST_F(Battery3, Battery3MetricsTokenIsTheOnlyWayIn) {
  start(std::string("  metrics:\n    token_env: ") + kTokenEnv + "\n");
  // Some usage to be hidden.
  auto run =
      request(port(), "POST", "/v1/sessions/s1/messages", message_body("hi"), bearer(alpha_));
  ASSERT_EQ(run.status, 200) << run.describe();
  const std::string token = kToken;
  const std::vector<Headers> refused = {
      {},
      bearer(alpha_),
      bearer(beta_),
      bearer("wrong"),
      bearer(token + "x"),
      bearer(token.substr(0, token.size() - 1)),
      bearer(" " + token),
      bearer(token.substr(0, 8)),
      {{"Authorization", "bearer " + token}},
      {{"Authorization", "Basic " + token}},
      {{"Authorization", token}},
      {{"X-Metrics-Token", token}},
  };
  for (const auto& h : refused) {
    auto r = metrics(h);
    EXPECT_EQ(r.status, 401) << (h.empty() ? "" : h[0].second) << "\n" << r.describe();
    EXPECT_EQ(r.error_code(), "unauthorized");
    EXPECT_EQ(r.body.find("alpha"), std::string::npos) << "no tenant's usage leaks";
    EXPECT_FALSE(r.header("www-authenticate").empty());
  }
  EXPECT_EQ(request(port(), "GET", "/metrics?token=" + token).status, 401);
  EXPECT_EQ(request(port(), "GET", "/metrics?access_token=" + token).status, 401);
  auto ok = metrics(bearer(token));
  ASSERT_EQ(ok.status, 200) << ok.describe();
  EXPECT_THAT(ok.header("content-type"), HasSubstr("text/plain"));
  EXPECT_THAT(ok.body, HasSubstr("kernex_runs_total"));
  EXPECT_THAT(ok.body, HasSubstr("tenant=\"alpha\""));
  EXPECT_EQ(request(port(), "POST", "/metrics", "{}", bearer(token)).status, 405);
  EXPECT_EQ(w_.log().find(token), std::string::npos) << "the token never reaches the log";
}

TEST_F(Battery3, Battery3MetricsOwnListenerServesOnlyMetrics) {
  start("  metrics:\n    listen: 127.0.0.1:0\n");
  const int mport = metrics_port();
  ASSERT_GT(mport, 0) << w_.log();
  ASSERT_NE(mport, port());
  auto ok = metrics({}, mport);
  ASSERT_EQ(ok.status, 200) << ok.describe();
  EXPECT_THAT(ok.body, HasSubstr("kernex_active_runs"));
  // The main listener has no /metrics any more, whatever the client claims.
  EXPECT_EQ(metrics().status, 404);
  for (const auto& h : kProxyHeaders) EXPECT_EQ(metrics(h).status, 404);
  // The metrics listener is no back door into the API.
  for (const std::string target :
       {"/healthz", "/v1/models", "/v1/sessions/s1/messages", "/metrics/", "/metrics/../v1/models",
        "/Metrics", "/metrics%2F"}) {
    auto r = request(mport, "GET", target, "", bearer(alpha_));
    EXPECT_EQ(r.status, 404) << target << "\n" << r.describe();
  }
  auto post =
      request(mport, "POST", "/v1/sessions/s1/messages", message_body("hi"), bearer(alpha_));
  EXPECT_EQ(post.status, 404) << post.describe();
}

TEST_F(Battery3, Battery3MetricsOwnListenerWithTokenNeedsTheToken) {
  start(std::string("  metrics:\n    listen: 127.0.0.1:0\n    token_env: ") + kTokenEnv + "\n");
  const int mport = metrics_port();
  ASSERT_GT(mport, 0) << w_.log();
  EXPECT_EQ(metrics({}, mport).status, 401);
  EXPECT_EQ(metrics(bearer(alpha_), mport).status, 401);
  for (const auto& h : kProxyHeaders) EXPECT_EQ(metrics(h, mport).status, 401);
  EXPECT_EQ(metrics(bearer(kToken), mport).status, 200);
  EXPECT_EQ(metrics(bearer(kToken)).status, 404) << "only on its own listener";
}

TEST_F(Battery3, Battery3MetricsConfigErrorsNameTheKey) {
  struct Case {
    std::string serve_body;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"  metrics:\n    token_env: KERNEX_BATTERY3_UNSET_VARIABLE\n", "serve.metrics.token_env"},
      {"  metrics:\n    token_env: \"bad name\"\n", "serve.metrics.token_env"},
      {"  metrics:\n    listen: nowhere\n", "serve.metrics.listen"},
      {"  metrics:\n    listen: \"256.0.0.1:0\"\n", "serve.metrics.listen"},
      {"  metrics:\n    token: abc\n", "serve.metrics.token"},
      {"  stream:\n    buffer_bytes: 10\n", "serve.stream.buffer_bytes"},
      {"  stream:\n    slow_timeout_s: 0\n", "serve.stream.slow_timeout_s"},
  };
  ::unsetenv("KERNEX_BATTERY3_UNSET_VARIABLE");
  for (const auto& c : cases) {
    ServeWorld w;
    w.write_config(w.replay_provider(replay_text("x")), c.serve_body);
    std::vector<std::string> args{"--config",    w.config.string(), "--listen",
                                  "127.0.0.1:0", "--data-dir",      w.data_dir.string()};
    EXPECT_FALSE(w.server.start(args, w.dir.path() / "serve.stderr", milliseconds(30000)))
        << c.serve_body;
    EXPECT_THAT(w.log(), HasSubstr(c.expected)) << c.serve_body;
  }
}

// ---------------------------------------------------------------------------------------------
// Proxy headers

TEST_F(Battery3, Battery3ProxyHeadersChangeNoDecision) {
  start(std::string("  metrics:\n    token_env: ") + kTokenEnv + "\n");
  for (const auto& h : kProxyHeaders) {
    auto m = metrics(h);
    EXPECT_EQ(m.status, 401) << m.describe();
    // Without a key the API refuses, whatever the proxy headers say.
    auto api = request(port(), "GET", "/v1/models", "", h);
    EXPECT_EQ(api.status, 401) << api.describe();
    // With beta's key, beta stays beta: alpha's session is not found.
    Headers as_beta = h;
    as_beta.emplace_back("Authorization", "Bearer " + beta_);
    EXPECT_EQ(request(port(), "GET", "/v1/sessions/s1/messages", "", as_beta).status, 404);
  }
}

// ---------------------------------------------------------------------------------------------
// Followers

TEST_F(Battery3, Battery3FollowersCannotFollowAnotherTenantsRun) {
  start("");
  auto run =
      request(port(), "POST", "/v1/sessions/s1/messages", message_body("hi"), bearer(alpha_));
  ASSERT_EQ(run.status, 200) << run.describe();
  const std::string id = run.json().value("run_id", "");
  for (const std::string last : {"", "0", "1", "2"}) {
    Headers h = bearer(beta_);
    if (!last.empty()) h.emplace_back("Last-Event-ID", last);
    auto r = request(port(), "GET", "/v1/runs/" + id + "/events", "", h);
    EXPECT_EQ(r.status, 404) << r.describe();
    EXPECT_EQ(r.body.find("answer"), std::string::npos);
  }
}

TEST_F(Battery3, Battery3FollowersMalformedLastEventIdIsRefused) {
  start("");
  auto run =
      request(port(), "POST", "/v1/sessions/s1/messages", message_body("hi"), bearer(alpha_));
  ASSERT_EQ(run.status, 200) << run.describe();
  const std::string id = run.json().value("run_id", "");
  for (const std::string bad :
       {"-1", "1e3", "0x10", "+5", "abc", "18446744073709551616", "99999999999999999999999"}) {
    Headers h = bearer(alpha_);
    h.emplace_back("Last-Event-ID", bad);
    auto r = request(port(), "GET", "/v1/runs/" + id + "/events", "", h);
    EXPECT_EQ(r.status, 400) << "'" << bad << "'\n" << r.describe();
    EXPECT_EQ(r.error_code(), "invalid_request");
  }
  // Past the end, or the largest id there is: an empty stream that ends.
  for (const std::string past : {"1000", "18446744073709551615"}) {
    Headers h = bearer(alpha_);
    h.emplace_back("Last-Event-ID", past);
    SseReader sse(port(), "GET", "/v1/runs/" + id + "/events", "", h);
    ASSERT_TRUE(sse.ok()) << sse.head().describe();
    EXPECT_TRUE(sse.drain(milliseconds(30000)).empty());
    EXPECT_TRUE(sse.ended());
  }
}

// Alpha's followers never read a big run; beta's requests are still answered, and the server's
// account of what followers hold stays within their buffers.
TEST_F(Battery3, Battery3FollowersStuckOnOneTenantDoNotStarveAnother) {
  constexpr std::size_t kBound = 16u << 10;
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request& r) {
    FakeLlm::Plan plan;
    if (r.last_user() != "big") return plan;
    plan.chunks.assign(1300, std::string(3000, 'z'));  // 3.9 MB twice: deltas, then run_end
    return plan;
  });
  ::setenv(kTokenEnv, kToken, 1);
  w_.write_config(ServeWorld::openai_provider(llm),
                  "  keys_file: " + (w_.data_dir / "serve-keys.json").string() +
                      "\n  stream:\n    buffer_bytes: " + std::to_string(kBound) +
                      "\n    slow_timeout_s: 1\n  metrics:\n    token_env: " + kTokenEnv + "\n");
  alpha_ = printed_key(w_.keys({"add", "alpha"}).out);
  beta_ = printed_key(w_.keys({"add", "beta"}).out);
  ASSERT_TRUE(w_.start());
  auto big = request(port(), "POST", "/v1/sessions/big/messages", message_body("big"),
                     bearer(alpha_), milliseconds(120000));
  ASSERT_EQ(big.status, 200) << big.describe();
  const std::string id = big.json().value("run_id", "");
  std::vector<std::unique_ptr<StuckFollower>> stuck;
  for (int i = 0; i < 10; ++i) {
    stuck.push_back(std::make_unique<StuckFollower>(port(), "GET", "/v1/runs/" + id + "/events", "",
                                                    bearer(alpha_)));
    ASSERT_TRUE(stuck.back()->ok());
  }
  for (int i = 0; i < 3; ++i) {
    auto r = request(port(), "POST", "/v1/sessions/b" + std::to_string(i) + "/messages",
                     message_body("hello"), bearer(beta_));
    EXPECT_EQ(r.status, 200) << r.describe();
  }
  ASSERT_TRUE(wait_metric(port(), kToken, "kernex_stream_slow_disconnects", [](double v) {
    return v >= 10;
  })) << w_.log();
  const double peak = scrape(port(), kToken, "kernex_stream_buffered_bytes_peak");
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, 10.0 * kBound);
}

// `kernex mcp serve` answers one line at a time and writes each answer before it reads the next:
// a client that floods requests and never reads stdout finds the server's stdin full (it stopped
// reading) while its memory stays where it was; every request is then answered once read.
TEST(Battery3FollowersMcp, ClientThatNeverReadsStdoutCannotGrowTheServer) {
  ::signal(SIGPIPE, SIG_IGN);  // a server that died shows as a failed write, not a dead test
  TempDir dir;
  const fs::path config = dir.write("kernex.yaml", "memory: none\n");
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  const std::string err = (dir.path() / "mcp.stderr").string();
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> args{KERNEX_CLI, "mcp", "serve", "--config", config.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto env_s = clean_environment({{"KERNEX_DATA_DIR", (dir.path() / "data").string()}});
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, KERNEX_CLI, &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  struct Reap {
    pid_t pid;
    int fds[2];
    ~Reap() {
      for (int fd : fds) ::close(fd);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{pid, {in[1], out[0]}};

  auto send_line = [&](const std::string& line) {
    return ::write(in[1], line.data(), line.size()) == static_cast<ssize_t>(line.size());
  };
  ASSERT_TRUE(send_line(
      Json{{"jsonrpc", "2.0"},
           {"id", 0},
           {"method", "initialize"},
           {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()}}}}
          .dump() +
      "\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"));
  // The initialize answer first: the server is up, and its size is the baseline.
  std::string got;
  char buf[65536];
  while (got.find('\n') == std::string::npos) {
    pollfd p{out[0], POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 60000), 0) << slurp(err);
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    ASSERT_GT(n, 0) << slurp(err);
    got.append(buf, static_cast<std::size_t>(n));
  }
  got.erase(0, got.find('\n') + 1);
  const std::uint64_t rss_before = rss_bytes(pid);

  // Requests until the server stops taking them (its stdin stays full), within a cap far past
  // what the pipes hold: a server that queued its answers in memory would take them all.
  ASSERT_EQ(::fcntl(in[1], F_SETFL, O_NONBLOCK), 0);
  std::size_t sent = 0, sent_bytes = 0;
  std::string pending;
  constexpr std::size_t kCap = 64u << 20;
  bool stopped = false;
  while (sent_bytes < kCap) {
    if (pending.empty())
      pending = "{\"jsonrpc\":\"2.0\",\"id\":" + std::to_string(++sent) + ",\"method\":\"ping\"}\n";
    const ssize_t n = ::write(in[1], pending.data(), pending.size());
    if (n > 0) {
      sent_bytes += static_cast<std::size_t>(n);
      pending.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    ASSERT_EQ(errno, EAGAIN);
    pollfd p{in[1], POLLOUT, 0};
    if (::poll(&p, 1, 3000) == 0) {  // no room for 3 s: it stopped reading
      stopped = true;
      break;
    }
  }
  ASSERT_TRUE(stopped) << "the server kept reading " << sent_bytes
                       << " bytes of requests while nobody read its answers";
  const std::uint64_t rss_stuck = rss_bytes(pid);
  EXPECT_LE(rss_stuck, rss_before + (16u << 20))
      << "resident memory grew from " << rss_before << " to " << rss_stuck;

  // Now read (on a thread, while the rest of the last line goes in): every request is answered,
  // in order.
  std::thread reader([&] {
    for (;;) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 60000) <= 0) break;
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
  });
  ::fcntl(in[1], F_SETFL, 0);
  const bool rest_sent = pending.empty() || send_line(pending);
  ::close(in[1]);
  reap.fds[0] = -1;
  reader.join();
  ASSERT_TRUE(rest_sent);
  std::istringstream lines(got);
  std::size_t answered = 0;
  for (std::string line; std::getline(lines, line);) {
    Json j = Json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    ASSERT_EQ(j.value("id", 0u), answered + 1) << line;
    ++answered;
  }
  EXPECT_EQ(answered, sent);
}

}  // namespace
