// Full agentic turns through the kernel against a loopback OpenAI-format server, beside bare HTTP
// round trips to the same server through the same client code, interleaved in one run:
//   turn   Kernel::run: the model asks for one tool, the kernel runs an in-process tool (hooks,
//          permission rules, router), the model answers. Two provider calls per turn.
//   bare   kernex::http::Client::send of the very bodies the provider sent (captured from the
//          first turn), on one kept-alive connection, answered by the same responder.
//   tool   the in-process tool's execute() alone.
// Overhead per turn = turn - 2 x bare - tool: what the kernel and the provider plugin add (JSON
// building and parsing, context, loop, memory, trajectory). The same difference in the calling
// thread's CPU time is printed beside it: on a shared, loaded machine wall medians swing by 2x
// between runs, CPU time much less (a lone writer commits its own batch on its own thread). Setups:
// "bare" (no memory, no trajectory), "memory" and "trajectory" (one of them), "user" (SQLite memory
// and a trajectory file, as `kernex run` has them), and "memory-direct" (SQLite memory with every
// write its own commit: the path before group commit, beside "memory" in the same run),
// "memory-hot" (SQLite memory, one conversation for every turn: a hot session whose history grows
// to the 50-message window, then drops its oldest, as `kernex run` does) and "memory-hot-full"
// (the same with KERNEX_MEMORY_HOT=off: every build reads its history again, statement by
// statement in their own read transactions, the path before the hot history). Two floors:
// "memory-floor" (a bare kernel's turn with the very statements the `memory` setup ran, recorded
// with their values and replayed around it, each prepared once, on a copy of its file: the SQL a
// turn with memory runs, at SQLite's own price, without the store's code) and "commit-floor" (a
// bare kernel's turn and one one-row commit: the least a turn that keeps anything can add). A
// trajectory is one new file per run: on ext4 creating it can cost far more than the rest of the
// turn (0.3-0.9 ms on the 2-core dev VM, where inode allocation skips recently deleted inodes and
// every run of this bench deletes thousands of files), so the trajectory setups vary run to run.
// Usage: turn [TURNS [bare|memory|memory-direct|memory-hot|memory-hot-full|memory-floor|
// commit-floor|trajectory|user]] (default 5000 turns, every setup). `taskset -c 0` pins the whole
// process (kernel, client and server threads) to one core.
#include <sqlite3.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "../tests/support/fake_http_server.hpp"
#include "kernex/http/client.hpp"
#include "kernex/kernel.hpp"
#include "kernex/log.hpp"
#include "kernex/sqlite_checkpointer.hpp"
#include "kernex/sqlite_wal_writes.hpp"

#include "bench_util.hpp"
#include "openai_replies.hpp"
#include "sql_replay.hpp"

namespace {

using kernex::bench::median;
using kernex::bench::RecordedStatement;
using kernex::bench::us_since;
[[noreturn]] void die(const std::string& what) { kernex::bench::die("turn", what); }

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kernex::Json;
using Server = kernex::test::FakeHttpServer;

// The model: a tool call first, the answer once the tool's result is in. Both replies are built
// once; the server still parses every body, for bare round trips as for turns.
class Model {
 public:
  Model()
      : call_(kernex::bench::openai_tool_call("lookup", Json{{"key", "answer"}}, {30, 8})),
        text_(kernex::bench::openai_text("It is 42.", {40, 5})) {}
  Server::Reply operator()(const Server::Recorded& req) const {
    const Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.contains("messages") || body["messages"].empty()) {
      return Server::json(400, R"({"error":{"message":"bad body"}})");
    }
    return body["messages"].back().value("role", "") == "tool" ? text_ : call_;
  }

 private:
  Server::Reply call_, text_;
};

// An in-process tool: a table lookup, no I/O.
class LookupTool final : public kernex::ToolExecutor {
 public:
  kernex::Result<std::vector<kernex::ToolSpec>> list_tools(const kernex::Context&) override {
    return std::vector<kernex::ToolSpec>{{"lookup",
                                          "Looks a key up in a small table",
                                          Json{{"type", "object"},
                                               {"properties", {{"key", {{"type", "string"}}}}},
                                               {"required", {"key"}}},
                                          {}}};
  }
  kernex::Result<kernex::ToolResult> execute(const kernex::Context&, const kernex::RunHandles&,
                                             const kernex::ToolCall& call) override {
    const std::string key = call.arguments.value("key", "");
    return kernex::ToolResult{call.id, call.name, key == "answer" ? "42" : "unknown", false};
  }
};

struct Figures {
  double turn_us, bare_us, tool_us;
};

// The calling thread's CPU time, in microseconds.
double thread_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct Setup {
  const char* name;
  const char* label;
  bool memory;
  bool trajectory;
  bool direct = false;  // KERNEX_GROUP_COMMIT=off: every memory write commits alone (the baseline)
  bool hot = false;     // one conversation for every turn (else a new one each turn)
  bool full = false;    // KERNEX_MEMORY_HOT=off: no hot history (the baseline of `hot`)
  enum class Floor { None, MemorySql, OneCommit } floor = Floor::None;
};

// A kernel on the fake model with the setup's memory and trajectory, and the lookup tool.
std::unique_ptr<kernex::Kernel> make_kernel(const Setup& setup, Server& server,
                                            const fs::path& root) {
  ::setenv("KERNEX_BENCH_KEY", "sk-bench", 1);
  const Json provider_options = {{"base_url", server.url("/v1")},
                                 {"api_key_env", "KERNEX_BENCH_KEY"},
                                 {"model", "gpt-4o-mini"}};
  kernex::Config config;
  config.plugin_dirs = {KERNEX_BENCH_PLUGIN_DIR};
  config.provider = {"openai", provider_options};
  config.toolboxes = std::vector<kernex::PluginRef>{};
  config.data_dir = root / (std::string("data-") + setup.name);
  config.system_prompt = "You are a helpful assistant. Use the lookup tool for facts.";
  config.trajectories = setup.trajectory;
  if (setup.memory) config.memory = kernex::PluginRef{"sqlite", Json::object()};
  if (setup.direct)
    ::setenv("KERNEX_GROUP_COMMIT", "off", 1);
  else
    ::unsetenv("KERNEX_GROUP_COMMIT");
  // The store reads it once, when made: set for this kernel only (KERNEX_MEMORY_HOT=off in the
  // bench's own environment turns the hot history off for every setup, the baseline binary).
  const char* hot_before = std::getenv("KERNEX_MEMORY_HOT");
  const bool restore = setup.full && hot_before == nullptr;
  if (setup.full) ::setenv("KERNEX_MEMORY_HOT", "off", 1);
  auto made = kernex::Kernel::create(std::move(config));
  if (restore) ::unsetenv("KERNEX_MEMORY_HOT");
  if (!made) die(made.error().describe());
  return std::move(*made);
}

// The bodies one turn sends (`turn` runs it), to be replayed by the bare client.
template <class Turn>
std::vector<kernex::http::Request> recorded_turn(Server& server, Turn& turn) {
  server.keep_requests(true);
  const std::size_t before = server.requests().size();
  turn();
  const auto recorded = server.requests();
  server.keep_requests(false);
  if (recorded.size() != before + 2)
    die("a turn made " + std::to_string(recorded.size() - before) + " requests");
  std::vector<kernex::http::Request> bare_requests;
  for (std::size_t i = before; i < recorded.size(); ++i) {
    kernex::http::Request r;
    r.url = server.url(recorded[i].target);
    r.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer sk-bench"}};
    r.body = recorded[i].body;
    bare_requests.push_back(std::move(r));
  }
  return bare_requests;
}

struct Samples {
  std::vector<double> turn_us, bare_us, tool_us;
  std::vector<double> turn_cpu_us, bare_cpu_us;  // the calling thread's CPU time
  double turn_total = 0, bare_total = 0, wall_s = 0;
};

Figures report(const Setup& setup, int turns, const Samples& s) {
  Figures f{median(s.turn_us), median(s.bare_us), median(s.tool_us)};
  const double overhead = f.turn_us - 2 * f.bare_us - f.tool_us;
  const double loop_rps = 2e6 / f.turn_us, bare_rps = 1e6 / f.bare_us;
  std::printf("%s\n", setup.label);
  std::printf("  turn   median %7.1f us  (%.0f turns/s; mean %.1f us)\n", f.turn_us,
              1e6 / f.turn_us, s.turn_total / turns);
  std::printf("  bare   median %7.1f us  round trip (mean %.1f us)   tool %.2f us\n", f.bare_us,
              s.bare_total / (2.0 * turns), f.tool_us);
  std::printf("  kernel overhead per turn %6.1f us   (turn - 2 x bare - tool)\n", overhead);
  const double turn_cpu = median(s.turn_cpu_us), bare_cpu = median(s.bare_cpu_us);
  std::printf("  thread CPU: turn %.1f us, bare %.1f us; kernel CPU per turn %6.1f us\n", turn_cpu,
              bare_cpu, turn_cpu - 2 * bare_cpu - f.tool_us);
  std::printf("  requests/s in loop %7.0f   bare %7.0f   ratio %.0f%%   (%d turns, %.1f s)\n",
              loop_rps, bare_rps, 100.0 * loop_rps / bare_rps, turns, s.wall_s);
  return f;
}

// Work timed with each turn, before and after it (the memory floor's replayed SQL).
struct AroundTurn {
  std::function<void()> before, after;
};

// A turn through the kernel against the same two requests bare and the tool called directly,
// interleaved, after 200 warm-up rounds.
Figures measure(const Setup& setup, int turns, Server& server, const fs::path& root,
                const AroundTurn& around = {}) {
  auto kernel = make_kernel(setup, server, root);
  auto tool = std::make_shared<LookupTool>();
  kernel->add_toolbox(tool);
  // Every turn is the first exchange of its own conversation, so bodies keep one size; or, hot,
  // every turn is the next of one conversation, whose bodies keep one size once its history
  // fills the window (the bare bodies are taken after the warm-up).
  int sender = 0;
  auto turn = [&] {
    kernex::Request request;
    request.sender_id = "user-" + std::to_string(setup.hot ? 0 : ++sender);
    request.text = "What is the answer?";
    if (around.before) around.before();
    auto r = kernel->run(request);
    if (!r) die(r.error().describe());
    if (r->text != "It is 42." || r->tool_calls.size() != 1) die("unexpected turn: " + r->text);
    if (around.after) around.after();
  };
  for (int i = 0; i < 200; ++i) turn();
  const std::vector<kernex::http::Request> bare_requests = recorded_turn(server, turn);
  kernex::http::Client client;
  auto bare = [&](const kernex::http::Request& r) {
    auto got = client.send(r);
    if (!got || got->status != 200) die("bare round trip failed");
  };
  kernex::Context tool_context("What is the answer?");
  const kernex::ToolCall call{"call_1", "lookup", Json{{"key", "answer"}}};
  for (int i = 0; i < 200; ++i) bare(bare_requests[i % 2]);
  Samples s;
  s.turn_us.reserve(turns);
  s.bare_us.reserve(2 * turns);
  s.tool_us.reserve(turns);
  const auto wall = Clock::now();
  for (int i = 0; i < turns; ++i) {
    double cpu = thread_cpu_us();
    auto t = Clock::now();
    turn();
    s.turn_us.push_back(us_since(t));
    s.turn_cpu_us.push_back(thread_cpu_us() - cpu);
    s.turn_total += s.turn_us.back();
    for (const auto& r : bare_requests) {
      cpu = thread_cpu_us();
      t = Clock::now();
      bare(r);
      s.bare_us.push_back(us_since(t));
      s.bare_cpu_us.push_back(thread_cpu_us() - cpu);
      s.bare_total += s.bare_us.back();
    }
    t = Clock::now();
    (void)tool->execute(tool_context, {}, call);
    s.tool_us.push_back(us_since(t));
  }
  s.wall_s = us_since(wall) / 1e6;
  return report(setup, turns, s);
}

// ---- The floors of a turn with SQLite memory, measured as `measure` does ----

// A turn's statements: those before its write batch (the context build's reads), and the rest.
struct RecordedTurn {
  std::vector<RecordedStatement> reads, writes;
};

RecordedTurn split_turn(std::vector<RecordedStatement> all) {
  const auto write = std::find_if(all.begin(), all.end(), [](const RecordedStatement& st) {
    return st.sql.starts_with("BEGIN IMMEDIATE");
  });
  RecordedTurn t;
  t.reads.assign(std::make_move_iterator(all.begin()), std::make_move_iterator(write));
  t.writes.assign(std::make_move_iterator(write), std::make_move_iterator(all.end()));
  return t;
}

sqlite3* open_floor_db(const fs::path& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      kernex::sqlite_wal_vfs()) != SQLITE_OK)
    die("opening " + path.string() + ": " + sqlite3_errmsg(db));
  sqlite3_busy_timeout(db, 5000);  // the stores' default: a checkpoint may hold a lock a moment
  return db;
}

// A floor's connection, set up as the stores' writers are where the trace cannot see it: opened
// without SQLite's own mutex, the stores' VFS, and WAL checkpoints off the commit (a thread of
// their own, kernex/sqlite_checkpointer.hpp) once `settings` (journal_mode=WAL among them) ran.
// Members go in reverse: the checkpointer, then the replayer's statements, then the connection.
class FloorDb {
 public:
  FloorDb(const fs::path& path, const std::vector<RecordedStatement>& settings)
      : db_(open_floor_db(path), &sqlite3_close), replay_(db_.get()) {
    for (const auto& st : settings) replay_.run(st);
    checkpoints_ = kernex::SqliteCheckpointer::attach(db_.get(), {});
    if (!checkpoints_) die("no WAL checkpointer on " + path.string());
  }
  kernex::bench::PreparedStatement prepare(const RecordedStatement& st) {
    return replay_.prepare(st);
  }
  void run(const kernex::bench::PreparedStatement& st) { replay_.run(st); }

 private:
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> db_;
  kernex::bench::SqlReplayer replay_;
  std::unique_ptr<kernex::SqliteCheckpointer> checkpoints_;
};

// The file as the recorded turns found it: a page-for-page copy (backup API).
void copy_database(const fs::path& from, const fs::path& to) {
  sqlite3* src = open_floor_db(from);
  sqlite3* dst = open_floor_db(to);
  sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
  if (b == nullptr || sqlite3_backup_step(b, -1) != SQLITE_DONE) die("copying " + from.string());
  sqlite3_backup_finish(b);
  sqlite3_close(src);
  sqlite3_close(dst);
}

// What the `memory` setup's kernel runs on its file: its connections' PRAGMAs (from opening to
// the end of a warm-up), then `n` turns, each a new conversation, their statements recorded with
// their values. The file is copied between the two, as the recorded turns found it.
struct Recorded {
  std::vector<RecordedStatement> settings;
  std::vector<RecordedTurn> turns;
};

Recorded record_memory_turns(int n, Server& server, const fs::path& root, const fs::path& copy) {
  const Setup memory{"floor-recorded", "", true, false};
  Recorded out;
  // Traced from here on, this kernel's connections only: the other setups' are opened untraced.
  kernex::bench::install_sql_recorder("floor-recorded/memory.db");
  kernex::bench::start_recording();
  auto kernel = make_kernel(memory, server, root);
  kernel->add_toolbox(std::make_shared<LookupTool>());
  int sender = 0;
  const auto turn = [&] {
    kernex::Request request;
    request.sender_id = "recorded-" + std::to_string(++sender);
    request.text = "What is the answer?";
    if (auto r = kernel->run(request); !r) die(r.error().describe());
  };
  for (int i = 0; i < 200; ++i) turn();
  std::vector<RecordedStatement> opening = kernex::bench::stop_recording();
  copy_database(root / "data-floor-recorded" / "memory.db", copy);
  std::set<const void*> connections;  // the store's that ran the turns (not its checkpointer's)
  for (int i = 0; i < n; ++i) {
    kernex::bench::start_recording();
    turn();
    auto statements = kernex::bench::stop_recording();
    for (const auto& st : statements) connections.insert(st.connection);
    out.turns.push_back(split_turn(std::move(statements)));
  }
  for (auto& st : opening)
    if (st.sql.starts_with("PRAGMA") && connections.contains(st.connection))
      out.settings.push_back(std::move(st));
  kernex::bench::remove_sql_recorder();
  return out;
}

// A bare kernel's turn with the `memory` setup's own statements around it, replayed on a copy of
// its file, each prepared once: what SQLite memory costs a turn at SQLite's own price, without the
// store's code. The context build's reads run before the turn, its write batch after.
Figures measure_memory_floor(const Setup& setup, int turns, Server& server, const fs::path& root) {
  const fs::path copy = root / "floor-memory.db";
  const Recorded recorded = record_memory_turns(turns + 201, server, root, copy);  // + warm-up
  FloorDb replay(copy, recorded.settings);
  // Looked up before the clock runs: the timed replay only binds and steps.
  struct ReadyTurn {
    std::vector<kernex::bench::PreparedStatement> reads, writes;
  };
  std::vector<ReadyTurn> ready;
  for (const RecordedTurn& t : recorded.turns) {
    ReadyTurn& r = ready.emplace_back();
    for (const auto& st : t.reads) r.reads.push_back(replay.prepare(st));
    for (const auto& st : t.writes) r.writes.push_back(replay.prepare(st));
  }
  Figures f{};
  {
    std::size_t next = 0;
    std::vector<double> sql_us, reads_us, writes_us;
    Clock::time_point started;
    const AroundTurn around{[&] {
                              started = Clock::now();
                              for (const auto& st : ready.at(next).reads) replay.run(st);
                              reads_us.push_back(us_since(started));
                            },
                            [&] {
                              started = Clock::now();
                              for (const auto& st : ready.at(next++).writes) replay.run(st);
                              writes_us.push_back(us_since(started));
                              sql_us.push_back(reads_us.back() + writes_us.back());
                            }};
    f = measure(setup, turns, server, root, around);
    std::printf(
        "  the recorded SQL alone: median %.1f us a turn (%zu statements a turn): the "
        "context build's reads %.1f us, the write batch %.1f us\n",
        median(sql_us), recorded.turns.back().reads.size() + recorded.turns.back().writes.size(),
        median(reads_us), median(writes_us));
  }
  return f;
}

// A bare kernel's turn and one commit of one row after it (WAL, synchronous=NORMAL as the store's
// default, the stores' VFS): the least a turn that keeps its exchange can add.
Figures measure_commit_floor(const Setup& setup, int turns, Server& server, const fs::path& root) {
  const auto statement = [](const char* sql) { return RecordedStatement{sql, {}}; };
  FloorDb replay(root / "floor-commit.db",
                 {statement("PRAGMA journal_mode=WAL"), statement("PRAGMA synchronous=NORMAL"),
                  statement("CREATE TABLE t (x TEXT)")});
  Figures f{};
  {
    const RecordedStatement begin{"BEGIN IMMEDIATE", {}}, commit{"COMMIT", {}};
    const RecordedStatement insert{"INSERT INTO t (x) VALUES (?)",
                                   {{1, std::string("What is the answer?")}}};
    const std::vector<kernex::bench::PreparedStatement> one_commit = {
        replay.prepare(begin), replay.prepare(insert), replay.prepare(commit)};
    const AroundTurn around{{}, [&] {
                              for (const auto& st : one_commit) replay.run(st);
                            }};
    f = measure(setup, turns, server, root, around);
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);  // as the `kernex` program sets its process up
  const int turns = argc > 1 ? std::max(100, std::atoi(argv[1])) : 5000;
  std::string tmpl = (fs::temp_directory_path() / "kernex-bench-turn-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) die("mkdtemp");
  const fs::path root = tmpl;

  // A hot session past the window logs each turn that it drops its oldest messages.
  kernex::set_log_sink([](kernex::LogLevel, std::string_view) {});
  Server server;
  Model model;
  server.set_responder([&model](const Server::Recorded& req) { return model(req); });

  const Setup setups[] = {
      {"bare", "bare kernel (no memory, no trajectory)", false, false},
      {"memory", "SQLite memory, no trajectory", true, false},
      {"memory-direct",
       "SQLite memory, no trajectory, each write its own commit (KERNEX_GROUP_COMMIT=off, before "
       "group commit)",
       true, false, true},
      {"memory-hot", "SQLite memory, one conversation for every turn (a hot session)", true, false,
       false, true},
      {"memory-hot-full",
       "SQLite memory, one conversation for every turn, no hot history (KERNEX_MEMORY_HOT=off, "
       "before it)",
       true, false, false, true, true},
      {"memory-floor",
       "floor of SQLite memory: a bare kernel's turn with the `memory` setup's own statements "
       "replayed around it (recorded with their values, each prepared once, on a copy of its file)",
       false, false, false, false, false, Setup::Floor::MemorySql},
      {"commit-floor",
       "floor of a turn that keeps its exchange: a bare kernel's turn and one one-row commit (WAL, "
       "synchronous=NORMAL, the store's default)",
       false, false, false, false, false, Setup::Floor::OneCommit},
      {"trajectory", "trajectory file, no memory", false, true},
      {"user", "user default (SQLite memory + trajectory file)", true, true},
  };
  const std::string only = argc > 2 ? argv[2] : "";
  for (const Setup& setup : setups) {
    if (!only.empty() && only != setup.name) continue;
    if (setup.floor == Setup::Floor::MemorySql)
      measure_memory_floor(setup, turns, server, root);
    else if (setup.floor == Setup::Floor::OneCommit)
      measure_commit_floor(setup, turns, server, root);
    else
      measure(setup, turns, server, root);
  }

  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
