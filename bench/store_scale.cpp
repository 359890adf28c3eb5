// bench/store_scale: `kernex serve` scale-out on one shared PostgreSQL store. For 1, 2 and 3 nodes
// (each a `kernex serve` process with its own data dir, `memory: postgres` and `serve.cluster`
// on one fresh database, at most --max-runs runs at once per node) and a fake OpenAI-compatible
// LLM answering every call after a fixed delay (default 50 ms, so a node's run slots, not the
// model, bound the throughput):
//   throughput  --clients-per-node C closed-loop clients per node (default 8: twice the slots),
//               each owning one session and sending its k-th message to node (client + k) mod N,
//               for --seconds S: completed runs per second.
//   latency     one client per node (below every node's slots), same rotation: enqueue-to-start,
//               the time from sending the POST (stream: true) to reading the run's `run_start`
//               event on that stream; p50 and p99. Measured on the client's clock, so it includes
//               the HTTP round trip and the SSE write, and a run claimed by another node shows
//               how long its start takes to reach the node holding the stream.
// The throughput phase's enqueue-to-start is printed too (it includes waiting for a free slot).
// Baseline: the 1-node figures of the same run (scaling), the fake LLM's own delay, and the ceiling
// nodes x max_runs / delay. The CPU of the nodes, of this process and of the server backends
// connected to the bench's database (the server must be on this machine) show when the machine,
// not the cluster, is the limit.
// Usage: store_scale [--nodes 1,2,3] [--seconds S] [--delay-ms D] [--max-runs N]
//                    [--clients-per-node C] [--kernex PATH] [--standalone]
#include <cstdlib>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench_util.hpp"
#include "fake_llm.hpp"
#include "kernex/json.hpp"
#include "pg_bench_db.hpp"
#include "serve_load.hpp"
#include "serve_process.hpp"

namespace {

namespace fs = std::filesystem;
namespace kb = kernex::bench;
using kb::Clock;
using kernex::Json;
using namespace std::chrono_literals;
[[noreturn]] void die(const std::string& what) { kb::die("store_scale", what); }

struct Args {
  std::vector<int> nodes = {1, 2, 3};
  int seconds = 10;
  int delay_ms = 50;
  int max_runs = 4;
  int clients_per_node = 8;
  fs::path kernex = KERNEX_BENCH_KERNEX;
  // --standalone: no serve.cluster and SQLite memory (one node only): the harness and a plain
  // node, as a reference for the 1-node cluster figures.
  bool standalone = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (kb::ArgReader in("store_scale", argc, argv); in.next();) {
    const std::string& arg = in.flag();
    const auto value = [&in] { return in.value(); };
    const auto number = [&in] { return in.positive(100000); };
    if (arg == "--nodes") {
      a.nodes.clear();
      std::stringstream ss(value());
      for (std::string n; std::getline(ss, n, ',');) {
        if (n != "1" && n != "2" && n != "3" && n != "4")
          die("--nodes: expected a list of 1..4, got " + n);
        a.nodes.push_back(std::stoi(n));
      }
    } else if (arg == "--seconds") {
      a.seconds = number();
    } else if (arg == "--delay-ms") {
      a.delay_ms = number();
    } else if (arg == "--max-runs") {
      a.max_runs = number();
    } else if (arg == "--clients-per-node") {
      a.clients_per_node = number();
    } else if (arg == "--standalone") {
      a.standalone = true;
    } else if (arg == "--kernex") {
      a.kernex = value();
    } else {
      die("unknown argument " + arg);
    }
  }
  return a;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

void write_file(const fs::path& path, const std::string& text) {
  kb::write_file("store_scale", path, text);
}

// One config for every node; each node gets its own --data-dir. JSON is YAML.
fs::path write_config(const fs::path& dir, const Args& a, const std::string& dsn,
                      const std::string& llm_url) {
  Json config = {{"data_dir", (dir / "data").string()},
                 {"provider",
                  {{"name", "openai"},
                   {"options", {{"base_url", llm_url}, {"api_key", "dummy"}, {"model", "fake"}}}}},
                 {"memory", {{"name", "postgres"}, {"options", {{"dsn", dsn}}}}},
                 {"toolboxes", Json::array()},
                 {"trajectories", false},
                 {"serve",
                  {{"max_connections", 20000},
                   {"limits", {{"default", {{"concurrent_runs", 1000000}}}}},
                   {"cluster", {{"lease_s", 10}, {"max_runs", a.max_runs}}}}}};
  if (a.standalone) {
    config["memory"] = "sqlite";
    config["serve"].erase("cluster");
  }
  write_file(dir / "kernex.yaml", config.dump(2) + "\n");
  return dir / "kernex.yaml";
}

struct Sample {
  bool ok = false;
  std::string error;
  double start_ms = -1;  // POST sent -> run_start read
  double run_ms = -1;    // run_start read -> run_end read
};

// One run: POST stream:true to `port`, read until run_end; when run_start arrived.
Sample one_run(unsigned short port, const std::string& session, const std::string& message) {
  std::vector<kb::SseStream> one(1);
  one[0].target = "/v1/sessions/" + session + "/messages";
  one[0].body = Json{{"message", message}, {"stream", true}}.dump();
  std::optional<Clock::time_point> started;
  kb::LoadClient(port).streams(one, 60s,
                               [&](kb::SseStream&, const std::string& event, const std::string&) {
                                 if (event == "run_start" && !started) started = Clock::now();
                               });
  Sample s;
  const auto& r = one[0];
  s.ok = r.got_end && r.error.empty() && r.outcome == "end_turn";
  if (!s.ok) s.error = r.error.empty() ? "outcome '" + r.outcome + "'" : r.error;
  if (started) s.start_ms = kb::ms(*started - r.sent);
  if (started && r.got_end) s.run_ms = kb::ms(r.ended - *started);
  return s;
}

struct Load {
  int runs = 0, failed = 0;
  double seconds = 0;
  std::vector<double> start_ms, run_ms;
  std::string first_error;
};

// `clients` closed-loop clients for `duration`; client c's k-th run goes to node (c + k) mod N.
Load drive(const std::vector<unsigned short>& ports, int clients, std::chrono::seconds duration,
           const std::string& tag) {
  Load load;
  std::mutex mutex;
  const auto t0 = Clock::now();
  const auto until = t0 + duration;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      const std::string session = tag + "-" + std::to_string(c);
      int failures = 0;  // a client that keeps failing stops (a dead node must not spin the loop)
      for (std::size_t k = 0; Clock::now() < until && failures < 10; ++k) {
        const auto port = ports[(static_cast<std::size_t>(c) + k) % ports.size()];
        const Sample s =
            one_run(port, session, "message " + std::to_string(k) + " from " + session);
        std::lock_guard lock(mutex);
        s.ok ? ++load.runs : ++load.failed;
        if (!s.ok) ++failures;
        if (!s.ok && load.first_error.empty()) load.first_error = s.error;
        if (s.start_ms >= 0) load.start_ms.push_back(s.start_ms);
        if (s.run_ms >= 0) load.run_ms.push_back(s.run_ms);
      }
    });
  }
  for (auto& t : threads) t.join();
  load.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return load;
}

struct NodeResult {
  int nodes = 0;
  Load throughput, latency;
  double node_cpu_s = 0;      // user + system CPU of every node during the throughput phase
  double bench_cpu_s = 0;     // this process's (client and fake LLM), same phase
  double postgres_cpu_s = 0;  // the server backends connected to the bench's database, same phase
};

// utime + stime of a process, in seconds (/proc/<pid>/stat fields 14 and 15).
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i >= 14) ticks += std::strtod(f.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// CPU of the server backends connected to `database` (the nodes' pooled connections, which live
// through a phase), in seconds; the server is on this machine (loopback).
double backends_cpu_seconds(const std::string& server_dsn, const std::string& database) {
  PGconn* c = PQconnectdb(server_dsn.c_str());
  double total = 0;
  if (PQstatus(c) == CONNECTION_OK) {
    const char* values[] = {database.c_str()};
    PGresult* r = PQexecParams(c, "SELECT pid FROM pg_stat_activity WHERE datname = $1", 1, nullptr,
                               values, nullptr, nullptr, 0);
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); ++i) {
      total += cpu_seconds(static_cast<pid_t>(std::atol(PQgetvalue(r, i, 0))));
    }
    PQclear(r);
  }
  PQfinish(c);
  return total;
}

NodeResult measure(const Args& a, int nodes, const fs::path& work, const std::string& llm_url) {
  const kb::PgBenchDb db("store_scale", "scale" + std::to_string(nodes));
  const fs::path dir = work / ("nodes-" + std::to_string(nodes));
  const fs::path config = write_config(dir, a, db.dsn(), llm_url);
  std::vector<std::unique_ptr<kb::ServeProcess>> procs;
  std::vector<unsigned short> ports;
  for (int i = 0; i < nodes; ++i) {
    const fs::path data = dir / ("data-" + std::to_string(i));
    fs::create_directories(data);
    procs.push_back(std::make_unique<kb::ServeProcess>(
        a.kernex, config, dir / ("serve-" + std::to_string(i) + ".log"),
        std::vector<std::string>{"--data-dir", data.string()}));
    ports.push_back(procs.back()->port());
  }
  NodeResult r;
  r.nodes = nodes;
  // Warm-up: every node builds its provider, pool and prepared state once.
  drive(ports, nodes, 1s, "warm");
  r.latency = drive(ports, nodes, std::chrono::seconds(std::max(2, a.seconds / 2)), "lat");
  double cpu0 = 0, cpu1 = 0;
  for (auto& p : procs) cpu0 += cpu_seconds(p->pid());
  const double own0 = cpu_seconds(::getpid()),
               pg0 = backends_cpu_seconds(db.server_dsn(), db.name());
  r.throughput = drive(ports, a.clients_per_node * nodes, std::chrono::seconds(a.seconds), "load");
  for (auto& p : procs) cpu1 += cpu_seconds(p->pid());
  r.node_cpu_s = cpu1 - cpu0;
  r.bench_cpu_s = cpu_seconds(::getpid()) - own0;
  r.postgres_cpu_s = backends_cpu_seconds(db.server_dsn(), db.name()) - pg0;
  for (auto& p : procs) p->stop();
  return r;
}

fs::path make_work_dir() {
  std::string tmpl = (fs::path(KERNEX_BENCH_WORK_DIR) / "store-scale-XXXXXX").string();
  fs::create_directories(KERNEX_BENCH_WORK_DIR);
  if (::mkdtemp(tmpl.data()) == nullptr) die("cannot create a work dir in " KERNEX_BENCH_WORK_DIR);
  return fs::canonical(tmpl);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  if (a.standalone) a.nodes = {1};
  kb::FakeLlmOptions llm_options;
  llm_options.chunks = 1;
  llm_options.interval = std::chrono::milliseconds(a.delay_ms);
  llm_options.whole_delay = std::chrono::milliseconds(a.delay_ms);
  kb::FakeLlm llm(llm_options);
  const fs::path work = make_work_dir();

  std::vector<NodeResult> results;
  for (int n : a.nodes) results.push_back(measure(a, n, work, llm.base_url()));

  const auto calls = llm.calls();
  std::vector<double> llm_ms;
  for (const auto& c : calls) llm_ms.push_back(kb::ms(c.finished - c.received));
  std::printf(
      "store_scale: kernex serve nodes on one PostgreSQL database, fake LLM %d ms per call "
      "(measured p50 %.1f ms over %zu calls), cluster.max_runs %d, %d clients per node for %d s\n",
      a.delay_ms, percentile(llm_ms, 0.5), calls.size(), a.max_runs, a.clients_per_node, a.seconds);
  std::printf("  %-6s %10s %8s %8s   %-28s %-28s %s\n", "nodes", "runs/s", "x 1 node", "failed",
              "enqueue->start p50/p99 idle", "enqueue->start p50/p99 load",
              "node CPU/run, cores used");
  std::printf("  %-6s %10s %8s %8s   %-28s %-28s %s\n", "", "", "", "", "(1 client per node)",
              "(then start->end p50 load)", "(bench, our backends' cores)");
  double base = 0;
  for (const auto& r : results) {
    const double rate = r.throughput.runs / r.throughput.seconds;
    if (r.nodes == 1) base = rate;
    char idle[64], busy[64];
    std::snprintf(idle, sizeof idle, "%.1f / %.1f ms", percentile(r.latency.start_ms, 0.5),
                  percentile(r.latency.start_ms, 0.99));
    std::snprintf(busy, sizeof busy, "%.1f / %.1f ms", percentile(r.throughput.start_ms, 0.5),
                  percentile(r.throughput.start_ms, 0.99));
    std::printf("  %-6d %10.1f %8s %8d   %-28s %-28s %.2f ms, %.2f\n", r.nodes, rate,
                base > 0 ? (std::to_string(rate / base).substr(0, 4) + "x").c_str() : "-",
                r.throughput.failed + r.latency.failed, idle, busy,
                r.throughput.runs > 0 ? 1000 * r.node_cpu_s / r.throughput.runs : 0.0,
                r.node_cpu_s / r.throughput.seconds);
    std::printf("  %-6s %10s %8s %8s   %-28s %-28s %.2f, %.2f\n", "", "", "", "", "",
                (std::to_string(percentile(r.throughput.run_ms, 0.5)).substr(0, 5) + " ms").c_str(),
                r.bench_cpu_s / r.throughput.seconds, r.postgres_cpu_s / r.throughput.seconds);
    if (!r.throughput.first_error.empty() || !r.latency.first_error.empty()) {
      std::printf(
          "         first failure: %s\n",
          (r.throughput.first_error.empty() ? r.latency.first_error : r.throughput.first_error)
              .c_str());
    }
  }
  for (const auto& r : results) {
    const double p50 = percentile(r.latency.start_ms, 0.5);
    std::printf("  target enqueue->start p50 <= 10 ms, %d node(s): %.1f ms  %s\n", r.nodes, p50,
                p50 <= 10.0 && !r.latency.start_ms.empty() ? "met" : "NOT met");
  }
  if (base > 0 && results.size() > 1 && results.back().nodes == 3) {
    const double x = results.back().throughput.runs / results.back().throughput.seconds / base;
    std::printf("  target 3 nodes >= 2.5 x 1 node: %.2f x  %s\n", x, x >= 2.5 ? "met" : "NOT met");
  }
  bool failed = false;
  for (const auto& r : results) failed = failed || r.throughput.failed + r.latency.failed > 0;
  if (failed) {
    std::printf("  runs failed: the nodes' logs are kept in %s\n", work.c_str());
  } else {
    fs::remove_all(work);
  }
  return 0;
}
