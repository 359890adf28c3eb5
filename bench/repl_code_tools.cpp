#include "repl_code_tools.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "code_tools_scenario.hpp"
#include "echo_python.hpp"
#include "kernex/kernel.hpp"

namespace kernex::bench {

#ifndef KERNEX_BENCH_NPM_DIR

void code_tools_benches(int) {
  std::printf("tool calls from code: skipped, node and npm were not found when configuring\n");
}

#else

namespace {

namespace fs = std::filesystem;
namespace sc = kernex::scenario;
[[noreturn]] void fail_with(const std::string& what) { die("repl", what); }

const sc::Environment kEnv{KERNEX_BENCH_NPM_DIR, KERNEX_BENCH_NODE, KERNEX_BENCH_PLUGIN_DIR,
                           KERNEX_BENCH_PROJECT_DIR};
constexpr const char* kTool = "everything__echo";
constexpr int kRounds = 10;
// CPU time (ns) the bench's descendants have used so far: every process below it, by /proc.
std::uint64_t descendants_cpu_ns() {
  std::map<pid_t, pid_t> parent;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    parent[static_cast<pid_t>(std::stol(name))] = ppid;
  }
  const pid_t self = ::getpid();
  auto on_cpu = [](const fs::path& schedstat) {
    std::ifstream in(schedstat);
    std::uint64_t ns = 0;
    return in >> ns ? ns : 0;
  };
  std::uint64_t ns = 0;
  // The bench's own threads but this one (the REPL pool's thread spawns its workers).
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
    if (task.path().filename() != std::to_string(::gettid()))
      ns += on_cpu(task.path() / "schedstat");
  }
  for (const auto& [pid, ppid] : parent) {
    pid_t up = ppid;
    for (int depth = 0; up > 1 && up != self && depth < 64; ++depth) {
      const auto it = parent.find(up);
      up = it == parent.end() ? 0 : it->second;
    }
    if (up == self) ns += on_cpu("/proc/" + std::to_string(pid) + "/schedstat");
  }
  return ns;
}

// Before each measured run, the pause a model's turn would leave: waits (at most 5 s) until the
// processes the bench started are quiet, under 1 ms of CPU in each of three 50 ms spans. Background
// work the previous run started (the REPL pool starting a worker for the one a code run took, tens
// of ms of CPU) finishes there, as it would in a real session, instead of landing in the next run's
// calls, whichever way they are made.
void settle() {
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  std::uint64_t before = descendants_cpu_ns();
  for (int quiet = 0; quiet < 3 && Clock::now() < give_up;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::uint64_t now = descendants_cpu_ns();
    quiet = now - std::min(now, before) < 1'000'000 ? quiet + 1 : 0;
    before = now;
  }
}

// The time between each call's ToolRun and ToolResult stream events: the kernel running the call
// (permission rules, hooks, the MCP round trip to the sandboxed server, the trajectory record),
// whoever made it. The loop emits both around the same run_tool for the model's calls and for
// calls from code.
class KernelSideTimes {
 public:
  StreamSink sink() {
    return [this](const StreamEvent& e) {
      if (e.tool_name != kTool) return;
      std::lock_guard lock(mu_);
      if (e.kind == StreamEvent::Kind::ToolRun) {
        started_[e.tool_call_id] = Clock::now();
      } else if (auto it = started_.find(e.tool_call_id);
                 e.kind == StreamEvent::Kind::ToolResult && it != started_.end()) {
        us_.push_back(us_since(it->second));
        started_.erase(it);
      }
    };
  }
  std::vector<double> take() {
    std::lock_guard lock(mu_);
    return std::exchange(us_, {});
  }

 private:
  std::mutex mu_;
  std::map<std::string, Clock::time_point> started_;
  std::vector<double> us_;
};

RunResult run_script(Kernel& kernel, const fs::path& script, const StreamSink& sink) {
  RunOptions options;
  options.provider_options = {{"script", script.string()}};
  options.sink = sink;
  auto r = kernel.run(Request::from_text("bench", "go"), options);
  if (!r) fail_with(r.error().describe());
  if (r->outcome != Outcome::EndTurn) fail_with("a tool-call run did not end its turn");
  for (const auto& call : r->tool_calls) {
    if (call.result.is_error) fail_with(call.call.name + ": " + call.result.content);
  }
  return *r;
}

// A new file for every run: the replay provider plays each script's lines once per kernel.
fs::path script_path(const fs::path& dir, const std::string& name) {
  static int runs = 0;
  return dir / (name + "-" + std::to_string(++runs) + ".jsonl");
}

// The model calls echo `calls` times, one call a turn, as a model calling a tool again and again
// does; the kernel runs each as it would any.
fs::path direct_script(const fs::path& dir, int calls) {
  const Json echo = sc::calls_line({{{"name", kTool}, {"arguments", {{"message", "hello"}}}}});
  std::vector<Json> lines(static_cast<std::size_t>(calls), echo);
  lines.push_back(sc::text_line("done"));
  const fs::path path = script_path(dir, "direct");
  sc::write_script(path, lines);
  return path;
}

// One eval_code calls echo `calls` times, timing each call in Python, and between them a tool
// that does not exist, which the kernel refuses at once: the hop from code alone. It submits both.
fs::path code_script(const fs::path& dir, int calls) {
  const std::string code = "import time\nts, hops = [], []\nfor i in range(" +
                           std::to_string(calls) +
                           "):\n"
                           "    t = time.perf_counter()\n"
                           "    tools." +
                           kTool +
                           "(message='hello')\n"
                           "    ts.append((time.perf_counter() - t) * 1e6)\n"
                           "    t = time.perf_counter()\n"
                           "    try:\n"
                           "        tools.call('no_such_tool')\n"
                           "    except ToolError:\n"
                           "        hops.append((time.perf_counter() - t) * 1e6)\n"
                           "submit_result({'echo': ts, 'hop': hops})\n";
  const fs::path path = script_path(dir, "code");
  sc::write_script(path,
                   {sc::calls_line({{{"name", "eval_code"}, {"arguments", {{"code", code}}}}}),
                    sc::text_line("done")});
  return path;
}

// What the code submitted: the times of its echo calls and of its refused calls.
std::pair<std::vector<double>, std::vector<double>> times_from_code(const RunResult& r) {
  if (!r.result || !r.result->is_object() || !r.result->contains("echo")) {
    fail_with("eval_code submitted no times: " +
              (r.tool_calls.empty() ? std::string("no call") : r.tool_calls[0].result.content));
  }
  return {(*r.result)["echo"].get<std::vector<double>>(),
          (*r.result)["hop"].get<std::vector<double>>()};
}

// (a) Direct: the ToolRun -> ToolResult interval of the model's calls (the kernel's whole
// handling of a call, the model's turn excluded). From code: time.perf_counter() around each
// tools.everything__echo(...) in Python: the same kernel handling (the same run_tool, so the same
// rules, hooks and trajectory record) plus what code adds, the JSON line to the kernel over the
// worker's pipe, the REPL toolbox's dispatch, the reply and its decoding in Python. The kernel side
// of the calls from code, measured as the direct ones, is printed too, telling the hop from the
// tool. The direct calls come one a turn, as a model's do, not back to back in one response
// (where each finds the caches as the previous call left them; code's calls never do). Runs of
// each way alternate, so load on a shared machine falls on both.
void tool_call_from_code(const fs::path& dir, int calls) {
  const fs::path ws = dir / "ws";
  fs::create_directories(ws);
  sc::write_server_skill(kEnv, dir / "skills", "everything", "server-everything", {"stdio"});
  const fs::path warm_direct = direct_script(dir, 20), warm_code = code_script(dir, 20);
  auto kernel = sc::make_kernel(kEnv, {dir,
                                       ws,
                                       {dir / "skills"},
                                       {"everything"},
                                       {"everything"},
                                       warm_direct,
                                       {},
                                       static_cast<std::uint32_t>(std::max(calls, 20) + 1)});
  if (!kernel) fail_with(kernel.error().describe());
  KernelSideTimes kernel_side;
  // Starts the server and warms both paths; discarded.
  run_script(**kernel, warm_direct, kernel_side.sink());
  run_script(**kernel, warm_code, kernel_side.sink());
  kernel_side.take();

  // The hop's floor: the refused call's line to an idle python3 and back, no work on either side.
  EchoPython echo;
  const std::string refused_line = R"({"call":"tool_call","name":"no_such_tool","arguments":{}})"
                                   "\n";
  std::vector<double> direct_us, code_us, code_kernel_us, hop_us, echo_us, ratios;
  for (int round = 0; round < kRounds; ++round) {
    settle();
    run_script(**kernel, direct_script(dir, calls), kernel_side.sink());
    auto d = kernel_side.take();
    settle();
    auto [c, h] =
        times_from_code(run_script(**kernel, code_script(dir, calls), kernel_side.sink()));
    auto k = kernel_side.take();
    if (d.size() != static_cast<std::size_t>(calls) || k.size() != c.size() || h.size() != c.size())
      fail_with("a call was not measured (the stream's events, or a refusal that did not raise)");
    ratios.push_back(median(c) / median(d));
    direct_us.insert(direct_us.end(), d.begin(), d.end());
    code_us.insert(code_us.end(), c.begin(), c.end());
    code_kernel_us.insert(code_kernel_us.end(), k.begin(), k.end());
    hop_us.insert(hop_us.end(), h.begin(), h.end());
    for (int i = 0; i < calls; ++i) {
      const auto t = Clock::now();
      echo.round_trip(refused_line);
      echo_us.push_back(us_since(t));
    }
  }
  std::printf(
      "tool call from code         median %8.1f us   the kernel's direct call %8.1f us   ratio "
      "%.2f  (rounds %.2f-%.2f, median %.2f; server-everything echo over MCP, %d calls x %d "
      "rounds)\n",
      median(code_us), median(direct_us), median(code_us) / median(direct_us),
      *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()), median(ratios), calls, kRounds);
  std::printf(
      "  of which the kernel's side  median %8.1f us   the hop alone (a call refused at once) "
      "%8.1f us   its floor, a bare python3 pipe echo %8.1f us\n",
      median(code_kernel_us), median(hop_us), median(echo_us));
}

// (b) The scenario both ways; tokens estimated as bytes / 4 of every request the model received
// (sc::estimated_tokens), the same count for both.
void scenario_tokens(const fs::path& dir) {
  const auto code = sc::run_scenario(kEnv, sc::Mode::CodeTools, dir / "code");
  const auto direct = sc::run_scenario(kEnv, sc::Mode::DirectCalls, dir / "direct");
  for (const auto* o : {&code, &direct}) {
    if (!o->run) fail_with("scenario: " + o->run.error().describe());
    if (o->written != o->log.errors) fail_with("scenario: errors.log is not the log's errors");
  }
  const auto c = sc::estimated_tokens(code.requests), d = sc::estimated_tokens(direct.requests);
  std::printf(
      "scenario tokens to the model code %8llu          direct tool calls %8llu        %.2f %% "
      "fewer  (a %.1f MB file via server-filesystem, filtered to 21 lines and written back; "
      "bytes/4 of the %zu and %zu requests)\n",
      static_cast<unsigned long long>(c), static_cast<unsigned long long>(d),
      100.0 * (1.0 - static_cast<double>(c) / static_cast<double>(d)),
      static_cast<double>(code.log.bytes) / 1e6, code.requests.size(), direct.requests.size());
}

}  // namespace

void code_tools_benches(int calls) {
  std::string tmpl = (fs::temp_directory_path() / "kernex-bench-code-tools-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) fail_with("mkdtemp");
  const fs::path root = tmpl;
  tool_call_from_code(root / "echo", calls);
  scenario_tokens(root / "scenario");
  std::error_code ec;
  fs::remove_all(root, ec);
}

#endif

}  // namespace kernex::bench
