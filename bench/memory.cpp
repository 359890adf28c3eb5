// bench/memory: the SQLite memory store against the bare SQL it runs, in one process.
//  1. Context build for a conversation of 10 000 stored messages (history window 50, recall
//     5 hits, every ContextNeeds part on) beside the bare FTS5 query and the bare history
//     SELECT on the same file; and beside the same build by a store without the hot history
//     (KERNEX_MEMORY_HOT=off: every build reads the history again, each statement in its own
//     read transaction), on the same file, the builds alternated.
//  2. Save-exchange throughput (user + assistant, one transaction) beside a bare INSERT loop
//     doing the same two inserts per transaction with the same durability setting.
// Prints medians and ratios. Usage: memory [DIR] (default: a fresh temp dir, removed after).
#include <sqlite3.h>
#include <unistd.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "context_builder.hpp"
#include "kernex/log.hpp"
#include "kernex/plugin_host.hpp"

#include "bench_util.hpp"
#include "conversation_data.hpp"

namespace {

using kernex::bench::median;
using kernex::bench::user_text;
[[noreturn]] void die(const std::string& what) { kernex::bench::die("memory", what); }

using Clock = std::chrono::steady_clock;
constexpr int kMessages = 10000;
constexpr int kBuilds = 400;
constexpr int kSaveRounds = 7;
constexpr int kSavesPerRound = 400;

template <class F>
double time_us(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

sqlite3_stmt* prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK)
    die(sqlite3_errmsg(db));
  return s;
}

// Steps through every row reading the text columns, as a real caller would.
void drain(sqlite3_stmt* s, int columns) {
  std::size_t bytes = 0;
  while (sqlite3_step(s) == SQLITE_ROW) {
    for (int c = 0; c < columns; ++c) bytes += static_cast<std::size_t>(sqlite3_column_bytes(s, c));
  }
  sqlite3_reset(s);
  if (bytes == 0) die("a bare query returned nothing");
}

struct Figures {
  std::vector<double> builds, full_builds, fts, history;  // us
  std::vector<double> store_rate, bare_rate;              // exchanges/s
  std::size_t recall_hits = 0;                            // prompt lines of the last build
};

// 10 000 messages in one conversation (returned), and the sender's facts.
std::string seed(kernex::MemoryStore& store, const kernex::ConversationKey& key) {
  auto conv = store.open_conversation(kernex::MemoryScope::local(), key, std::chrono::minutes(120));
  if (!conv) die(conv.error().describe());
  for (int i = 0; i < kMessages / 2; i += 50) {
    if (auto r = store.append_messages(kernex::MemoryScope::local(), *conv,
                                       kernex::bench::exchanges(i, 50));
        !r)
      die(r.error().describe());
  }
  (void)store.store_fact(kernex::MemoryScope::local(), "user-1", "name", "Bench");
  (void)store.store_fact(kernex::MemoryScope::local(), "user-1", "timezone", "UTC");
  return *conv;
}

// 1. Context build, after 20 unmeasured ones: the store's, and `full`'s (no hot history) after
// each.
void context_builds(kernex::MemoryStore& store, kernex::MemoryStore& full,
                    const kernex::ConversationKey& key, Figures& f) {
  kernex::Limits limits;
  limits.max_context_messages = 50;
  kernex::ContextInputs in;
  in.store = &store;
  in.key = key;
  in.system_prompt = "You are a benchmark.";
  in.limits = &limits;
  const auto request = kernex::Request::from_text("user-1", "what about the weather in city7");
  kernex::ContextInputs full_in = in;
  full_in.store = &full;
  for (int i = 0; i < kBuilds + 20; ++i) {
    kernex::Result<kernex::BuiltContext> built, full_built;
    const double us = time_us([&] { built = kernex::build_context(in, request); });
    const double full_us = time_us([&] { full_built = kernex::build_context(full_in, request); });
    if (!built) die(built.error().describe());
    if (!full_built) die(full_built.error().describe());
    if (built->context.history.size() != 50) die("history window is not 50");
    if (built->context.history != full_built->context.history ||
        built->context.system_prompt != full_built->context.system_prompt)
      die("the hot build differs from the full one");
    if (i >= 20) f.builds.push_back(us), f.full_builds.push_back(full_us);
    f.recall_hits = static_cast<std::size_t>(
        std::count(built->context.system_prompt.begin(), built->context.system_prompt.end(), '\n'));
  }
}

// Its baseline: the two queries a build needs, bare on the same file.
void bare_queries(sqlite3* raw, const std::string& conv, Figures& f) {
  sqlite3_stmt* q_fts =
      prepare(raw,
              "SELECT m.seq, m.content, m.created_at FROM messages_fts f JOIN messages m "
              "ON m.seq = f.rowid WHERE messages_fts MATCH ? ORDER BY f.rowid DESC LIMIT 5");
  sqlite3_stmt* q_hist =
      prepare(raw,
              "SELECT role, content, tool_calls, tool_result, provider_state FROM messages "
              "WHERE conversation_id = ? ORDER BY seq DESC LIMIT 50");
  // What the store's query builder makes of the request: significant words, quoted, AND-ed
  // (the store widens to OR only when fewer than 5 messages match every word), newest first.
  const std::string phrase = "\"weather\" AND \"city7\"";
  sqlite3_bind_text(q_fts, 1, phrase.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q_hist, 1, conv.c_str(), -1, SQLITE_TRANSIENT);
  for (int i = 0; i < kBuilds + 20; ++i) {
    const double a = time_us([&] { drain(q_fts, 2); });
    const double b = time_us([&] { drain(q_hist, 2); });
    if (i >= 20) f.fts.push_back(a), f.history.push_back(b);
  }
  sqlite3_finalize(q_fts);
  sqlite3_finalize(q_hist);
}

// One exchange as two INSERTs in a transaction of its own.
void bare_exchange(sqlite3* raw, sqlite3_stmt* ins, const std::string& conv, int n) {
  sqlite3_exec(raw, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  const std::string u = user_text(n);
  for (const auto& [role, text] :
       {std::pair<const char*, const std::string*>{"user", &u}, {"assistant", nullptr}}) {
    sqlite3_bind_text(ins, 1, conv.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 2, role, -1, SQLITE_STATIC);
    if (text) {
      sqlite3_bind_text(ins, 3, text->c_str(), -1, SQLITE_STATIC);
    } else {
      sqlite3_bind_text(ins, 3, "saved answer", -1, SQLITE_STATIC);
    }
    if (sqlite3_step(ins) != SQLITE_DONE) die(sqlite3_errmsg(raw));
    sqlite3_reset(ins);
  }
  if (sqlite3_exec(raw, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) die(sqlite3_errmsg(raw));
}

// 2. Save throughput: the store's append against a bare two-INSERT transaction, by rounds.
void save_rates(kernex::MemoryStore& store, sqlite3* raw, Figures& f) {
  auto save_conv = store.open_conversation(kernex::MemoryScope::local(), {"bench", "user-2", ""},
                                           std::chrono::minutes(120));
  if (!save_conv) die(save_conv.error().describe());
  sqlite3_stmt* ins =
      prepare(raw, "INSERT INTO messages (conversation_id, role, content) VALUES (?, ?, ?)");
  int n = 0;
  for (int round = 0; round < kSaveRounds; ++round) {
    const double us_store = time_us([&] {
      for (int i = 0; i < kSavesPerRound; ++i, ++n) {
        auto r = store.append_messages(kernex::MemoryScope::local(), *save_conv,
                                       {kernex::ContextEntry::user(user_text(n)),
                                        kernex::ContextEntry::assistant("saved answer")});
        if (!r) die(r.error().describe());
      }
    });
    const double us_bare = time_us([&] {
      for (int i = 0; i < kSavesPerRound; ++i, ++n) bare_exchange(raw, ins, *save_conv, n);
    });
    f.store_rate.push_back(kSavesPerRound / (us_store / 1e6));
    f.bare_rate.push_back(kSavesPerRound / (us_bare / 1e6));
  }
  sqlite3_finalize(ins);
}

void print(const Figures& fig) {
  const double build = median(fig.builds), f = median(fig.fts), h = median(fig.history);
  const double sr = median(fig.store_rate), br = median(fig.bare_rate);
  std::printf(
      "memory bench: %d stored messages, history window 50, recall limit 5, synchronous=NORMAL "
      "(WAL)\n",
      kMessages);
  std::printf("  context build (all ContextNeeds)  median %8.1f us   (%zu prompt lines)\n", build,
              fig.recall_hits);
  std::printf("  ... without the hot history      median %8.1f us   (KERNEX_MEMORY_HOT=off)\n",
              median(fig.full_builds));
  std::printf("  bare FTS5 recall query            median %8.1f us\n", f);
  std::printf("  bare history SELECT (50 rows)     median %8.1f us\n", h);
  std::printf(
      "  ratio build / (fts + history)            %8.2f x   (target <= 3, build <= 1000 us)\n",
      build / (f + h));
  std::printf("  save exchange                     median %8.0f exchanges/s\n", sr);
  std::printf("  bare INSERT loop (2 rows/txn)     median %8.0f exchanges/s\n", br);
  std::printf("  ratio save / bare                        %8.2f     (target >= 0.50)\n", sr / br);
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const bool own_dir = argc < 2;
  const fs::path dir =
      own_dir ? fs::temp_directory_path() / ("kernex-bench-memory-" + std::to_string(::getpid()))
              : fs::path(argv[1]);
  fs::remove_all(dir);
  const fs::path db_path = dir / "memory.db";
  kernex::set_log_sink(
      [](kernex::LogLevel, std::string_view) {});  // overflow warnings on every build

  kernex::PluginHost host = kernex::PluginHost::discover({KERNEX_BENCH_PLUGIN_DIR});
  auto created = host.create_memory("sqlite", kernex::Json{{"path", db_path.string()}});
  if (!created) die(created.error().describe());
  auto store = *created;
  ::setenv("KERNEX_MEMORY_HOT", "off", 1);
  auto full = host.create_memory("sqlite", kernex::Json{{"path", db_path.string()}});
  ::unsetenv("KERNEX_MEMORY_HOT");
  if (!full) die(full.error().describe());
  const kernex::ConversationKey key{"bench", "user-1", ""};
  const std::string conv = seed(*store, key);
  Figures figures;
  context_builds(*store, **full, key, figures);
  full->reset();

  sqlite3* raw = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK)
    die("open");
  sqlite3_exec(raw, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", nullptr, nullptr,
               nullptr);
  bare_queries(raw, conv, figures);
  save_rates(*store, raw, figures);
  sqlite3_close(raw);
  store.reset();
  if (own_dir) fs::remove_all(dir);
  print(figures);
  return 0;
}
