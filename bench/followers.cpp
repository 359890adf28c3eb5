// followers: issue 32's bounded-followers figure. One `kernex serve` (this build's bin/kernex),
// two tenants. Tenant alpha has a finished run with a ~10 MB event log; N followers (default 200)
// GET its /events and never read a byte. Tenant beta meanwhile sends short messages.
//   - RSS: the server's resident set before the followers and once every follower holds a full
//     buffer (the server's own account, kernex_stream_buffered_bytes), beside N x the bound
//     (serve.stream.buffer_bytes).
//   - beta's latency (POST /v1/sessions/S/messages, p50/p99 of R requests) beside the same
//     requests to the same server before the followers came: the idle baseline of this run.
// The harness is tests/serve's (serve_harness.hpp, follower_support.hpp).
//   followers [N] [BUFFER_BYTES] [REQUESTS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include <sys/resource.h>
#include "bench_util.hpp"
#include "follower_support.hpp"
#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

constexpr const char* kTokenEnv = "KERNEX_FOLLOWERS_BENCH_TOKEN";
constexpr const char* kToken = "followers-bench-metrics-token-8d2f";

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// R short messages from beta, one new session each: their latencies in ms.
std::vector<double> probe(int port, const std::string& key, int requests, const std::string& tag) {
  std::vector<double> ms;
  for (int i = 0; i < requests; ++i) {
    const auto t0 = Clock::now();
    auto r = request(port, "POST", "/v1/sessions/" + tag + std::to_string(i) + "/messages",
                     message_body("hello"), bearer(key));
    if (r.status != 200) {
      std::fprintf(stderr, "followers: beta's request failed: %s\n", r.describe().c_str());
      std::exit(1);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

void raise_fd_limit() {
  struct rlimit fds {};
  ::getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = fds.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &fds);
}

// "big": 5 MB of text in 4000 deltas, then again in run_end: a ~10 MB event log.
void answer_big(FakeLlm& llm) {
  llm.set_responder([](const FakeLlm::Request& r) {
    FakeLlm::Plan plan;
    if (r.last_user() != "big") return plan;
    plan.chunks.clear();
    for (int i = 0; i < 4000; ++i) plan.chunks.push_back(std::string(1250, 'a' + i % 26));
    return plan;
  });
}

// The answer (5 MB) is saved as one message: over the sqlite store's default cap of 4 MiB.
std::filesystem::path write_config(ServeWorld& w, FakeLlm& llm, std::size_t bound) {
  return w.dir.write(
      "kernex.yaml",
      ServeWorld::openai_provider(llm) +
          "memory:\n  name: sqlite\n  options:\n    max_message_bytes: 16777216\ndata_dir: " +
          w.data_dir.string() +
          "\nserve:\n  keys_file: " + (w.data_dir / "serve-keys.json").string() +
          "\n  max_connections: 100000\n  stream:\n    buffer_bytes: " + std::to_string(bound) +
          "\n    slow_timeout_s: 3600\n  metrics:\n    token_env: " + kTokenEnv + "\n");
}

// alpha's finished run with the big event log, and the log's size as a follower reads it.
struct EventLog {
  std::string run;
  std::size_t bytes = 0, events = 0;
};

std::optional<EventLog> big_run(int port, const std::string& alpha) {
  auto big = request(port, "POST", "/v1/sessions/big/messages", message_body("big"), bearer(alpha),
                     milliseconds(600000));
  if (big.status != 200) {
    std::fprintf(stderr, "followers: the big run failed: %s\n", big.describe().c_str());
    return std::nullopt;
  }
  EventLog log;
  log.run = big.json().value("run_id", "");
  SseReader whole(port, "GET", "/v1/runs/" + log.run + "/events", "", bearer(alpha));
  for (const auto& e : whole.drain(milliseconds(600000))) {
    log.bytes += e.data.size() + e.event.size() + e.id.size() + 20;
    ++log.events;
  }
  return log;
}

// N followers of the run that never read, each once holding a full buffer (within one event of
// it, by the server's own account). Empty: one could not connect or the buffers never filled.
std::vector<std::unique_ptr<StuckFollower>> stuck_followers(int port, const std::string& alpha,
                                                            const std::string& run, int n,
                                                            std::size_t bound) {
  std::vector<std::unique_ptr<StuckFollower>> stuck;
  for (int i = 0; i < n; ++i) {
    stuck.push_back(std::make_unique<StuckFollower>(port, "GET", "/v1/runs/" + run + "/events", "",
                                                    bearer(alpha)));
    if (!stuck.back()->ok()) {
      std::fprintf(stderr, "followers: follower %d could not connect\n", i);
      return {};
    }
  }
  const double full = 0.9 * static_cast<double>(n) * static_cast<double>(bound);
  if (!wait_metric(
          port, kToken, "kernex_stream_buffered_bytes", [&](double v) { return v >= full; },
          milliseconds(600000))) {
    std::fprintf(stderr, "followers: buffers never filled (%.0f bytes held)\n",
                 scrape(port, kToken, "kernex_stream_buffered_bytes"));
    return {};
  }
  return stuck;
}

struct Measured {
  int n = 0, requests = 0;
  std::size_t bound = 0;
  EventLog log;
  std::uint64_t rss_idle = 0, rss_loaded = 0;
  double held = 0, followers = 0;
  std::vector<double> idle, loaded;
};

void print(const Measured& m) {
  const double mib = 1024.0 * 1024.0;
  const double grown = (static_cast<double>(m.rss_loaded) - static_cast<double>(m.rss_idle)) / mib;
  const double allowed = static_cast<double>(m.n) * static_cast<double>(m.bound) / mib;
  std::printf(
      "followers: %d never-reading followers of a %.1f MB event log (%zu events), "
      "serve.stream.buffer_bytes %zu\n",
      m.n, static_cast<double>(m.log.bytes) / 1e6, m.log.events, m.bound);
  std::printf(
      "  server RSS idle %.1f MiB, with the followers %.1f MiB: +%.1f MiB "
      "(bound %d x %.0f KiB = %.1f MiB) %s\n",
      static_cast<double>(m.rss_idle) / mib, static_cast<double>(m.rss_loaded) / mib, grown, m.n,
      static_cast<double>(m.bound) / 1024.0, allowed, grown <= allowed ? "OK" : "OVER");
  std::printf("  held by followers (server's account): %.1f MiB in %.0f streams\n", m.held / mib,
              m.followers);
  const double p99_idle = percentile(m.idle, 0.99), p99_loaded = percentile(m.loaded, 0.99);
  std::printf(
      "  beta's POST /messages, %d requests: idle p50 %.2f ms p99 %.2f ms; with the "
      "followers p50 %.2f ms p99 %.2f ms (%.2fx) %s\n",
      m.requests, percentile(m.idle, 0.5), p99_idle, percentile(m.loaded, 0.5), p99_loaded,
      p99_loaded / p99_idle, p99_loaded <= 2 * p99_idle ? "OK" : "OVER 2x");
}

}  // namespace

// The server with two tenants -> alpha's big run -> beta's idle latency and the server's RSS ->
// N stuck followers of alpha's run, buffers full, server idle -> beta's latency and RSS again.
int main(int argc, char** argv) {
  Measured m;
  m.n = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  m.bound = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (256u << 10);
  m.requests = argc > 3 ? std::max(10, std::atoi(argv[3])) : 200;
  ::setenv(kTokenEnv, kToken, 1);
  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  FakeLlm llm;
  answer_big(llm);
  ServeWorld w;
  w.config = write_config(w, llm, m.bound);
  const std::string alpha = printed_key(w.keys({"add", "alpha"}).out);
  const std::string beta = printed_key(w.keys({"add", "beta"}).out);
  if (!w.start()) return 1;
  const int port = w.port();
  const pid_t pid = w.server.pid();
  auto log = big_run(port, alpha);
  if (!log) return 1;
  m.log = *log;

  (void)probe(port, beta, 20, "warm");
  m.idle = probe(port, beta, m.requests, "idle");
  m.rss_idle = rss_bytes(pid);
  const auto stuck = stuck_followers(port, alpha, m.log.run, m.n, m.bound);
  if (stuck.empty()) return 1;
  kernex::bench::wait_until_idle(pid);
  const std::uint64_t rss_stuck = rss_bytes(pid);
  m.loaded = probe(port, beta, m.requests, "busy");
  m.rss_loaded = std::max(rss_stuck, rss_bytes(pid));
  m.held = scrape(port, kToken, "kernex_stream_buffered_bytes");
  m.followers = scrape(port, kToken, "kernex_stream_followers");
  print(m);
  return 0;
}
