// The REPL toolbox's costs, each beside a baseline measured in the same run:
//   eval_code    warm round trip of `x = 1` through the plugin (JSON over pipes to the sandboxed
//                worker, exec, timings, JSON back)  vs  a bare line echo through an idle python3
//   first eval   the first eval_code of a new session, served by a pre-started worker from the warm
//                pool (pool_size 2)  vs  the same with pool_size 0 (the worker starts then)
//   load_context a 50 MB log file loaded as a variable (worker reads it inside the sandbox);
//                also the size of what the model sees (metadata only)
//   llm_query    a sub-query from Python code through the kernel's run services to a loopback
//                OpenAI-format server  vs  the same provider's complete() called directly
//   read, tokens the built-in files tools from code (repl_builtin_read.hpp); `--files`: only these
// Usage: repl [ITERATIONS] [--unpinned] [--files | --read | --calls] (default 2000 for eval_code;
// llm_query uses a tenth, the first eval of new sessions a hundredth). --read: the read from code
// alone (ITERATIONS / 100 reads, at least 20); --calls: the tool call from code and its scenario
// alone (ITERATIONS / 10 calls a round).
//
// The bench pins itself, and so every process it starts, to one CPU (the last it may use), as
// `taskset -c N` would. Unpinned, each child settles either on the kernel's CPU or on the other
// one, depending on where it happened to start, and on this VM a wake-up across CPUs costs ~25 µs
// each way (an idle vCPU halts): a round trip across CPUs takes ~45 µs or more, for the bare echo
// as for the REPL, so placement, not the protocol, would decide the figures. --unpinned leaves
// placement to the scheduler.
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../tests/support/fake_http_server.hpp"
#include "../tests/support/proc_scan.hpp"
#include "../tests/support/session_only_services.hpp"
#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/rlm.hpp"

#include "bench_util.hpp"
#include "echo_python.hpp"
#include "openai_replies.hpp"
#include "repl_builtin_read.hpp"
#include "repl_code_tools.hpp"

namespace {

using kernex::bench::median;
using kernex::bench::us_since;
[[noreturn]] void die(const std::string& what) { kernex::bench::die("repl", what); }

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kernex::Json;

using kernex::bench::EchoPython;

using kernex::bench::openai_text;
using kernex::bench::openai_tool_call;

// Processes working in `dir` that wait in a pipe read: idle REPL workers, started and ready for a
// request (a worker still starting reads no pipe yet).
int workers_waiting_in(const fs::path& dir) {
  int n = 0;
  const auto want = fs::weakly_canonical(dir);
  kernex::testing::for_each_pid([&](pid_t pid) {
    const std::string proc = "/proc/" + std::to_string(pid);
    std::error_code ec;
    if (fs::read_symlink(proc + "/cwd", ec) != want || ec) return;
    std::ifstream wchan(proc + "/wchan");
    std::string where;
    wchan >> where;
    if (where.find("pipe_read") != std::string::npos || where == "pipe_wait") ++n;
  });
  return n;
}

// Pins this process (and so the threads and children it starts later) to its last allowed CPU and
// returns that CPU (already the only one under `taskset -c N`, and then left as it is).
int pin_to_one_cpu() {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) die("sched_getaffinity");
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) last = cpu;
  }
  if (CPU_COUNT(&allowed) == 1) return last;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) die("sched_setaffinity");
  return last;
}

// What every measurement shares: the plugins, a workspace, and the repl toolbox called as a
// run's session would call it.
struct Bench {
  explicit Bench(const fs::path& root_dir)
      : root(root_dir),
        ws(root_dir / "ws"),
        host(kernex::PluginHost::discover({KERNEX_BENCH_PLUGIN_DIR})) {
    fs::create_directories(ws);
    auto made = host.create_toolbox("repl", Json{{"workspace", ws.string()}});
    if (!made) die(made.error().describe());
    repl = *made;
    in_session("bench");
  }
  // The REPL keeps one worker per run session; the handles name it, as a kernel run's would.
  void in_session(std::string session) {
    run.services = std::make_shared<kernex::testing::SessionOnlyServices>(std::move(session));
  }
  kernex::ToolResult call(const std::string& name, Json args) {
    auto r = repl->execute(context, run, kernex::ToolCall{"b", name, std::move(args)});
    if (!r || r->is_error) die(name + ": " + (r ? r->content : r.error().describe()));
    return *r;
  }

  fs::path root, ws;
  kernex::PluginHost host;
  std::shared_ptr<kernex::ToolExecutor> repl;
  kernex::Context context;
  kernex::RunHandles run;
  // llm_query's: kept, as its workers, until the bench ends.
  std::unique_ptr<kernex::test::FakeHttpServer> server;
  std::unique_ptr<kernex::Kernel> kernel;
};

// eval_code vs a bare echo, interleaved; and eval_code of a source the worker has not seen.
void eval_vs_echo(Bench& b, int iterations) {
  b.call("eval_code", {{"code", "x = 0"}});  // starts the worker
  EchoPython echo;
  const std::string line = R"({"op":"eval","code":"x = 1"})"
                           "\n";
  for (int i = 0; i < 50; ++i) echo.round_trip(line);
  std::vector<double> eval_us, fresh_us, echo_us;
  for (int i = 0; i < iterations; ++i) {
    auto t = Clock::now();
    b.call("eval_code", {{"code", "x = 1"}});
    eval_us.push_back(us_since(t));
    t = Clock::now();
    echo.round_trip(line);
    echo_us.push_back(us_since(t));
    // A source the worker has not seen: parsed and compiled afresh (no compile-cache hit).
    const std::string fresh = "x = " + std::to_string(i + 2);
    t = Clock::now();
    b.call("eval_code", {{"code", fresh}});
    fresh_us.push_back(us_since(t));
  }
  const double eval_m = median(eval_us), echo_m = median(echo_us), fresh_m = median(fresh_us);
  std::printf(
      "eval_code warm round trip   median %8.1f us   bare python3 pipe echo %8.1f us   ratio %.2f  "
      "(%d runs)\n",
      eval_m, echo_m, eval_m / echo_m, iterations);
  std::printf(
      "  same, new source each call median %8.1f us                                 ratio %.2f\n",
      fresh_m, fresh_m / echo_m);
}

// The first eval_code of a new session: a warm worker from the pool vs one started for it.
void first_eval(Bench& b, int iterations) {
  const int sessions = std::max(10, iterations / 100);
  const fs::path warm_ws = b.root / "warm", cold_ws = b.root / "cold";
  fs::create_directories(warm_ws / "done");
  fs::create_directories(cold_ws);
  // Every session stays (no eviction inside a measured call).
  auto make = [&](const fs::path& ws, int pool_size) {
    auto box = b.host.create_toolbox(
        "repl",
        Json{{"workspace", ws.string()}, {"pool_size", pool_size}, {"max_sessions", sessions + 1}});
    if (!box) die(box.error().describe());
    return *box;
  };
  auto warm = make(warm_ws, 2), cold = make(cold_ws, 0);
  // A host lists the tools before calling them: that is when the pool starts its workers.
  kernex::Context offered;
  offered.allowed_tools = std::vector<std::string>{"eval_code"};
  if (!warm->list_tools(offered)) die("list_tools");
  auto eval_in = [&](kernex::ToolExecutor& box, const std::string& code) {
    auto t = Clock::now();
    auto r = box.execute(b.context, b.run, kernex::ToolCall{"b", "eval_code", {{"code", code}}});
    const double us = us_since(t);
    if (!r || r->is_error) die("eval_code: " + (r ? r->content : r.error().describe()));
    return us;
  };
  std::vector<double> warm_us, cold_us;
  for (int i = 0; i < sessions; ++i) {
    // Both pooled workers ready (and none starting), so the cold start below has the CPU alone.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (workers_waiting_in(warm_ws) < 2) {
      if (Clock::now() > deadline) die("the pool did not refill within 60 s");
      std::this_thread::yield();
    }
    b.in_session("cold-" + std::to_string(i));
    cold_us.push_back(eval_in(*cold, "x = 1"));
    b.in_session("warm-" + std::to_string(i));
    warm_us.push_back(eval_in(*warm, "x = 1"));
    // The session's worker leaves the workspace, where only the pool's idle ones are counted.
    eval_in(*warm, "import os\nos.chdir('done')");
  }
  const double warm_m = median(warm_us) / 1000, cold_m = median(cold_us) / 1000;
  std::printf(
      "first eval_code, new session median %8.2f ms   "
      "pool_size 0 (python starts then) %8.2f ms   ratio %.3f  (%d sessions each)\n",
      warm_m, cold_m, warm_m / cold_m, sessions);
}

// load_context of a 50 MB file, a fresh worker each time.
void load_context(Bench& b) {
  {
    std::ofstream log(b.ws / "big.log");
    std::string row;
    for (long i = 0; log.tellp() < 50L * 1000 * 1000; ++i) {
      row = "2026-11-25T10:00:00Z host" + std::to_string(i % 13) + " GET /api/v1/items/" +
            std::to_string(i) + " status=" + (i % 997 == 0 ? "500" : "200") +
            " took=" + std::to_string(i % 1000) + "ms\n";
      log << row;
    }
  }
  const auto size_mb = static_cast<double>(fs::file_size(b.ws / "big.log")) / 1e6;
  std::vector<double> load_ms;
  std::size_t shown = 0;
  for (int i = 0; i < 5; ++i) {
    b.in_session("load-" + std::to_string(i));  // a fresh worker each time: nothing cached
    b.call("eval_code", {{"code", "x = 0"}});
    auto t = Clock::now();
    auto r = b.call("load_context", {{"name", "context"}, {"file", "big.log"}});
    load_ms.push_back(us_since(t) / 1000);
    shown = r.content.size();
  }
  std::printf(
      "load_context %.1f MB file    median %8.1f ms   (5 runs, fresh worker each; the model sees "
      "%zu bytes of metadata)\n",
      size_mb, median(load_ms), shown);
  fs::remove(b.ws / "big.log");
}

// The median llm_query as the code measured it, in a whole run through the kernel (the fake
// model asks for the measuring code, then answers each ping).
double llm_query_via_kernel(Bench& b, const Json& provider_options, int queries) {
  const std::string code = "import time\nts = []\nfor i in range(" + std::to_string(queries) +
                           "):\n    t = time.perf_counter()\n    llm_query('ping')\n"
                           "    ts.append((time.perf_counter() - t) * 1e6)\nts.sort()\nresult = "
                           "'%.1f' % ts[len(ts) // 2]";
  b.server->set_responder([code](const kernex::test::FakeHttpServer::Recorded& req) {
    Json body = Json::parse(req.body, nullptr, false);
    const Json& messages = body["messages"];
    const Json& last = messages.back();
    if (last.value("role", "") == "tool") return openai_text("FINAL_VAR(result)");
    if (last.value("content", Json("")) == "ping") return openai_text("pong");
    return openai_tool_call("eval_code", Json{{"code", code}});
  });
  kernex::Config config;
  config.provider = {"openai", provider_options};
  config.toolboxes = std::vector<kernex::PluginRef>{{"repl", Json{{"workspace", b.ws.string()}}}};
  config.data_dir = b.root / "data";
  config.trajectories = false;
  auto kernel = kernex::Kernel::create(std::move(config));
  if (!kernel) die(kernel.error().describe());
  b.kernel = std::move(*kernel);
  auto answered = kernex::run_rlm(*b.kernel, "measure", kernex::RlmOptions{});
  if (!answered) die(answered.error().describe());
  return std::atof(answered->text.c_str());
}

// llm_query through the kernel vs the provider directly.
void llm_query(Bench& b, int iterations) {
  const int queries = std::max(20, iterations / 10);
  b.server = std::make_unique<kernex::test::FakeHttpServer>();
  ::setenv("KERNEX_BENCH_KEY", "sk-bench", 1);
  const Json provider_options = {{"base_url", b.server->url("/v1")},
                                 {"api_key_env", "KERNEX_BENCH_KEY"},
                                 {"model", "gpt-4o-mini"}};
  const double via_kernel = llm_query_via_kernel(b, provider_options, queries);
  auto provider = b.host.create_provider("openai", provider_options);
  if (!provider) die(provider.error().describe());
  std::vector<double> direct_us;
  for (int i = 0; i < queries; ++i) {
    kernex::Context ping("ping");
    auto t = Clock::now();
    auto r = (*provider)->complete(ping, {}, nullptr);
    direct_us.push_back(us_since(t));
    if (!r) die(r.error().describe());
  }
  const double direct = median(direct_us);
  std::printf(
      "llm_query from code         median %8.1f us   provider.complete() directly %8.1f us   ratio "
      "%.2f  (%d queries)\n",
      via_kernel, direct, via_kernel / direct, queries);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 2000;
  bool pinned = true, files_only = false, read_only = false, calls_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--unpinned")
      pinned = false;
    else if (std::string(argv[i]) == "--files")
      files_only = true;
    else if (std::string(argv[i]) == "--read")
      read_only = true;
    else if (std::string(argv[i]) == "--calls")
      calls_only = true;
    else
      iterations = std::max(10, std::atoi(argv[i]));
  }
  if (pinned) {
    std::printf(
        "(pinned to CPU %d with every process it starts; --unpinned to let the scheduler place "
        "them)\n",
        pin_to_one_cpu());
  }
  if (files_only || read_only) {
    kernex::bench::builtin_read_benches(std::max(20, iterations / 100), !read_only);
    return 0;
  }
  if (calls_only) {
    kernex::bench::code_tools_benches(std::max(20, iterations / 10));
    return 0;
  }
  std::string tmpl = (fs::temp_directory_path() / "kernex-bench-repl-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) die("mkdtemp");
  const fs::path root = tmpl;
  Bench b(root);
  eval_vs_echo(b, iterations);
  first_eval(b, iterations);
  load_context(b);
  llm_query(b, iterations);
  kernex::bench::builtin_read_benches(20);
  kernex::bench::code_tools_benches(std::max(20, iterations / 10));
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
