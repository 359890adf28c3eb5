// bench/store: the postgres memory store (loaded with PluginHost, like the kernel does) against the
// bare libpq statements it needs, in one process and one database, rounds interleaved so both
// sides see the same tables, cache and vacuum state:
//  a) context build for one turn in a conversation of 10 000 stored messages: build_context with
//     every ContextNeeds part on (history window 50, message count, facts, earlier summaries,
//     recall 5, pending tasks, lessons, outcomes, the reused compaction summary) beside the same
//     statements prepared on one connection (store_bare.cpp);
//  b) save exchange: append_messages of a user + assistant pair plus record_usage, as the kernel
//     saves a turn, beside the same rows INSERTed in one transaction;
//  c) task claim: claim_due_tasks of 1 from 10 000 due tasks beside a bare
//     UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1).
// Printed beside (informational): the bare build and save again with unprepared statements (as
// pg::Connection sends them), the store's own claim statement prepared, each bare statement's
// mean, and the SQLite store's figures for the same three operations.
// The PostgreSQL server is KERNEX_BENCH_PG_DSN or else KERNEX_TEST_PG_DSN; the bench creates its
// own database there and drops it at exit. Usage: store
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "context_builder.hpp"
#include "kernex/log.hpp"
#include "kernex/plugin_host.hpp"
#include "text_rules.hpp"

#include "bench_util.hpp"
#include "conversation_data.hpp"
#include "pg_bench_db.hpp"
#include "store_bare.hpp"

namespace {

using kernex::bench::Clock;
using kernex::bench::median;
using kernex::bench::user_text;
[[noreturn]] void die(const std::string& what) { kernex::bench::die("store", what); }

constexpr int kMessages = 10000;
constexpr int kDueTasks = 10000;
constexpr int kRounds = 9;
constexpr int kBuildsPerRound = 40;
constexpr int kSavesPerRound = 100;
constexpr int kClaimsPerRound = 100;  // 9 rounds x 225 = 2 025 of the 10 000 claimed
constexpr int kLeaseS = 600;
const kernex::ConversationKey kKey{"bench", "user-1", ""};
const kernex::ConversationKey kSaveKey{"bench", "user-2", ""};

// ---- Data, the same for every store ----

template <class T>
T must(kernex::Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().describe());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// An earlier, closed conversation with a summary; the current one with kMessages messages; facts,
// lessons, outcomes and three future tasks of the sender; kDueTasks due tasks of other senders.
void seed(kernex::MemoryStore& store) {
  const auto earlier =
      must(store.open_conversation(kernex::MemoryScope::local(), kKey, std::chrono::minutes(120)),
           "open_conversation");
  must(store.append_messages(kernex::MemoryScope::local(), earlier,
                             {kernex::ContextEntry::user("the weather in city7 last week"),
                              kernex::ContextEntry::assistant("it rained")}),
       "append_messages");
  must(store.close_conversation(
           kernex::MemoryScope::local(), earlier,
           std::string("The user asked about the weather in city7; it rained.")),
       "close_conversation");
  const auto conv =
      must(store.open_conversation(kernex::MemoryScope::local(), kKey, std::chrono::minutes(120)),
           "open_conversation");
  for (int i = 0; i < kMessages / 2; i += 50) {
    must(store.append_messages(kernex::MemoryScope::local(), conv, kernex::bench::exchanges(i, 50)),
         "append_messages");
  }
  must(store.store_fact(kernex::MemoryScope::local(), "user-1", "name", "Bench"), "store_fact");
  must(store.store_fact(kernex::MemoryScope::local(), "user-1", "timezone", "UTC"), "store_fact");
  for (int i = 0; i < 5; ++i) {
    must(store.store_lesson(
             kernex::MemoryScope::local(),
             {"user-1", "style", "rule " + std::to_string(i) + ": answer briefly", "", 1, ""}),
         "store_lesson");
  }
  for (int i = 0; i < 15; ++i) {
    must(store.store_outcome(kernex::MemoryScope::local(),
                             {"user-1", "weather", i % 3 - 1, "lesson " + std::to_string(i),
                              "conversation", "", ""}),
         "store_outcome");
  }
  for (int i = 0; i < 3; ++i) {
    kernex::TaskSpec t{"bench",
                       "user-1",
                       "user-1",
                       "future reminder " + std::to_string(i),
                       "2099-01-0" + std::to_string(i + 1) + " 09:00:00",
                       std::nullopt,
                       "reminder",
                       "",
                       3};
    must(store.create_task(kernex::MemoryScope::local(), t), "create_task");
  }
  for (int i = 0; i < kDueTasks; ++i) {
    char due[32];  // one a second from 2020-01-01 00:00:00, all long past
    std::snprintf(due, sizeof due, "2020-01-01 %02d:%02d:%02d", i / 3600 % 24, i / 60 % 60, i % 60);
    kernex::TaskSpec t{"bench",    "t-" + std::to_string(i),
                       "t",        "due task " + std::to_string(i),
                       due,        std::nullopt,
                       "reminder", "",
                       3};
    must(store.create_task(kernex::MemoryScope::local(), t), "create_task");
  }
}

// The summary stands in for the overflow; after the first build it is reused from the store.
struct FixedSummarizer : kernex::Summarizer {
  kernex::Result<std::string> summarize(const std::string&) override {
    return std::string("Earlier: weather talk.");
  }
};

struct StoreSide {
  std::shared_ptr<kernex::MemoryStore> store;
  kernex::Limits limits;
  FixedSummarizer summarizer;
  kernex::ContextInputs in;
  std::string save_conv;
  int saved = 0;
};

void prepare(StoreSide& s) {
  s.limits.max_context_messages = 50;
  s.limits.compaction = kernex::CompactionStrategy::Summarize;
  s.in.store = s.store.get();
  s.in.key = kKey;
  s.in.system_prompt = "You are a benchmark.";
  s.in.limits = &s.limits;
  s.in.summarizer = &s.summarizer;
  s.save_conv = must(
      s.store->open_conversation(kernex::MemoryScope::local(), kSaveKey, std::chrono::minutes(120)),
      "open_conversation");
}

const kernex::Request& turn_request() {
  static const auto request =
      kernex::Request::from_text("user-1", "what about the weather in city7");
  return request;
}

double build_once(StoreSide& s) {
  const auto t0 = Clock::now();
  auto built = kernex::build_context(s.in, turn_request());
  const double us = kernex::bench::us_since(t0);
  if (!built) die(built.error().describe());
  if (built->context.history.size() != 50) die("history window is not 50");
  if (!built->compaction.summarized) die("the compaction summary was not used");
  return us;
}

double save_once(StoreSide& s) {
  const int n = s.saved++;
  const auto t0 = Clock::now();
  must(s.store->append_messages(kernex::MemoryScope::local(), s.save_conv,
                                {kernex::ContextEntry::user(user_text(n)),
                                 kernex::ContextEntry::assistant("saved answer")}),
       "append_messages");
  kernex::UsageRecord usage{s.save_conv, "user-2", "bench-model", "bench", {}};
  usage.usage.input_tokens = 120;
  usage.usage.output_tokens = 30;
  usage.usage.cost_usd = 0.0001;
  must(s.store->record_usage(kernex::MemoryScope::local(), usage), "record_usage");
  return kernex::bench::us_since(t0);
}

// A failing claim is reported in the table (the other figures still stand); -1 then.
std::string g_claim_error;
double claim_once(StoreSide& s) {
  const auto t0 = Clock::now();
  auto claimed = s.store->claim_due_tasks(kernex::MemoryScope::local(), "bench-worker",
                                          std::chrono::seconds(kLeaseS), 1);
  const double us = kernex::bench::us_since(t0);
  if (!claimed) {
    if (g_claim_error.empty()) g_claim_error = claimed.error().describe();
    return -1;
  }
  if (claimed->size() != 1)
    die("claim_due_tasks claimed " + std::to_string(claimed->size()) + " tasks, not 1");
  return us;
}

// The median of `n` calls of `op` (each returns its own time in us).
double timed(int n, const std::function<double()>& op) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(op());
  return median(v);
}

void row(const char* op, double plugin, double bare, double ratio, const char* target, bool met) {
  std::printf("  %-34s %10.1f %10.1f %8.2f   %-10s %s\n", op, plugin, bare, ratio, target,
              met ? "yes" : "NO");
}

// The request's words as both stores pick them (text_rules.cpp, shared with the SQLite store).
std::vector<std::string> request_words() {
  std::vector<std::string> words;
  const std::string quoted = kernex::sqlite::fts_query(turn_request().text, "\x1f");
  for (std::size_t start = 0; start < quoted.size();) {
    const std::size_t end = std::min(quoted.find('\x1f', start), quoted.size());
    words.push_back(
        quoted.substr(start + 1, end - start - 2));  // unquoted (these words hold no quote)
    start = end + 1;
  }
  return words;
}

// Each round's median per operation (us).
struct Samples {
  std::vector<double> pg_build, bare_build, pg_save, bare_save, pg_claim, bare_claim;
  std::vector<double> lite_build, lite_save, lite_claim, unprepared_build, unprepared_save;
};

// The sides against each other, interleaved: the plugins and bare libpq, prepared and not.
struct Sides {
  StoreSide& pg;
  StoreSide& lite;
  kernex::bench::BarePg& bare;
  const kernex::bench::BareTurn& turn;
};

double bare_build_us(Sides& x) {
  const auto t0 = Clock::now();
  x.bare.context_build(x.turn);
  return kernex::bench::us_since(t0);
}

void build_round(Sides& x, Samples& out) {
  out.pg_build.push_back(timed(kBuildsPerRound, [&] { return build_once(x.pg); }));
  out.bare_build.push_back(timed(kBuildsPerRound, [&] { return bare_build_us(x); }));
  out.lite_build.push_back(timed(kBuildsPerRound, [&] { return build_once(x.lite); }));
  x.bare.set_prepared(false);
  out.unprepared_build.push_back(timed(kBuildsPerRound, [&] { return bare_build_us(x); }));
  x.bare.set_prepared(true);
}

void save_round(Sides& x, Samples& out) {
  out.pg_save.push_back(timed(kSavesPerRound, [&] { return save_once(x.pg); }));
  out.bare_save.push_back(timed(kSavesPerRound, [&, n = 0]() mutable {
    const auto t0 = Clock::now();
    x.bare.save_exchange(x.pg.save_conv, "user-2", user_text(n++), "saved answer");
    return kernex::bench::us_since(t0);
  }));
  out.lite_save.push_back(timed(kSavesPerRound, [&] { return save_once(x.lite); }));
  x.bare.set_prepared(false);
  out.unprepared_save.push_back(timed(kSavesPerRound, [&, n = 0]() mutable {
    const auto t0 = Clock::now();
    x.bare.save_exchange(x.pg.save_conv, "user-2", user_text(n++), "unprepared answer");
    return kernex::bench::us_since(t0);
  }));
  x.bare.set_prepared(true);
}

void claim_round(Sides& x, Samples& out) {
  out.pg_claim.push_back(timed(kClaimsPerRound, [&] { return claim_once(x.pg); }));
  out.bare_claim.push_back(timed(kClaimsPerRound, [&] {
    const auto t0 = Clock::now();
    if (!x.bare.claim_one("bench-bare", kLeaseS)) die("bare claim found no due task");
    return kernex::bench::us_since(t0);
  }));
  out.lite_claim.push_back(timed(kClaimsPerRound, [&] { return claim_once(x.lite); }));
  for (int i = 0; i < kClaimsPerRound / 4; ++i) {
    if (!x.bare.claim_store_statement("bench-bare-store", kLeaseS))
      die("the store's claim statement found no task");
  }
}

void report(const Samples& m, kernex::bench::BarePg& bare) {
  const double b = median(m.pg_build), bb = median(m.bare_build);
  const double s = median(m.pg_save), bs = median(m.bare_save);
  const double c = median(m.pg_claim), bc = median(m.bare_claim);
  std::printf(
      "store bench: postgres memory plugin vs bare libpq, %d messages in one conversation, %d due "
      "tasks, "
      "medians of %d interleaved rounds\n",
      kMessages, kDueTasks, kRounds);
  std::printf("  %-34s %10s %10s %8s   %-10s %s\n", "operation", "plugin us", "bare us", "ratio",
              "target", "met?");
  row("a) context build (one turn)", b, bb, b / bb, "<= 3 x", b / bb <= 3.0);
  row("b) save exchange (+ usage)", s, bs, bs / s, ">= 0.50", bs / s >= 0.5);
  std::printf("  %-34s %10.0f %10.0f %8s   (exchanges/s; ratio above = plugin/bare throughput)\n",
              "", 1e6 / s, 1e6 / bs, "");
  if (c < 0) {
    std::printf("  %-34s %10s %10.1f   postgres claim_due_tasks failed: %s\n",
                "c) task claim (1 of 10 000 due)", "-", bc, g_claim_error.substr(0, 300).c_str());
  } else {
    row("c) task claim (1 of 10 000 due)", c, bc, c / bc, "none", true);
  }
  std::printf(
      "  bare without prepared statements (PQexecParams, like pg::Connection): build %.1f us, save "
      "%.1f us\n",
      median(m.unprepared_build), median(m.unprepared_save));
  std::printf("  bare statements, mean per call:\n%s", bare.breakdown().c_str());
  std::printf(
      "  sqlite plugin, same operations (informational): build %.1f us, save %.1f us, claim %.1f "
      "us\n",
      median(m.lite_build), median(m.lite_save), median(m.lite_claim));
}

}  // namespace

// Both stores seeded alike -> the bare libpq side set up for the same turn -> warm-up ->
// interleaved rounds of builds, saves and claims -> the medians against each other.
int main() {
  kernex::set_log_sink([](kernex::LogLevel, std::string_view) {});
  const kernex::bench::PgBenchDb db("store", "store");
  const std::string dsn = db.dsn();
  const std::filesystem::path sqlite_dir =
      std::filesystem::temp_directory_path() / ("kernex-bench-store-" + std::to_string(::getpid()));
  std::filesystem::remove_all(sqlite_dir);

  kernex::PluginHost host = kernex::PluginHost::discover({KERNEX_BENCH_PLUGIN_DIR});
  StoreSide pg, lite;
  pg.store = must(host.create_memory("postgres", kernex::Json{{"dsn", dsn}}),
                  "loading the postgres memory plugin");
  lite.store = must(
      host.create_memory("sqlite", kernex::Json{{"path", (sqlite_dir / "memory.db").string()}}),
      "loading the sqlite memory plugin");
  for (StoreSide* s : {&pg, &lite}) {
    seed(*s->store);
    prepare(*s);
  }
  const std::vector<std::string> words = request_words();
  kernex::bench::BarePg bare(dsn, words.size());
  kernex::bench::BareTurn turn;
  turn.channel = kKey.channel;
  turn.sender = kKey.sender_id;
  turn.project = kKey.project;
  turn.recall_words = words;
  turn.lessons = 50;

  // Warm-up: the first build stores the compaction summary; caches and prepared plans fill.
  for (int i = 0; i < 20; ++i) build_once(pg), build_once(lite), bare.context_build(turn);
  Sides sides{pg, lite, bare, turn};
  Samples samples;
  for (int round = 0; round < kRounds; ++round) {
    build_round(sides, samples);
    save_round(sides, samples);
    claim_round(sides, samples);
  }
  pg.store.reset();
  lite.store.reset();
  std::filesystem::remove_all(sqlite_dir);
  report(samples, bare);
  return 0;
}
