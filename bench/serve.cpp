// `kernex serve` under load, each figure beside a baseline measured in the same run. Every phase
// starts its own `kernex serve` (this build's bin/kernex, a config in a fresh work dir), so one
// phase's memory never counts in another's.
//   stream  N sessions (default 1000) each POST one message with stream:true at once; the model is
//           a fake OpenAI-compatible LLM in this process streaming 20 chunks over 2 s per call.
//           Time to first text_delta seen by the client minus the LLM's own time to first chunk
//           for that very call (p50/p99), runs ending with run_end, the server's peak RSS.
//           Baselines: the same N streams straight to the fake LLM (what this harness adds by
//           itself), the server's RSS before the load, and the same burst through a bare proxy
//           (bare_proxy.hpp: HTTP in, kernex's own model request out, chunks relayed, nothing
//           else), the floor any server that forwards a burst has on this machine and harness.
//   idle    IDLE sessions (default 10 000) with one short non-streaming exchange each (replay
//           provider): RSS growth per session. Baseline: the server's RSS before them.
//   rps     non-streaming messages (replay provider, one session per request so none is busy)
//           from C keep-alive connections (default 32) for S seconds, beside a bare Beast server
//           answering a JSON body of the same size with as many threads.
//   pool    (only when named) the run pool beside a thread per run (KERNEX_SERVE_THREAD_PER_RUN,
//           the old path): threads made per run, req/s (replay), a burst of N streams' TTFT p99
//           and peak RSS, each mode on servers of its own.
//   fibers  (only when named) a burst of N streams on runs that wait on the model on fibers beside
//           runs that hold their pool thread while they wait (KERNEX_SERVE_NO_FIBERS): the
//           server's threads at the peak (sampled), streams completed, peak RSS, TTFT p99.
//   cancel  runs whose model calls a skill toolbox that sleeps; once the tool process exists,
//           POST /v1/runs/{id}/cancel and time until run_end (outcome cancelled) has arrived and
//           the tool process is gone. Baseline: this process killing and reaping the same
//           `sleep` it started itself.
// Usage: serve [--phases stream,idle,rps,cancel,pool,fibers] [--streams N] [--idle N]
//              [--rps-seconds S] [--connections C] [--cancel-runs N]
//              [--memory sqlite|volatile] [--threads T] [--kernex PATH] [--lean] [--sql-cpu]
//              [--chunks N] (the stream phase's chunks per answer: 1 leaves the burst's run
//              starts alone) [--interval MS] (the stream phase's time to each chunk, the first
//              included: longer than the burst leaves its starts alone too) [--run-threads N]
//              (serve.run_threads) [--warm-burst] (the stream phase measures the server's second
//              burst, of as many new sessions as the first: what a server that has met one before
//              gives, its heap grown and its threads made)
//        serve --harness [--streams N]   the fake LLM, bare server and client alone (no kernex)
#include <algorithm>
#include <cstdlib>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "bare_json_server.hpp"
#include "bare_proxy.hpp"
#include "bare_run_storage.hpp"
#include "env_guard.hpp"
#include "bench_util.hpp"
#include "fake_llm.hpp"
#include "kernex/json.hpp"
#include "serve_load.hpp"
#include "serve_process.hpp"

namespace {

namespace fs = std::filesystem;
namespace kb = kernex::bench;
using kb::Clock;
using kernex::Json;
using namespace std::chrono_literals;
[[noreturn]] void die(const std::string& what) { kb::die("serve", what); }

struct Args {
  std::set<std::string> phases = {"stream", "idle", "rps", "cancel"};
  int streams = 1000;
  int idle = 10000;
  int rps_seconds = 5;
  int connections = 32;
  int cancel_runs = 50;
  std::string memory = "sqlite";
  int threads = 0;
  fs::path kernex = KERNEX_BENCH_KERNEX;
  bool harness = false;
  // --lean: no toolboxes and no trajectory files, to see what they cost a burst of new runs.
  bool lean = false;
  // --sql-cpu: the rps phase's server counts the CPU its threads spend inside SQLite statements
  // (bench/sql_cpu_preload.cpp, LD_PRELOADed), printed per run beside the server's whole CPU.
  bool sql_cpu = false;
  // --chunks: content chunks per streamed answer of the stream phase's fake LLM (default 20).
  int chunks = 20;
  int interval_ms = 100;    // --interval: the fake LLM's time to each chunk
  bool warm_burst = false;  // --warm-burst: the measured burst is the server's second
  int run_threads = 0;      // serve.run_threads (0: the server's default)
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (kb::ArgReader in("serve", argc, argv); in.next();) {
    const std::string& arg = in.flag();
    const auto value = [&in] { return in.value(); };
    if (arg == "--phases") {
      a.phases.clear();
      std::stringstream ss(value());
      for (std::string p; std::getline(ss, p, ',');) a.phases.insert(p);
    } else if (arg == "--streams")
      a.streams = std::stoi(value());
    else if (arg == "--idle")
      a.idle = std::stoi(value());
    else if (arg == "--rps-seconds")
      a.rps_seconds = std::stoi(value());
    else if (arg == "--connections")
      a.connections = std::stoi(value());
    else if (arg == "--cancel-runs")
      a.cancel_runs = std::stoi(value());
    else if (arg == "--memory")
      a.memory = value();
    else if (arg == "--threads")
      a.threads = std::stoi(value());
    else if (arg == "--kernex")
      a.kernex = value();
    else if (arg == "--harness")
      a.harness = true;
    else if (arg == "--lean")
      a.lean = true;
    else if (arg == "--sql-cpu")
      a.sql_cpu = true;
    else if (arg == "--chunks")
      a.chunks = std::stoi(value());
    else if (arg == "--interval")
      a.interval_ms = std::stoi(value());
    else if (arg == "--warm-burst")
      a.warm_burst = true;
    else if (arg == "--run-threads")
      a.run_threads = std::stoi(value());
    else
      die("unknown argument " + arg + " (see the comment atop bench/serve.cpp)");
  }
  return a;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

// ---- the table ----------------------------------------------------------------------------

struct Row {
  std::string figure, measured, baseline, target;
  bool pass;
};
std::vector<Row> g_rows;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void row(std::string figure, std::string measured, std::string baseline, std::string target,
         bool pass) {
  std::printf("  %-44s %-16s baseline %-18s target %-14s %s\n", figure.c_str(), measured.c_str(),
              baseline.c_str(), target.c_str(), pass ? "pass" : "FAIL");
  std::fflush(stdout);
  g_rows.push_back(
      {std::move(figure), std::move(measured), std::move(baseline), std::move(target), pass});
}

void print_table() {
  std::printf("\n| figure | measured | baseline (same run) | target | |\n|---|---|---|---|---|\n");
  for (const auto& r : g_rows) {
    std::printf("| %s | %s | %s | %s | %s |\n", r.figure.c_str(), r.measured.c_str(),
                r.baseline.c_str(), r.target.c_str(), r.pass ? "pass" : "FAIL");
  }
}

// ---- work dir and configs -------------------------------------------------------------------

// Under the build tree, not /tmp: a skill below a world-writable directory loads only once trusted.
fs::path make_work_dir() {
  std::string tmpl = (fs::path(KERNEX_BENCH_WORK_DIR) / "serve-bench-XXXXXX").string();
  fs::create_directories(KERNEX_BENCH_WORK_DIR);
  if (::mkdtemp(tmpl.data()) == nullptr) die("cannot create a work dir in " KERNEX_BENCH_WORK_DIR);
  return fs::canonical(tmpl);
}

void write_file(const fs::path& path, const std::string& text) {
  kb::write_file("serve", path, text);
}

// kernex.yaml for one phase. JSON is YAML, so the config is built as JSON.
fs::path write_config(const fs::path& dir, const Args& a, Json provider,
                      Json extra = Json::object()) {
  Json config = {{"data_dir", (dir / "data").string()},
                 {"provider", std::move(provider)},
                 {"memory", a.memory},
                 {"serve",
                  {{"threads", a.threads},
                   {"run_threads", a.run_threads},
                   {"max_connections", 20000},
                   {"limits", {{"default", {{"concurrent_runs", 1000000}}}}}}}};
  if (a.lean) config.merge_patch({{"toolboxes", Json::array()}, {"trajectories", false}});
  config.merge_patch(extra);
  write_file(dir / "kernex.yaml", config.dump(2) + "\n");
  return dir / "kernex.yaml";
}

Json replay_provider(const fs::path& dir, const std::string& line, int lines) {
  std::string script;
  for (int i = 0; i < lines; ++i) script += line + "\n";
  write_file(dir / "script.jsonl", script);
  return {{"name", "replay"}, {"options", {{"script", (dir / "script.jsonl").string()}}}};
}

const std::string kOkLine = R"({"text":"ok","usage":{"input_tokens":5,"output_tokens":1}})";

kb::ServeProcess start_serve(const Args& a, const fs::path& dir, const fs::path& config) {
  return kb::ServeProcess(a.kernex, config, dir / "serve.log");
}

int server_threads(const Args& a) {
  return a.threads > 0 ? a.threads
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// ---- stream ---------------------------------------------------------------------------------

struct Ttft {
  std::vector<double> overhead_ms, llm_ms;
  int ended = 0, failed = 0;
  std::string first_error;
};

// The server's threads now (/proc/PID/status), 0 when unreadable.
long threads_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stol(line.substr(8));
  }
  return 0;
}

// The CPU the server and this process (the fake LLM and the client) have used, sampled every 2 ms
// from its start until stopped: what a burst cost by the time most streams had their first text.
class CpuTrace {
 public:
  struct Sample {
    Clock::time_point at;
    std::uint64_t server, self;  // clock ticks since the start
    long threads;                // the server's, then
  };
  explicit CpuTrace(pid_t server)
      : server_(server),
        base_{Clock::now(), kb::cpu_ticks(server), kb::cpu_ticks(::getpid()), threads_of(server)} {
    samples_.push_back({base_.at, 0, 0, base_.threads});  // never empty, however soon it stops
    thread_ = std::thread([this] {
      while (!stop_) {
        samples_.push_back({Clock::now(), kb::cpu_ticks(server_) - base_.server,
                            kb::cpu_ticks(::getpid()) - base_.self, threads_of(server_)});
        std::this_thread::sleep_for(2ms);  // a sampling period, not a wait for anything
      }
    });
  }
  ~CpuTrace() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // The first sample at or after `at` (the last one if none is): CPU used by then, in ms.
  std::pair<double, double> used_by(Clock::time_point at) const {
    const double tick_ms = 1e3 / static_cast<double>(::sysconf(_SC_CLK_TCK));
    auto it =
        std::find_if(samples_.begin(), samples_.end(), [&](const Sample& s) { return s.at >= at; });
    if (it == samples_.end()) it = std::prev(samples_.end());
    return {static_cast<double>(it->server) * tick_ms, static_cast<double>(it->self) * tick_ms};
  }
  std::pair<double, double> total() const { return used_by(Clock::time_point::max()); }
  // The most threads the server had in any sample up to `at`.
  long peak_threads_by(Clock::time_point at) const {
    long most = 0;
    for (const auto& s : samples_)
      if (s.at <= at) most = std::max(most, s.threads);
    return most;
  }

 private:
  pid_t server_;
  Sample base_;
  std::atomic<bool> stop_{false};
  std::vector<Sample> samples_;
  std::thread thread_;
};

// What the burst's CPU says about its TTFT: by the time 99 % of the streams had their first text,
// the CPU the server and this process had used, beside the wall time. With both CPUs busy the
// whole time, the p99 is the time those run starts (and the harness) need on this machine: the
// server's CPU per run start sets it, not a wait.
void report_burst_cpu(const CpuTrace& cpu, const std::vector<kb::SseStream>& streams,
                      Clock::time_point t0) {
  std::vector<Clock::time_point> firsts;
  for (const auto& s : streams)
    if (s.got_text) firsts.push_back(s.first_text);
  if (firsts.empty()) return;
  std::sort(firsts.begin(), firsts.end());
  const auto at = firsts[std::min(firsts.size() - 1, firsts.size() * 99 / 100)];
  const auto [server_ms, self_ms] = cpu.used_by(at);
  const auto [server_all, self_all] = cpu.total();
  const double wall = kb::ms(at - t0),
               cpus = static_cast<double>(std::thread::hardware_concurrency());
  std::printf(
      "  by 99 %% of first texts (%.0f ms after the burst began): server CPU %.0f ms, this process "
      "(fake LLM + client) %.0f ms: %.0f %% of %.0f CPUs busy; the server's CPU alone needs %.0f "
      "ms "
      "on them (%.0f us a run started)\n",
      wall, server_ms, self_ms, 100 * (server_ms + self_ms) / (wall * cpus), cpus, server_ms / cpus,
      1e3 * server_ms / (0.99 * static_cast<double>(streams.size())));
  std::printf("  whole burst: server CPU %.0f ms (%.0f us a run), this process %.0f ms\n",
              server_all, 1e3 * server_all / static_cast<double>(streams.size()), self_all);
}

// The burst's run starts alone: the CPU used by the time the last of its model requests had reached
// the fake LLM, the server's and this process's (the client sending, the fake LLM reading kernex's
// requests). With --interval longer than the burst, no chunk has been sent by then, so these are
// the starts' own costs; the second is what the harness takes of the 2 CPUs whatever the server.
void report_start_cpu(const CpuTrace& cpu, const std::vector<std::string>& messages,
                      const kb::FakeLlm& llm, Clock::time_point t0) {
  std::optional<Clock::time_point> last;
  for (const auto& m : messages)
    if (const auto call = llm.call_for(m); call && (!last || call->received > *last))
      last = call->received;
  if (!last) return;
  const auto [server_ms, self_ms] = cpu.used_by(*last);
  const double n = static_cast<double>(messages.size());
  std::printf(
      "  by the last model request (%.0f ms after the burst began): server CPU %.0f ms (%.0f us a "
      "run started), this process %.0f ms (%.0f us a run); server threads at most %ld by then, "
      "%ld in the whole burst\n",
      kb::ms(*last - t0), server_ms, 1e3 * server_ms / n, self_ms, 1e3 * self_ms / n,
      cpu.peak_threads_by(*last), cpu.peak_threads_by(Clock::time_point::max()));
}

// Each stream's client-side time to first text minus the fake LLM's own for the same call.
Ttft ttft_of(const std::vector<kb::SseStream>& streams, const std::vector<std::string>& messages,
             const kb::FakeLlm& llm, const std::string& end_outcome) {
  Ttft t;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const auto& s = streams[i];
    const bool ok = s.got_end && s.error.empty() && s.outcome == end_outcome;
    ok ? ++t.ended : ++t.failed;
    if (!ok && t.first_error.empty())
      t.first_error = s.error.empty() ? "outcome " + s.outcome : s.error;
    const auto call = llm.call_for(messages[i]);
    if (!s.got_text || !call) continue;
    const double own = kb::ms(call->first_chunk_sent - call->received);
    t.llm_ms.push_back(own);
    t.overhead_ms.push_back(kb::ms(s.first_text - s.sent) - own);
  }
  return t;
}

std::vector<kb::SseStream> stream_requests(int n, const std::string& prefix,
                                           std::vector<std::string>& messages, bool openai_direct) {
  std::vector<kb::SseStream> streams(static_cast<std::size_t>(n));
  messages.clear();
  for (int i = 0; i < n; ++i) {
    messages.push_back(prefix + " " + std::to_string(i));
    if (openai_direct) {
      streams[i].target = "/v1/chat/completions";
      streams[i].body = Json{{"model", "fake"},
                             {"stream", true},
                             {"messages", {{{"role", "user"}, {"content", messages.back()}}}}}
                            .dump();
    } else {
      streams[i].target = "/v1/sessions/" + prefix + "-" + std::to_string(i) + "/messages";
      streams[i].body = Json{{"message", messages.back()}, {"stream", true}}.dump();
    }
  }
  return streams;
}

// The harness alone: N streams straight to the fake LLM. Its overhead is this client's own floor.
Ttft harness_floor(const Args& a, kb::FakeLlm& llm) {
  std::vector<std::string> messages;
  auto streams = stream_requests(a.streams, "floor", messages, true);
  kb::LoadClient(llm.port()).streams(streams, 120s);
  return ttft_of(streams, messages, llm, "done");
}

// One burst of N new sessions against `server` (kernex, or the bare proxy): its streams' TTFT
// above the LLM's own, with what its CPU says printed (report_burst_cpu, report_start_cpu).
Ttft burst(const Args& a, pid_t server, unsigned short port, const kb::FakeLlm& llm,
           const std::string& prefix) {
  std::vector<std::string> messages;
  auto streams = stream_requests(a.streams, prefix, messages, false);
  // Each burst meets a disk with nothing of an earlier one's left to write back: the commits its
  // heads wait on are its own fsyncs, not the previous server's files.
  ::sync();
  CpuTrace cpu(server);
  const auto t0 = Clock::now();
  kb::LoadClient(port).streams(streams, 300s);
  const double wall = kb::ms(Clock::now() - t0);
  cpu.stop();
  const Ttft t = ttft_of(streams, messages, llm, "end_turn");
  std::printf(
      "  all streams done in %.0f ms; LLM's own TTFT p50 %.1f ms p99 %.1f ms%s%s\n", wall,
      percentile(t.llm_ms, 0.5), percentile(t.llm_ms, 0.99),
      t.first_error.empty() ? "" : "; first failure: ", t.first_error.substr(0, 400).c_str());
  report_burst_cpu(cpu, streams, t0);
  report_start_cpu(cpu, messages, llm, t0);
  return t;
}

// The same burst through the bare proxy (bare_proxy.hpp), a child process like kernex serve so
// its CPU is counted apart, sending the model the request kernex sent it. Durable: the floor of a
// recorded run (bare_run_storage.hpp), its reads against kernex's memory database of this phase.
Ttft proxy_burst(const Args& a, const fs::path& dir, const kb::FakeLlm& llm, bool durable) {
  const std::string upstream = llm.first_stream_body();
  if (upstream.empty()) die("kernex sent the fake LLM no streamed request to copy");
  write_file(dir / "upstream.json", upstream);
  std::vector<std::string> args = {"--bare-proxy", std::to_string(llm.port())};
  if (durable) {
    std::printf(
        "  durable floor (the bare proxy, plus per run the seven context reads of kernex's SQLite "
        "memory for a new session in one read transaction, and the run's row in one batched "
        "commit, "
        "synchronous=FULL, before the head):\n");
    args.insert(args.end(), {"--durable", (dir / "data" / "memory.db").string(),
                             (dir / "floor-runs.db").string()});
  } else {
    std::printf(
        "  bare proxy (the floor: HTTP in, the same %zu-byte model request out, chunks "
        "relayed; no storage, no context):\n",
        upstream.size());
  }
  kb::ServeProcess proxy(fs::read_symlink("/proc/self/exe"), dir / "upstream.json",
                         dir / (durable ? "floor.log" : "proxy.log"), args);
  return burst(a, proxy.pid(), proxy.port(), llm, durable ? "floor" : "proxy");
}

void phase_stream(const Args& a, const fs::path& work) {
  std::printf("stream: %d concurrent streaming runs, fake LLM: %d chunks %d ms apart per call\n",
              a.streams, a.chunks, a.interval_ms);
  kb::FakeLlm llm(
      kb::FakeLlmOptions{.chunks = a.chunks, .interval = std::chrono::milliseconds(a.interval_ms)});
  const Ttft floor = harness_floor(a, llm);
  if (floor.ended != a.streams) die("the harness alone lost streams: " + floor.first_error);
  llm.clear();  // first_stream_body() is kernex's from here on

  const fs::path dir = work / "stream";
  const Json provider = {
      {"name", "openai"},
      {"options", {{"base_url", llm.base_url()}, {"api_key", "dummy"}, {"model", "fake"}}}};
  std::optional<kb::ServeProcess> serve;
  serve.emplace(a.kernex, write_config(dir, a, provider), dir / "serve.log");
  const long rss_before = serve->rss_kib();
  if (a.warm_burst) {  // a server that has met a burst before: its heap and threads are there
    std::vector<std::string> messages;
    auto warm = stream_requests(a.streams, "warm", messages, false);
    kb::LoadClient(serve->port()).streams(warm, 300s);
    // Its clients have their run_end; the runs' tails (memory saves, the rows' last commits) may
    // still be running: the measured burst starts once the server is idle.
    kb::wait_until_idle(serve->pid());
  }
  const Ttft t = burst(a, serve->pid(), serve->port(), llm, "hi");
  const long peak = serve->peak_rss_kib();
  serve.reset();  // its runs' tails must not share the CPUs with the proxy's burst
  const Ttft proxy = proxy_burst(a, dir, llm, false);
  const Ttft durable = proxy_burst(a, dir, llm, true);
  row("streaming runs completed (run_end)",
      std::to_string(t.ended) + "/" + std::to_string(a.streams),
      std::to_string(floor.ended) + "/" + std::to_string(a.streams) + " direct", "all",
      t.ended == a.streams);
  const double p99 = percentile(t.overhead_ms, 0.99);
  row("TTFT above the LLM's own, p50", fmt("%.2f ms", percentile(t.overhead_ms, 0.5)),
      fmt("%.2f ms harness", percentile(floor.overhead_ms, 0.5)), "-", true);
  row("TTFT above the LLM's own, p99", fmt("%.2f ms", p99),
      fmt("%.2f ms harness", percentile(floor.overhead_ms, 0.99)), "<= 5 ms",
      p99 <= 5.0 && t.overhead_ms.size() == static_cast<std::size_t>(a.streams));
  row("TTFT above the LLM's own, p99, bare proxy",
      fmt("%.2f ms", percentile(proxy.overhead_ms, 0.99)),
      fmt("%.2f ms harness", percentile(floor.overhead_ms, 0.99)), "all relayed",
      proxy.ended == a.streams);
  row("TTFT above the LLM's own, p99, durable floor",
      fmt("%.2f ms", percentile(durable.overhead_ms, 0.99)),
      fmt("%.2f ms harness", percentile(floor.overhead_ms, 0.99)), "all relayed",
      durable.ended == a.streams);
  row("server peak RSS (VmHWM)", fmt("%.0f MB", peak / 1024.0),
      fmt("%.0f MB at start", rss_before / 1024.0), "<= 1024 MB", peak <= 1024 * 1024);
}

// ---- idle -----------------------------------------------------------------------------------

// `count` non-streaming messages, sessions prefix-0..count-1, from `connections` connections.
kb::HammerResult send_messages(unsigned short port, int count, const std::string& prefix,
                               int connections) {
  return kb::LoadClient(port).hammer(
      connections, 600s, [&](std::size_t i) -> std::pair<std::string, std::string> {
        if (i >= static_cast<std::size_t>(count)) return {};
        return {"/v1/sessions/" + prefix + "-" + std::to_string(i) + "/messages",
                R"({"message":"hi"})"};
      });
}

void phase_idle(const Args& a, const fs::path& work) {
  std::printf("idle: %d sessions with one short exchange each (replay provider)\n", a.idle);
  const fs::path dir = work / "idle";
  const int warmup = 200;
  // No heap made present ahead (cli/serve_command.cpp): the sessions would grow into memory
  // already counted before them, and RSS growth would hide what they cost.
  kernex::test::EnvGuard env;
  env.set("KERNEX_HEAP_RESERVE_MIB", "0");
  auto serve = start_serve(
      a, dir, write_config(dir, a, replay_provider(dir, kOkLine, a.idle + warmup + 10)));
  auto warm = send_messages(serve.port(), warmup, "warm", 16);
  if (warm.ok != static_cast<std::size_t>(warmup))
    die("warm-up messages failed: " + warm.first_failure);
  const long before = serve.rss_kib();
  auto r = send_messages(serve.port(), a.idle, "idle", 16);
  if (r.ok != static_cast<std::size_t>(a.idle))
    die("idle-session messages failed: " + r.first_failure);
  const long after = serve.rss_kib();
  const double per = (after - before) * 1024.0 / a.idle;
  std::printf("  RSS %.1f MB -> %.1f MB (%.1f s for the %d exchanges)\n", before / 1024.0,
              after / 1024.0, r.seconds, a.idle);
  row("RSS per idle session", fmt("%.1f KB", per / 1024.0),
      fmt("%.0f MB server before", before / 1024.0), "<= 50 KB", per <= 50 * 1024.0);
}

// ---- rps ------------------------------------------------------------------------------------

// The server's CPU inside SQLite statements so far (ns, statements), from the counters file
// bench/sql_cpu_preload.cpp maps in it; zeros when it has none.
std::pair<std::uint64_t, std::uint64_t> sql_cpu(const fs::path& counters) {
  std::uint64_t v[2] = {0, 0};
  std::ifstream in(counters, std::ios::binary);
  in.read(reinterpret_cast<char*>(v), sizeof v);
  return {v[0], v[1]};
}

// Starts the rps phase's server, with the SQL CPU counter preloaded when asked (beside whatever
// LD_PRELOAD this bench was given, jemalloc say).
kb::ServeProcess start_rps_serve(const Args& a, const fs::path& dir, const fs::path& config,
                                 const fs::path& counters) {
  kernex::test::EnvGuard env;  // for the child only: LD_PRELOAD matters to a new program
  if (a.sql_cpu) {
    const char* given = std::getenv("LD_PRELOAD");
    std::string preload = KERNEX_BENCH_SQL_CPU_LIB;
    if (given != nullptr && *given != '\0') preload += std::string(":") + given;
    env.set("LD_PRELOAD", preload);
    env.set("KERNEX_BENCH_SQL_CPU", counters.string());
  }
  return start_serve(a, dir, config);
}

void phase_rps(const Args& a, const fs::path& work) {
  const auto duration = std::chrono::milliseconds(a.rps_seconds * 1000);
  std::printf(
      "rps: non-streaming messages, %d keep-alive connections, %d s each, %d server threads\n",
      a.connections, a.rps_seconds, server_threads(a));
  const fs::path dir = work / "rps";
  const fs::path counters = dir / "sql-cpu";
  auto serve = start_rps_serve(a, dir, write_config(dir, a, replay_provider(dir, kOkLine, 200000)),
                               counters);
  kb::LoadClient client(serve.port());
  const auto probe = client.request("POST", "/v1/sessions/probe/messages", R"({"message":"hi"})");
  if (probe.status != 200)
    die("a non-streaming message failed: HTTP " + std::to_string(probe.status) + " " + probe.body);

  // The baseline answers a body of the same size, padded JSON.
  std::string body = R"({"pad":""})";
  body.insert(
      body.size() - 2,
      std::string(probe.body.size() > body.size() ? probe.body.size() - body.size() : 0, 'x'));
  kb::BareJsonServer bare(body, server_threads(a));
  const auto base = kb::LoadClient(bare.port()).hammer(a.connections, duration, [](std::size_t i) {
    return std::pair<std::string, std::string>{"/v1/sessions/b-" + std::to_string(i) + "/messages",
                                               R"({"message":"hi"})"};
  });
  // Both share the machine's cores: the server's CPU and this client's, per run, say what a run
  // costs apart from the client's own share.
  const auto server_before = kb::cpu_ticks(serve.pid()), client_before = kb::cpu_ticks(::getpid());
  const auto sql_before = sql_cpu(counters);
  const auto r = client.hammer(a.connections, duration, [](std::size_t i) {
    return std::pair<std::string, std::string>{"/v1/sessions/r-" + std::to_string(i) + "/messages",
                                               R"({"message":"hi"})"};
  });
  const double tick_us = 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double runs = static_cast<double>(std::max<std::size_t>(r.ok, 1));
  const double server_us =
      static_cast<double>(kb::cpu_ticks(serve.pid()) - server_before) * tick_us;
  const double client_us = static_cast<double>(kb::cpu_ticks(::getpid()) - client_before) * tick_us;
  const double rps = r.ok / r.seconds, base_rps = base.ok / base.seconds;
  std::printf("  reply %zu bytes; kernex %zu ok %zu failed%s%s; bare %zu ok\n", probe.body.size(),
              r.ok, r.failed, r.first_failure.empty() ? "" : ", first: ", r.first_failure.c_str(),
              base.ok);
  std::printf("  CPU per run: server %.0f us, this client %.0f us (%.2f of %.1f s busy)\n",
              server_us / runs, client_us / runs, (server_us + client_us) / 1e6, r.seconds);
  if (a.sql_cpu) {
    const auto sql_after = sql_cpu(counters);
    if (sql_after.second == sql_before.second)
      die("--sql-cpu: the server counted no SQLite statement during the phase (" +
          counters.string() + " is not bench/sql_cpu_preload.cpp's, or it was not preloaded)");
    const double sql_us = static_cast<double>(sql_after.first - sql_before.first) / 1e3 / runs;
    std::printf(
        "  of the server's: inside SQLite statements %.0f us a run (%.1f statements a run);"
        " on %u CPUs that alone allows at most %.0f req/s\n",
        sql_us, static_cast<double>(sql_after.second - sql_before.second) / runs,
        std::thread::hardware_concurrency(),
        sql_us > 0 ? std::thread::hardware_concurrency() * 1e6 / sql_us : 0.0);
  }
  row("non-streaming requests/s (replay)", fmt("%.0f req/s", rps),
      fmt("%.0f req/s bare Beast", base_rps), ">= 50 % of bare",
      r.failed == 0 && rps >= 0.5 * base_rps);
  row("  ratio to bare", fmt("%.2f", rps / base_rps), "1.00", ">= 0.50", rps >= 0.5 * base_rps);
}

// ---- pool -------------------------------------------------------------------------------------

// "serve: N run executions on M threads made (...)", which the server logs when it stops.
double threads_per_run(const fs::path& log) {
  std::ifstream in(log);
  double per = NAN;
  for (std::string line; std::getline(in, line);) {
    unsigned long runs = 0, threads = 0;
    const auto at = line.find("serve: ");
    if (at == std::string::npos) continue;
    if (std::sscanf(line.c_str() + at, "serve: %lu run executions on %lu threads made", &runs,
                    &threads) == 2 &&
        runs > 0)
      per = static_cast<double>(threads) / static_cast<double>(runs);
  }
  return per;
}

struct PoolFigures {
  double rps = 0, threads_per_run = NAN, ttft_p99 = NAN, peak_mb = 0;
  int ended = 0;
};

// One mode's figures: req/s (replay provider), then a burst of streams (fake LLM), each on a
// server of its own; the threads made per run from the rps server's log.
PoolFigures pool_mode(const Args& a, const fs::path& dir, kb::FakeLlm& llm, bool thread_per_run) {
  if (thread_per_run) {
    ::setenv("KERNEX_SERVE_THREAD_PER_RUN", "1", 1);
  } else {
    ::unsetenv("KERNEX_SERVE_THREAD_PER_RUN");
  }
  PoolFigures f;
  {
    const fs::path rdir = dir / "rps";
    auto serve =
        start_serve(a, rdir, write_config(rdir, a, replay_provider(rdir, kOkLine, 200000)));
    const auto r =
        kb::LoadClient(serve.port())
            .hammer(
                a.connections, std::chrono::milliseconds(a.rps_seconds * 1000), [](std::size_t i) {
                  return std::pair<std::string, std::string>{
                      "/v1/sessions/p-" + std::to_string(i) + "/messages", R"({"message":"hi"})"};
                });
    f.rps = r.ok / r.seconds;
    serve.stop();
    f.threads_per_run = threads_per_run(rdir / "serve.log");
  }
  const fs::path sdir = dir / "stream";
  const Json provider = {
      {"name", "openai"},
      {"options", {{"base_url", llm.base_url()}, {"api_key", "dummy"}, {"model", "fake"}}}};
  auto serve = start_serve(a, sdir, write_config(sdir, a, provider));
  std::vector<std::string> messages;
  auto streams = stream_requests(a.streams, thread_per_run ? "old" : "pool", messages, false);
  kb::LoadClient(serve.port()).streams(streams, 600s);
  f.peak_mb = serve.peak_rss_kib() / 1024.0;
  const Ttft t = ttft_of(streams, messages, llm, "end_turn");
  f.ttft_p99 = percentile(t.overhead_ms, 0.99);
  f.ended = t.ended;
  ::unsetenv("KERNEX_SERVE_THREAD_PER_RUN");
  return f;
}

void phase_pool(const Args& a, const fs::path& work) {
  std::printf(
      "pool: runs on the run pool beside a thread per run (KERNEX_SERVE_THREAD_PER_RUN), "
      "%d s of non-streaming messages over %d connections, then %d streams at once\n",
      a.rps_seconds, a.connections, a.streams);
  kb::FakeLlm llm;
  const PoolFigures old = pool_mode(a, work / "pool-old", llm, true);
  const PoolFigures now = pool_mode(a, work / "pool-new", llm, false);
  row("threads made per run", fmt("%.4f", now.threads_per_run),
      fmt("%.2f thread per run", old.threads_per_run), "~0", now.threads_per_run < 0.01);
  row("non-streaming req/s (replay), pool", fmt("%.0f req/s", now.rps),
      fmt("%.0f req/s thread per run", old.rps), ">= baseline", now.rps >= 0.95 * old.rps);
  row("burst TTFT above the LLM's, p99, pool", fmt("%.2f ms", now.ttft_p99),
      fmt("%.2f ms thread per run", old.ttft_p99), "<= 150 ms", now.ttft_p99 <= 150.0);
  row("streams completed, pool", std::to_string(now.ended) + "/" + std::to_string(a.streams),
      std::to_string(old.ended) + " thread per run", "all", now.ended == a.streams);
  row("peak RSS at the streams, pool", fmt("%.0f MB", now.peak_mb),
      fmt("%.0f MB thread per run", old.peak_mb), "<= 2048 MB", now.peak_mb <= 2048);
}

// ---- fibers ---------------------------------------------------------------------------------

struct FiberFigures {
  double ttft_p99 = NAN, peak_mb = 0;
  long peak_threads = 0;
  int ended = 0;
};

// A burst of N streams on a server whose runs wait on the model on fibers, or (the baseline,
// KERNEX_SERVE_NO_FIBERS) hold their pool thread while they wait; its thread count sampled.
FiberFigures fiber_mode(const Args& a, const fs::path& dir, kb::FakeLlm& llm, bool fibers) {
  if (fibers) {
    ::unsetenv("KERNEX_SERVE_NO_FIBERS");
  } else {
    ::setenv("KERNEX_SERVE_NO_FIBERS", "1", 1);
  }
  const Json provider = {
      {"name", "openai"},
      {"options", {{"base_url", llm.base_url()}, {"api_key", "dummy"}, {"model", "fake"}}}};
  auto serve = start_serve(a, dir, write_config(dir, a, provider));
  std::atomic<bool> done{false};
  std::atomic<long> peak_threads{0};
  std::thread sampler([&] {  // a measurement, not a synchronisation: sampled every 20 ms
    while (!done) {
      peak_threads = std::max(peak_threads.load(), threads_of(serve.pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::string> messages;
  auto streams = stream_requests(a.streams, fibers ? "fiber" : "held", messages, false);
  kb::LoadClient(serve.port()).streams(streams, 600s);
  done = true;
  sampler.join();
  FiberFigures f;
  f.peak_mb = serve.peak_rss_kib() / 1024.0;
  f.peak_threads = peak_threads;
  const Ttft t = ttft_of(streams, messages, llm, "end_turn");
  f.ttft_p99 = percentile(t.overhead_ms, 0.99);
  f.ended = t.ended;
  ::unsetenv("KERNEX_SERVE_NO_FIBERS");
  return f;
}

void phase_fibers(const Args& a, const fs::path& work) {
  std::printf(
      "fibers: %d streams at once, runs waiting on the model on fibers beside runs holding their "
      "pool thread (KERNEX_SERVE_NO_FIBERS), each on a server of its own\n",
      a.streams);
  kb::FakeLlm llm;
  const FiberFigures held = fiber_mode(a, work / "fibers-held", llm, false);
  const FiberFigures now = fiber_mode(a, work / "fibers-on", llm, true);
  row("server threads at the burst's peak, fibers", std::to_string(now.peak_threads),
      std::to_string(held.peak_threads) + " holding threads", "< baseline",
      now.peak_threads < held.peak_threads);
  row("streams completed, fibers", std::to_string(now.ended) + "/" + std::to_string(a.streams),
      std::to_string(held.ended) + " holding threads", "all", now.ended == a.streams);
  row("peak RSS at the streams, fibers", fmt("%.0f MB", now.peak_mb),
      fmt("%.0f MB holding threads", held.peak_mb), "<= 2048 MB", now.peak_mb <= 2048);
  row("burst TTFT above the LLM's, p99, fibers", fmt("%.2f ms", now.ttft_p99),
      fmt("%.2f ms holding threads", held.ttft_p99), "<= 150 ms", now.ttft_p99 <= 150.0);
}

// ---- cancel ---------------------------------------------------------------------------------

const std::vector<std::string> kSleepArgv = {"sleep", "37.25"};  // a duration nothing else uses

// Polls /proc until the predicate on the tool processes holds; false on timeout.
bool wait_tools(bool present, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (kb::processes_with_argv(kSleepArgv).empty() != present) return true;
    std::this_thread::sleep_for(500us);  // /proc offers no event to wait on
  }
  return false;
}

// The baseline: start the same `sleep`, then SIGKILL it, reap it, and see it gone from /proc.
std::vector<double> bare_kill(int runs) {
  std::vector<double> out;
  for (int i = 0; i < runs; ++i) {
    std::vector<char*> argv;
    for (const auto& s : kSleepArgv) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawnp(&pid, "sleep", nullptr, nullptr, argv.data(), environ) != 0)
      die("cannot spawn sleep");
    if (!wait_tools(true, 5s)) die("the baseline sleep never showed in /proc");
    const auto t0 = Clock::now();
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    if (!wait_tools(false, 5s)) die("the baseline sleep outlived its reaping");
    out.push_back(kb::ms(Clock::now() - t0));
  }
  return out;
}

void write_sleeper_skill(const fs::path& skills) {
  write_file(
      skills / "sleeper" / "SKILL.md",
      "---\nname = \"sleeper\"\ndescription = \"Naps for a long time.\"\ntrigger = \"sleepy\"\n"
      "[toolbox.nap]\ndescription = \"Sleeps 37 s.\"\ncommand = \"sleep\"\nargs = [\"37.25\"]\n"
      "[permissions]\ncommands = [\"sleep\"]\n---\nWhen sleepy, call nap.\n");
}

void phase_cancel(const Args& a, const fs::path& work) {
  std::printf("cancel: %d runs whose tool sleeps; cancel once the tool process exists\n",
              a.cancel_runs);
  if (!kb::processes_with_argv(kSleepArgv).empty())
    die("a `sleep 37.25` is already running: stop it first");
  const std::vector<double> base = bare_kill(a.cancel_runs);
  const fs::path dir = work / "cancel";
  write_sleeper_skill(dir / "skills");
  fs::create_directories(dir / "ws");
  const std::string call_line = R"({"tool_calls":[{"id":"c1","name":"nap","arguments":{}}]})";
  const Json extra = {{"skill_dirs", {(dir / "skills").string()}},
                      {"toolboxes",
                       {{{"name", "script"},
                         {"options", {{"workspace", (dir / "ws").string()}, {"timeout", 120}}}}}}};
  const fs::path config =
      write_config(dir, a, replay_provider(dir, call_line, a.cancel_runs + 10), extra);
  // The skill lies below the working directory, where skills load only once a person trusted them.
  const std::string trust = a.kernex.string() + " --config " + config.string() + " skills trust " +
                            (dir / "skills" / "sleeper").string() + " > /dev/null";
  if (std::system(trust.c_str()) != 0) die("kernex skills trust failed: " + trust);
  auto serve = start_serve(a, dir, config);
  kb::LoadClient client(serve.port());
  std::vector<double> latency;
  int cancelled = 0;
  std::string first_error;
  for (int i = 0; i < a.cancel_runs; ++i) {
    std::vector<kb::SseStream> one(1);
    one[0].target = "/v1/sessions/c-" + std::to_string(i) + "/messages";
    one[0].body = Json{{"message", "sleepy " + std::to_string(i)}, {"stream", true}}.dump();
    std::thread canceller;
    Clock::time_point cancel_sent{}, tool_gone{};
    std::string cancel_error;
    client.streams(one, 60s, [&](kb::SseStream& s, const std::string& event, const std::string&) {
      if (event != "tool_call" || canceller.joinable()) return;
      canceller = std::thread([&, run = s.run_id] {
        if (!wait_tools(true, 10s)) {
          cancel_error = "the tool process never started";
          return;
        }
        cancel_sent = Clock::now();
        const auto reply =
            kb::LoadClient(serve.port()).request("POST", "/v1/runs/" + run + "/cancel");
        if (reply.status != 202)
          cancel_error = "cancel: HTTP " + std::to_string(reply.status) + " " + reply.body;
        if (wait_tools(false, 10s))
          tool_gone = Clock::now();
        else
          cancel_error = "the tool process outlived the cancel by 10 s";
      });
    });
    if (canceller.joinable()) canceller.join();
    const auto& s = one[0];
    std::string error = !cancel_error.empty()      ? cancel_error
                        : !s.got_end               ? "no run_end: " + s.error
                        : s.outcome != "cancelled" ? "outcome " + s.outcome
                                                   : "";
    if (!error.empty()) {
      if (first_error.empty()) first_error = error;
      wait_tools(false, 40s);  // let a stray tool finish before the next run
      continue;
    }
    ++cancelled;
    latency.push_back(kb::ms(std::max(s.ended, tool_gone) - cancel_sent));
  }
  if (!first_error.empty())
    std::printf("  first failure: %s\n", first_error.substr(0, 400).c_str());
  row("cancel: runs cancelled", std::to_string(cancelled) + "/" + std::to_string(a.cancel_runs),
      "-", "all", cancelled == a.cancel_runs);
  row("cancel -> run_end + tool gone, p50", fmt("%.1f ms", percentile(latency, 0.5)),
      fmt("%.2f ms bare kill", percentile(base, 0.5)), "-", true);
  const double p99 = percentile(latency, 0.99);
  row("cancel -> run_end + tool gone, p99", fmt("%.1f ms", p99),
      fmt("%.2f ms bare kill", percentile(base, 0.99)), "<= 250 ms",
      cancelled == a.cancel_runs && p99 <= 250.0);
}

// ---- harness self-check ----------------------------------------------------------------------

void phase_harness(const Args& a) {
  std::printf("harness: fake LLM, bare server and client without kernex\n");
  kb::FakeLlm llm;
  const auto t0 = Clock::now();
  const Ttft floor = harness_floor(a, llm);
  std::printf(
      "  %d streams straight to the fake LLM: %d ended in %.0f ms, client TTFT minus the LLM's own "
      "p50 %.2f "
      "ms p99 %.2f ms (LLM's own p99 %.1f ms)%s%s\n",
      a.streams, floor.ended, kb::ms(Clock::now() - t0), percentile(floor.overhead_ms, 0.5),
      percentile(floor.overhead_ms, 0.99), percentile(floor.llm_ms, 0.99),
      floor.first_error.empty() ? "" : "; ", floor.first_error.c_str());
  kb::BareJsonServer bare(std::string(300, ' ') + "{}", 2);
  const auto r = kb::LoadClient(bare.port()).hammer(32, 2s, [](std::size_t) {
    return std::pair<std::string, std::string>{"/x", R"({"message":"hi"})"};
  });
  std::printf("  bare Beast server: %.0f req/s over 32 connections (%zu failed)\n",
              r.ok / r.seconds, r.failed);
}

// Every stream costs this process two files (its client end and the fake LLM's end) and kernex
// serve two (the client's connection and its upstream one), so N streams need ~2N + slack. The
// hard limit (20 000 on the dev VM) is raised where the process may (root: CAP_SYS_RESOURCE, up to
// fs.nr_open); otherwise the soft limit goes up to the hard one.
void raise_fd_limit(int streams) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t want = 2 * static_cast<rlim_t>(std::max(streams, 0)) + 4096;
  if (lim.rlim_max < want) {
    const rlimit raised{want, want};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  std::printf("open files limit %llu (inherited by kernex serve)\n",
              static_cast<unsigned long long>(lim.rlim_cur));
}

}  // namespace

// This binary as the bare proxy, started by proxy_burst through ServeProcess with kernex serve's
// arguments: `serve --config UPSTREAM_JSON --listen 127.0.0.1:0 --bare-proxy MODEL_PORT
// [--durable MEMORY_DB RUNS_DB]` (the durable floor: bare_run_storage.hpp). It prints the
// listening line kernex prints and runs until SIGTERM.
int bare_proxy_main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  const bool durable = argc == 11 && std::string(argv[8]) == "--durable";
  if ((argc != 8 && !durable) || std::string(argv[2]) != "--config")
    die("bare proxy: expected serve --config FILE --listen ADDR --bare-proxy PORT [--durable "
        "MEMORY_DB RUNS_DB]");
  std::ifstream in(argv[3]);
  std::stringstream body;
  body << in.rdbuf();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::optional<kb::BareRunStorage> storage;
  if (durable) storage.emplace(argv[9], argv[10], threads);
  std::optional<kb::BareProxy> proxy;
  proxy.emplace(static_cast<unsigned short>(std::atoi(argv[7])), body.str(), threads,
                storage ? &*storage : nullptr);
  std::printf("listening on http://127.0.0.1:%u\n", proxy->port());
  std::fflush(stdout);
  ::pause();  // until SIGTERM ends the process
  // Not reached today; the order if it were: the writer drains (its callbacks post to the proxy's
  // strands) before the proxy's threads and connections go.
  storage.reset();
  proxy.reset();
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 6 && std::string(argv[1]) == "serve" && std::string(argv[6]) == "--bare-proxy")
    return bare_proxy_main(argc, argv);
  const Args a = parse_args(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit(a.streams);
  if (a.harness) {
    phase_harness(a);
    return 0;
  }
  if (::access(a.kernex.c_str(), X_OK) != 0)
    die("no kernex binary at " + a.kernex.string() + " (--kernex PATH)");
  const fs::path work = make_work_dir();
  std::printf("work dir %s; %u CPUs\n", work.c_str(), std::thread::hardware_concurrency());
  if (a.phases.contains("stream")) phase_stream(a, work);
  if (a.phases.contains("idle")) phase_idle(a, work);
  if (a.phases.contains("rps")) phase_rps(a, work);
  if (a.phases.contains("cancel")) phase_cancel(a, work);
  if (a.phases.contains("pool")) phase_pool(a, work);
  if (a.phases.contains("fibers")) phase_fibers(a, work);
  print_table();
  std::error_code ec;
  fs::remove_all(work, ec);
  bool all = true;
  for (const auto& r : g_rows) all = all && r.pass;
  return all ? 0 : 2;
}
