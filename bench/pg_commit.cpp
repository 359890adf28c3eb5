// bench/pg_commit: the postgres memory store's saves from N concurrent runs, each turn's
// save_exchange (a user + assistant pair and its usage row), with group commit (pg::Writer: one
// transaction and about one round trip per batch) beside KERNEX_GROUP_COMMIT=off (each save its
// own transaction, one round trip per statement, as before), in the same run, phases interleaved.
// Transactions per save are counted by the server: the distinct xmin of the phase's message rows.
// Then the same savers open as many new conversations (a burst of new sessions): transactions per
// open, from the conversation rows' xmin. Both stores get a pool of max(4, N) connections. The
// PostgreSQL server is KERNEX_BENCH_PG_DSN or else KERNEX_TEST_PG_DSN; the bench creates its own
// database and drops it at exit. Usage: pg_commit [saves per phase, default 2000]
#include <libpq-fe.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernex/log.hpp"
#include "kernex/plugin_host.hpp"

#include "bench_util.hpp"
#include "pg_bench_db.hpp"

namespace {

using kernex::bench::Clock;
[[noreturn]] void die(const std::string& what) { kernex::bench::die("pg_commit", what); }

struct Phase {
  double saves_per_s = 0, tx_per_save = 0, p99_us = 0;
  double opens_per_s = 0, tx_per_open = 0;  // new sessions: open_conversation of a new key
};

std::string scalar(const std::string& dsn, const std::string& sql) {
  PGconn* c = PQconnectdb(dsn.c_str());
  PGresult* r = PQexec(c, sql.c_str());
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
    die(sql + ": " + PQresultErrorMessage(r));
  std::string v = PQgetvalue(r, 0, 0);
  PQclear(r);
  PQfinish(c);
  return v;
}

std::shared_ptr<kernex::MemoryStore> open_store(kernex::PluginHost& host, const std::string& dsn,
                                                int savers, bool direct) {
  if (direct) ::setenv("KERNEX_GROUP_COMMIT", "off", 1);
  auto s = host.create_memory("postgres",
                              kernex::Json{{"dsn", dsn}, {"pool_size", std::max(4, savers)}});
  ::unsetenv("KERNEX_GROUP_COMMIT");
  if (!s) die("loading the postgres memory plugin: " + s.error().describe());
  return *s;
}

// `savers` threads opening `total` new conversations between them (a burst of new sessions):
// each open creates its conversation row, alone (off) or in the writer's batches (on).
void open_burst(kernex::MemoryStore& store, const std::string& dsn, const std::string& tag,
                int savers, int total, Phase& p) {
  const auto scope = kernex::MemoryScope::local();
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < savers; ++t) {
    threads.emplace_back([&] {
      for (int i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
        auto id = store.open_conversation(scope, {"bench", tag + "-new-" + std::to_string(i), ""},
                                          std::chrono::minutes(60));
        if (!id) die("open_conversation: " + id.error().describe());
      }
    });
  }
  for (auto& th : threads) th.join();
  p.opens_per_s = total / std::chrono::duration<double>(Clock::now() - start).count();
  p.tx_per_open = std::stod(scalar(dsn,
                                   "SELECT count(DISTINCT xmin::text) FROM conversations WHERE "
                                   "sender_id LIKE '" +
                                       tag + "-new-%'")) /
                  total;
}

// `savers` threads, each on a conversation of its own, `total` saves between them.
Phase run(kernex::MemoryStore& store, const std::string& dsn, const std::string& tag, int savers,
          int total) {
  const auto scope = kernex::MemoryScope::local();
  std::vector<std::string> ids;
  for (int t = 0; t < savers; ++t) {
    auto id = store.open_conversation(scope, {"bench", tag + "-" + std::to_string(t), ""},
                                      std::chrono::minutes(60));
    if (!id) die("open_conversation: " + id.error().describe());
    ids.push_back(*id);
  }
  std::atomic<int> next{0};
  std::vector<std::vector<double>> latencies(savers);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < savers; ++t) {
    threads.emplace_back([&, t] {
      while (next.fetch_add(1) < total) {
        kernex::ExchangeRecord rec{ids[t],
                                   {kernex::ContextEntry::user("what is the time in Lisbon?"),
                                    kernex::ContextEntry::assistant("It is 14:05 in Lisbon.")},
                                   kernex::UsageRecord{ids[t], tag, "bench-model", "bench",
                                                       kernex::Usage{120, 30, 0, 0, 0.0001}}};
        const auto t0 = Clock::now();
        if (auto r = store.save_exchange(scope, rec); !r) die("save: " + r.error().describe());
        latencies[t].push_back(kernex::bench::us_since(t0));
      }
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Phase p;
  p.saves_per_s = total / seconds;
  p.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  const auto xacts = std::stod(
      scalar(dsn,
             "SELECT count(DISTINCT m.xmin::text) FROM messages m JOIN conversations c ON c.id = "
             "m.conversation_id WHERE c.sender_id LIKE '" +
                 tag + "-%'"));
  p.tx_per_save = xacts / total;
  open_burst(store, dsn, tag, savers, total, p);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  kernex::set_log_sink([](kernex::LogLevel, std::string_view) {});
  const int total = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (total <= 0) die("usage: pg_commit [saves per phase > 0]");
  const kernex::bench::PgBenchDb db("pg_commit", "pgcommit");
  kernex::PluginHost host = kernex::PluginHost::discover({KERNEX_BENCH_PLUGIN_DIR});
  std::printf(
      "pg_commit bench: postgres memory save_exchange (2 messages + usage), %d saves per "
      "phase, N concurrent savers\n",
      total);
  std::printf("  %-8s | %-32s | %-32s\n", "", "per-write transactions (off)", "group commit (on)");
  std::printf("  %-8s | %10s %9s %10s | %10s %9s %10s\n", "savers", "saves/s", "tx/save", "p99 us",
              "saves/s", "tx/save", "p99 us");
  int phase = 0;
  struct Row {
    int savers;
    Phase off, on;
  };
  std::vector<Row> opens;
  for (int savers : {1, 4, 16, 64}) {
    Phase off, on;
    {  // fresh stores per size, off first then on, on the same tables
      auto direct = open_store(host, db.dsn(), savers, true);
      off = run(*direct, db.dsn(), "p" + std::to_string(phase++), savers, total);
    }
    {
      auto batched = open_store(host, db.dsn(), savers, false);
      on = run(*batched, db.dsn(), "p" + std::to_string(phase++), savers, total);
    }
    std::printf("  %-8d | %10.0f %9.3f %10.0f | %10.0f %9.3f %10.0f\n", savers, off.saves_per_s,
                off.tx_per_save, off.p99_us, on.saves_per_s, on.tx_per_save, on.p99_us);
    opens.push_back({savers, off, on});
  }
  std::printf("new sessions: open_conversation of a new key (its conversation row), same runs\n");
  std::printf("  %-8s | %10s %9s | %10s %9s\n", "openers", "opens/s", "tx/open", "opens/s",
              "tx/open");
  for (const auto& [n, off, on] : opens) {
    std::printf("  %-8d | %10.0f %9.3f | %10.0f %9.3f\n", n, off.opens_per_s, off.tx_per_open,
                on.opens_per_s, on.tx_per_open);
  }
  return 0;
}
