#include "repl_builtin_read.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "code_tools_scenario.hpp"
#include "kernex/kernel.hpp"

namespace kernex::bench {
namespace {

namespace fs = std::filesystem;
namespace sc = kernex::scenario;
[[noreturn]] void fail_with(const std::string& what) { die("repl", what); }

// The file of issue 36: 51 426 lines, every 9th an ERROR (5 714), about 2.5 MB.
std::uintmax_t write_big_log(const fs::path& path) {
  std::ofstream log(path, std::ios::binary);
  for (int i = 0; i < 51'426; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "10:%02d:%02d req=r%07d %s payload-%07d h%04d\n", i / 60 % 60,
                  i % 60, i, i % 9 == 0 ? "ERROR" : "INFO ", i, i % 10000);
    log << line;
  }
  log.close();
  return fs::file_size(path);
}

// The CLI's kernel for these runs: the replay model, the files toolbox's read and write in `ws`
// and the repl toolbox (offered always) with `repl_tools` (null: all; none: no repl toolbox),
// trajectories on (as `kernex run` writes them).
std::unique_ptr<Kernel> make_kernel(const fs::path& dir, const fs::path& ws, const fs::path& script,
                                    const fs::path& record,
                                    std::optional<Json> repl_tools = Json()) {
  Config config;
  config.provider = {"replay", {{"script", script.string()}, {"record", record.string()}}};
  config.toolboxes =
      std::vector<PluginRef>{{"files", {{"workspace", ws.string()}, {"tools", {"read", "write"}}}}};
  if (repl_tools) {
    Json options = {{"workspace", ws.string()}, {"timeout", 120}, {"offer", "always"}};
    if (!repl_tools->is_null()) options["tools"] = *repl_tools;
    config.toolboxes->push_back({"repl", std::move(options)});
  }
  config.plugin_dirs = {KERNEX_BENCH_PLUGIN_DIR};
  config.data_dir = dir / "data";
  config.limits.budgets.max_turns = 200;
  auto kernel = Kernel::create(std::move(config));
  if (!kernel) fail_with(kernel.error().describe());
  return std::move(*kernel);
}

RunResult run(Kernel& kernel, const fs::path& script, const std::string& message,
              const StreamSink& sink = {}) {
  RunOptions options;
  options.provider_options = {{"script", script.string()}};
  options.sink = sink;
  auto r = kernel.run(Request::from_text("bench", message), options);
  if (!r) fail_with(r.error().describe());
  for (const auto& call : r->tool_calls) {
    if (call.result.is_error) fail_with(call.call.name + ": " + call.result.content);
  }
  return *r;
}

// (a) In one eval_code, alternately: the bare way (open().read() of the file in the same worker
// plus one kernel round trip, a call the kernel refuses at once) and tools.read() of it, both timed
// in Python; the kernel's own handling of each read (ToolRun -> ToolResult) beside them.
void read_from_code(const fs::path& dir, int reads) {
  const fs::path ws = dir / "ws";
  fs::create_directories(ws);
  const auto bytes = write_big_log(ws / "big.log");
  const std::string code =
      "import time\nbare, via = [], []\nfor i in range(" + std::to_string(reads) +
      "):\n"
      "    t = time.perf_counter()\n"
      "    with open('big.log') as f:\n"
      "        s = f.read()\n"
      "    try:\n"
      "        tools.call('no_such_tool')\n"
      "    except ToolError:\n"
      "        pass\n"
      "    bare.append((time.perf_counter() - t) * 1e3)\n"
      "    t = time.perf_counter()\n"
      "    r = tools.read(file_path='big.log')\n"
      "    via.append((time.perf_counter() - t) * 1e3)\n"
      "    assert r['content'] == s and r['lines'] == 51426, 'not the whole file'\n"
      "submit_result({'bare': bare, 'read': via})\n";
  const fs::path script = dir / "read.jsonl";
  sc::write_script(script,
                   {sc::calls_line({{{"name", "eval_code"}, {"arguments", {{"code", code}}}}}),
                    sc::text_line("done")});
  auto kernel = make_kernel(dir, ws, script, dir / "read-requests.jsonl");
  std::mutex mu;
  std::map<std::string, Clock::time_point> started;
  std::vector<double> kernel_ms;
  const StreamSink sink = [&](const StreamEvent& e) {
    if (e.tool_name != "read") return;
    std::lock_guard lock(mu);
    if (e.kind == StreamEvent::Kind::ToolRun) started[e.tool_call_id] = Clock::now();
    if (e.kind == StreamEvent::Kind::ToolResult && started.contains(e.tool_call_id))
      kernel_ms.push_back(us_since(started[e.tool_call_id]) / 1000);
  };
  const RunResult r = run(*kernel, script, "go", sink);
  if (!r.result || !r.result->is_object() || !r.result->contains("read"))
    fail_with("the read bench's code submitted nothing: " +
              (r.tool_calls.empty() ? std::string("no call") : r.tool_calls[0].result.content));
  auto bare = (*r.result)["bare"].get<std::vector<double>>();
  auto via = (*r.result)["read"].get<std::vector<double>>();
  // The first of each warms caches (the sandbox's policy, the page cache): left out.
  bare.erase(bare.begin());
  via.erase(via.begin());
  if (!kernel_ms.empty()) kernel_ms.erase(kernel_ms.begin());
  std::printf(
      "read %.1f MB from code      median %8.2f ms   bare open().read() + a kernel round trip "
      "%6.2f ms   ratio %.2f  (the kernel's side of read %.2f ms; %zu reads, trajectory on)\n",
      static_cast<double>(bytes) / 1e6, median(via), median(bare), median(via) / median(bare),
      median(kernel_ms), via.size());
}

// (c) The first import of a servers/ module (the tree the kernel generated for the run's tools:
// servers/__init__.py, servers/kernel/__init__.py, servers/kernel/read.py), timed in Python, in
// a new worker each run; beside it, in the same worker, the first import of the same module's
// text copied into the workspace (one plain module, found on sys.path as the user's own code
// would be). Each import is of a module not imported before (its name made unique per run).
void first_import(const fs::path& dir, int runs) {
  const fs::path ws = dir / "ws";
  fs::create_directories(ws);
  std::vector<double> tree_ms, plain_ms;
  for (int i = 0; i < runs; ++i) {
    const std::string plain = "plain_read_" + std::to_string(i);
    const std::string code =
        "import importlib, os, sys, time\n"
        "t = time.perf_counter()\n"
        "import servers.kernel.read as r\n"
        "tree = (time.perf_counter() - t) * 1e3\n"
        "assert callable(r.read)\n"
        "src = open(os.path.join(SERVERS_DIR, 'kernel', 'read.py')).read()\n"
        "with open('" +
        plain +
        ".py', 'w') as f:\n"
        "    f.write(src)\n"
        "sys.path.insert(0, os.getcwd())\n"
        "importlib.invalidate_caches()\n"
        "t = time.perf_counter()\n"
        "p = importlib.import_module('" +
        plain +
        "')\n"
        "bare = (time.perf_counter() - t) * 1e3\n"
        "submit_result({'tree': tree, 'plain': bare})\n";
    const fs::path script = dir / ("import-" + std::to_string(i) + ".jsonl");
    sc::write_script(script,
                     {sc::calls_line({{{"name", "eval_code"}, {"arguments", {{"code", code}}}}}),
                      sc::text_line("done")});
    // A kernel per run: a new REPL worker, so the import is its first.
    auto kernel = make_kernel(dir, ws, script, dir / ("import-" + std::to_string(i) + ".rec"));
    const RunResult r = run(*kernel, script, "go");
    if (!r.result || !r.result->is_object() || !r.result->contains("tree"))
      fail_with("the import bench's code submitted nothing: " +
                (r.tool_calls.empty() ? std::string("no call") : r.tool_calls[0].result.content));
    tree_ms.push_back((*r.result)["tree"].get<double>());
    plain_ms.push_back((*r.result)["plain"].get<double>());
  }
  std::printf(
      "first import of servers.kernel.read  median %6.2f ms   the same module's text imported "
      "from the workspace %6.2f ms   (%d new workers; target <= 5 ms)\n",
      median(tree_ms), median(plain_ms), runs);
}

// (b) Issue 20's task with the built-in tools: copy the server errors of a 1.7 MB log into
// errors.log. Code: one eval_code reads the file with tools.read, filters it and calls
// tools.write. Direct: the model reads the file itself with read, in pages that fit the model's
// cut view (offset/limit; each page joins the conversation), then calls write. Also the figure
// against one direct read, cut to the model's view (which could not even find the errors).
enum class Way { Code, DirectPaged, DirectOneRead };

// Tokens as bytes / 4 of each request as recorded, with a tool result counted once: the replay
// provider's record writes each tool message's text twice (`content` and `tool_result.content`),
// while a chat API is sent it once. Both ways are counted alike.
std::uint64_t model_tokens(const std::vector<std::string>& requests) {
  std::uint64_t tokens = 0;
  for (const auto& line : requests) {
    Json request = Json::parse(line, nullptr, false);
    if (request.is_object() && request.contains("messages") && request["messages"].is_array()) {
      for (auto& m : request["messages"]) {
        if (m.is_object() && m.contains("tool_result") && m["tool_result"].is_object())
          m["tool_result"].erase("content");
      }
    }
    tokens += (request.dump().size() + 3) / 4;
  }
  return tokens;
}

std::uint64_t scenario_tokens(const fs::path& dir, Way way, std::size_t* requests = nullptr) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  const fs::path ws = dir / "ws";
  fs::create_directories(ws);
  const sc::AccessLog log = sc::write_access_log(ws / "access.log");
  const Json write = {{"name", "write"},
                      {"arguments", {{"file_path", "errors.log"}, {"content", log.errors}}}};
  std::vector<Json> lines;
  if (way == Way::Code) {
    const std::string code =
        "r = tools.read(file_path='access.log')\n"
        "errors = [l for l in r['content'].splitlines() if ' status=500 ' in l]\n"
        "tools.write(file_path='errors.log', content='\\n'.join(errors) + '\\n')\n"
        "print(r['lines'], 'lines read;', len(errors), 'errors written to errors.log')\n";
    lines.push_back(sc::calls_line({{{"name", "eval_code"}, {"arguments", {{"code", code}}}}}));
  } else if (way == Way::DirectOneRead) {
    lines.push_back(
        sc::calls_line({{{"name", "read"}, {"arguments", {{"file_path", "access.log"}}}}}));
    lines.push_back(sc::calls_line({write}));
  } else {
    constexpr int kPage = 300;  // lines of ~86 bytes: under the files toolbox's 30 000 cut
    for (int first = 1; first <= 20'000; first += kPage) {
      lines.push_back(sc::calls_line(
          {{{"name", "read"},
            {"arguments", {{"file_path", "access.log"}, {"offset", first}, {"limit", kPage}}}}}));
    }
    lines.push_back(sc::calls_line({write}));
  }
  lines.push_back(sc::text_line("21 server errors, copied to errors.log."));
  const fs::path script = dir / "script.jsonl", record = dir / "requests.jsonl";
  sc::write_script(script, lines);
  // Each way offers the model what it uses: code, the repl toolbox's eval_code only (its `tools`
  // option) beside read and write, which a run must offer for code to call them; direct calls,
  // read and write alone.
  auto kernel = make_kernel(
      dir, ws, script, record,
      way == Way::Code ? std::optional<Json>(Json::array({"eval_code"})) : std::nullopt);
  run(*kernel, script, "Copy the server errors (status 500) of access.log into errors.log.");
  std::ifstream in(record);
  std::vector<std::string> recorded;
  for (std::string line; std::getline(in, line);) recorded.push_back(line);
  if (requests) *requests = recorded.size();
  std::ifstream written(ws / "errors.log");
  std::string got((std::istreambuf_iterator<char>(written)), {});
  if (got != log.errors) fail_with("scenario: errors.log is not the log's errors");
  if (way == Way::Code && std::any_of(recorded.begin(), recorded.end(), [](const std::string& r) {
        return r.find(sc::kMiddleOfLog) != std::string::npos;
      }))
    fail_with("scenario: the log reached the model from code");
  fs::remove_all(dir, ec);
  return model_tokens(recorded);
}

void builtin_scenario_tokens(const fs::path& dir) {
  std::size_t code_n = 0, paged_n = 0, one_n = 0;
  const auto code = scenario_tokens(dir / "code", Way::Code, &code_n);
  const auto paged = scenario_tokens(dir / "paged", Way::DirectPaged, &paged_n);
  const auto one = scenario_tokens(dir / "one", Way::DirectOneRead, &one_n);
  auto fewer = [&](std::uint64_t base) {
    return 100.0 * (1.0 - static_cast<double>(code) / static_cast<double>(base));
  };
  std::printf(
      "scenario tokens, built-in read: code %8llu   direct calls (paged reads) %10llu   %.2f %% "
      "fewer  (%zu vs %zu requests; one direct read cut to the model's view, which misses the "
      "errors: %llu, %.2f %% fewer; bytes/4, a tool result counted once; code offered eval_code, "
      "read and write, direct read and write)\n",
      static_cast<unsigned long long>(code), static_cast<unsigned long long>(paged), fewer(paged),
      code_n, paged_n, static_cast<unsigned long long>(one), fewer(one));
}

}  // namespace

void builtin_read_benches(int reads, bool tokens) {
  std::string tmpl = (fs::temp_directory_path() / "kernex-bench-read-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) fail_with("mkdtemp");
  const fs::path root = tmpl;
  read_from_code(root / "read", reads);
  first_import(root / "import", 7);
  if (tokens) builtin_scenario_tokens(root / "scenario");
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace kernex::bench
