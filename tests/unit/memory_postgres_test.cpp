// The PostgreSQL memory plugin's own cases: batched inserts, options, migrations racing, connection
// loss, timeouts, index use, and backups through the CLI that cross from SQLite to PostgreSQL.
// Behaviour shared with SQLite is the conformance suite's. Each test gets a fresh database
// (pg_test_db.hpp) and skips, saying why, when no server is configured.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <thread>

#include "kernex/plugin_host.hpp"
#include "pg_test_db.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::PgTestDb;
using testing::TempDir;

// The plugin host reports a factory's failure as a Plugin error caused by the store's own.
ErrorCode store_code(const Error& e) { return e.cause ? e.cause->code : e.code; }

class MemoryPostgres : public ::testing::Test {
 protected:
  void SetUp() override {
    if (db.dsn().empty()) GTEST_SKIP() << PgTestDb::skip_reason();
    store = open();
    ASSERT_TRUE(store);
  }
  std::shared_ptr<MemoryStore> open(Json options = Json::object()) {
    if (!options.contains("dsn")) options["dsn"] = db.dsn();
    auto s = host.create_memory("postgres", options);
    EXPECT_TRUE(s) << s.error().describe();
    return s ? *s : nullptr;
  }
  std::string conversation(MemoryStore& s, const std::string& sender = "alice",
                           const std::string& project = "") {
    auto id = s.open_conversation(kernex::MemoryScope::local(), {"cli", sender, project},
                                  std::chrono::minutes(120));
    EXPECT_TRUE(id) << id.error().describe();
    return id.value_or("");
  }
  TaskSpec task(std::string description, std::string due, std::string sender = "alice") {
    TaskSpec t;
    t.channel = "cli";
    t.sender_id = std::move(sender);
    t.reply_target = "chat-1";
    t.description = std::move(description);
    t.due_at = std::move(due);
    return t;
  }
  // Ends every other session on the test database, as a server restart or a network cut would.
  void kill_connections() {
    ASSERT_TRUE(
        db.exec("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = "
                "current_database() "
                "AND pid <> pg_backend_pid()"));  // (pid, 5000): waits until they are gone
  }

  PgTestDb db;
  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  std::shared_ptr<MemoryStore> store;
};

TEST_F(MemoryPostgres, ConversationsKeepInsertionOrderAndCount) {
  const std::string conv = conversation(*store);
  EXPECT_EQ(conversation(*store), conv);
  std::vector<ContextEntry> all;
  for (int i = 0; i < 20; ++i) {
    std::vector<ContextEntry> exchange{ContextEntry::user("u" + std::to_string(i)),
                                       ContextEntry::assistant("a" + std::to_string(i))};
    ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, exchange));
    all.insert(all.end(), exchange.begin(), exchange.end());
  }
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 6).value(),
            std::vector<ContextEntry>(all.end() - 6, all.end()));
  EXPECT_EQ(store->oldest_messages(kernex::MemoryScope::local(), conv, 3).value(),
            std::vector<ContextEntry>(all.begin(), all.begin() + 3));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 40u);
  // A long exchange (saved in several statements) keeps its order too.
  std::vector<ContextEntry> many;
  for (int i = 0; i < 2500; ++i) many.push_back(ContextEntry::user("m" + std::to_string(i)));
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conv, many));
  EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 2500).value(), many);
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 2540u);
  // An idle limit past any date still means "reuse".
  EXPECT_EQ(store
                ->open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                    std::chrono::minutes::max())
                .value(),
            conv);
  auto fresh = store->open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                        std::chrono::minutes(0));
  ASSERT_TRUE(fresh);
  EXPECT_NE(*fresh, conv);
}

TEST_F(MemoryPostgres, OptionsAreCheckedAndTyped) {
  const auto error_of = [&](Json options) {
    options["dsn"] = db.dsn();
    auto s = host.create_memory("postgres", options);
    EXPECT_FALSE(s);
    return s ? Error(ErrorCode::Internal, "") : s.error();
  };
  for (const char* key :
       {"pool_size", "statement_timeout_ms", "connect_timeout_s", "max_message_bytes"}) {
    for (Json bad : {Json(0), Json(-1), Json("4"), Json(1.5)}) {
      auto e = error_of(Json{{key, bad}});
      EXPECT_EQ(store_code(e), ErrorCode::Config) << key;
      EXPECT_THAT(e.describe(), HasSubstr(std::string("'") + key + "'"));
    }
  }
  auto unknown = error_of(Json{{"colour", "red"}});
  EXPECT_EQ(store_code(unknown), ErrorCode::Config);
  EXPECT_THAT(unknown.describe(), HasSubstr("unknown option 'colour'"));
  auto dsn = host.create_memory("postgres", Json{{"dsn", 5}});
  ASSERT_FALSE(dsn);
  EXPECT_THAT(dsn.error().describe(), HasSubstr("'dsn'"));
  // The kernel passes data_dir to every memory plugin: accepted and unused.
  EXPECT_TRUE(open(
      Json{{"data_dir", dir.path().string()}, {"pool_size", 2}, {"statement_timeout_ms", 1000}}));
}

TEST_F(MemoryPostgres, ConnectFailureIsIoAndNeverShowsThePassword) {
  const std::string secret = "s3cr3t-Pa55word";
  for (const std::string& dsn :
       {"host=127.0.0.1 port=1 user=nobody password=" + secret + " dbname=x",
        "postgresql://nobody:" + secret + "@127.0.0.1:1/x", "host=127.0.0.1 password " + secret,
        "host=127.0.0.1 port=1 password= " + secret}) {
    auto s = host.create_memory("postgres", Json{{"dsn", dsn}, {"connect_timeout_s", 2}});
    ASSERT_FALSE(s) << dsn;
    EXPECT_EQ(store_code(s.error()), ErrorCode::Io) << s.error().describe();
    EXPECT_THAT(s.error().describe(), Not(HasSubstr(secret)));
  }
}

// Several processes starting at once on a fresh database: the advisory lock lets one migrate and
// the others wait, then find the schema in place.
TEST_F(MemoryPostgres, MigrationsRaceOnAFreshDatabase) {
  PgTestDb fresh;
  ASSERT_FALSE(fresh.dsn().empty());
  constexpr int kOpeners = 8;
  std::atomic<int> ready{0}, opened{0};
  std::vector<std::string> errors(kOpeners);
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kOpeners) std::this_thread::yield();
      auto s = host.create_memory("postgres", Json{{"dsn", fresh.dsn()}, {"pool_size", 1}});
      if (!s) {
        errors[static_cast<std::size_t>(i)] = s.error().describe();
        return;
      }
      auto conv =
          (*s)->open_conversation(kernex::MemoryScope::local(),
                                  {"cli", "t" + std::to_string(i), ""}, std::chrono::minutes(5));
      if (conv &&
          (*s)->append_messages(kernex::MemoryScope::local(), *conv, {ContextEntry::user("hi")}))
        ++opened;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(opened.load(), kOpeners);
  std::string versions;
  // Each migration applied exactly once, all of them (no version twice, none missing).
  ASSERT_TRUE(
      fresh.exec("SELECT count(*) || '/' || count(DISTINCT version) || '/' || max(version) FROM "
                 "schema_version",
                 &versions));
  EXPECT_EQ(versions, "5/5/5");
}

TEST_F(MemoryPostgres, ConnectionLossIsTypedAndTheNextCallReconnects) {
  const std::string conv = conversation(*store);
  ASSERT_TRUE(
      store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user("before")}));
  kill_connections();
  // The pooled connection is dead: the first call fails as Io (or, had the pool no dead
  // connection left, succeeds); it never hangs, and the call after it works.
  auto first = store->message_count(kernex::MemoryScope::local(), conv);
  if (!first) {
    EXPECT_EQ(first.error().code, ErrorCode::Io) << first.error().describe();
  }
  auto again =
      store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user("after")});
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 2u);
  // Loss inside a transaction rolls the exchange back whole.
  kill_connections();
  auto lost = store->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user("x"), ContextEntry::assistant("y")});
  if (!lost) {
    EXPECT_EQ(lost.error().code, ErrorCode::Io);
  }
  const auto count = store->message_count(kernex::MemoryScope::local(), conv).value();
  EXPECT_TRUE(count == 2u || count == 4u) << count;
}

// Turns of many runs at once, of two tenants, share batched commits: every exchange lands in its
// own tenant's conversation, a save naming the other tenant's conversation fails alone ("no
// conversation") without losing the batch it rode, and a keyed save repeated at once is saved once.
TEST_F(MemoryPostgres, ConcurrentSavesOfTwoTenantsKeepTheirTenantAndFailAlone) {
  const auto acme = MemoryScope::of("acme").value();
  const auto globex = MemoryScope::of("globex").value();
  const std::string a =
      store->open_conversation(acme, {"cli", "ann", ""}, std::chrono::hours(1)).value();
  const std::string g =
      store->open_conversation(globex, {"cli", "gus", ""}, std::chrono::hours(1)).value();
  constexpr int kThreads = 8, kEach = 10;
  std::atomic<int> wrong{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const bool is_acme = t % 2 == 0;
      const auto& scope = is_acme ? acme : globex;
      for (int i = 0; i < kEach; ++i) {
        ExchangeRecord rec{
            is_acme ? a : g,
            {ContextEntry::user("q" + std::to_string(t)), ContextEntry::assistant("a")},
            std::nullopt};
        rec.idempotency_key = "k-" + std::to_string(i);  // every thread of a tenant repeats it
        if (!store->save_exchange(scope, rec)) ++wrong;
        // The other tenant's conversation: found nowhere in this scope.
        ExchangeRecord cross{is_acme ? g : a, {ContextEntry::user("leak")}, std::nullopt};
        auto r = store->save_exchange(scope, cross);
        if (!r && r.error().describe().find("no conversation") != std::string::npos) ++refused;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(refused, kThreads * kEach);
  // Each key saved once per tenant: kEach exchanges of two messages in each conversation.
  EXPECT_EQ(store->message_count(acme, a).value(), 2u * kEach);
  EXPECT_EQ(store->message_count(globex, g).value(), 2u * kEach);
  EXPECT_FALSE(store->message_count(acme, g));
  EXPECT_FALSE(store->message_count(globex, a));
  std::string leaked;
  ASSERT_TRUE(db.exec("SELECT count(*) FROM messages WHERE content = 'leak'", &leaked));
  EXPECT_EQ(leaked, "0");
}

// A new conversation and a lesson are writes of the store's batches (pg::Writer): two tenants
// opening the same key at once each get one conversation of their own, every opener of a tenant
// the same one; a lesson keeps its tenant, its cap and its reinforcement.
TEST_F(MemoryPostgres, BatchedConversationsAndLessonsKeepTheirTenantUnderARace) {
  const auto acme = MemoryScope::of("acme").value();
  const auto globex = MemoryScope::of("globex").value();
  constexpr int kThreads = 12;
  std::vector<std::string> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto id = store->open_conversation(t % 2 ? globex : acme, {"cli", "same", "p"},
                                         std::chrono::minutes(60));
      ids[static_cast<std::size_t>(t)] = id ? *id : "error: " + id.error().describe();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 2; t < kThreads; ++t) EXPECT_EQ(ids[static_cast<std::size_t>(t)], ids[t % 2]);
  EXPECT_NE(ids[0], ids[1]);
  std::string rows;
  ASSERT_TRUE(db.exec("SELECT string_agg(tenant, ',' ORDER BY tenant) FROM conversations", &rows));
  EXPECT_EQ(rows, "acme,globex");
  // Another tenant's id is no conversation of this scope.
  EXPECT_FALSE(store->message_count(globex, ids[0]));
  EXPECT_EQ(store->message_count(acme, ids[0]).value(), 0u);
  // An idle window of zero minutes: nothing is recent enough, so a new one each time.
  const auto fresh = store->open_conversation(acme, {"cli", "same", "p"}, std::chrono::minutes(0));
  ASSERT_TRUE(fresh) << fresh.error().describe();
  EXPECT_NE(*fresh, ids[0]);

  for (int i = 0; i < 12; ++i)
    ASSERT_TRUE(store->store_lesson(acme, {"ann", "git", "rule " + std::to_string(i), "", 1, ""}));
  ASSERT_TRUE(store->store_lesson(acme, {"ann", "git", "rule 5", "", 1, ""}));  // reinforced
  auto mine = store->lessons(acme, "ann", std::nullopt);
  ASSERT_TRUE(mine);
  ASSERT_EQ(mine->size(), 10u);
  EXPECT_EQ(mine->front().rule, "rule 5");
  EXPECT_EQ(mine->front().occurrences, 2u);
  EXPECT_EQ(mine->back().rule, "rule 2");  // 0 and 1 fell off the cap
  auto theirs = store->lessons(globex, "ann", std::nullopt);
  ASSERT_TRUE(theirs);
  EXPECT_TRUE(theirs->empty());
  // A lesson that cannot be stored fails alone; the next one is stored.
  EXPECT_FALSE(store->store_lesson(acme, {"ann", "git", std::string("bad\0", 4), "", 1, ""}));
  ASSERT_TRUE(store->store_lesson(globex, {"ann", "git", "theirs", "", 1, ""}));
  EXPECT_EQ(store->lessons(globex, "ann", std::nullopt).value().size(), 1u);
}

// A statement stuck behind another session's lock ends at statement_timeout_ms with a typed
// error, and the store works once the lock is gone.
TEST_F(MemoryPostgres, ABlockedStatementTimesOutInsteadOfHanging) {
  auto quick = open(Json{{"statement_timeout_ms", 300}, {"pool_size", 1}});
  ASSERT_TRUE(quick);
  const std::string conv = conversation(*quick);
  PGconn* locker = PQconnectdb(db.dsn().c_str());
  ASSERT_EQ(PQstatus(locker), CONNECTION_OK) << PQerrorMessage(locker);
  PQclear(PQexec(locker, "BEGIN"));
  PGresult* locked = PQexec(locker, "LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE");
  EXPECT_EQ(PQresultStatus(locked), PGRES_COMMAND_OK);
  PQclear(locked);
  const auto start = std::chrono::steady_clock::now();
  auto blocked = quick->message_count(kernex::MemoryScope::local(), conv);
  const auto waited = std::chrono::steady_clock::now() - start;
  PQclear(PQexec(locker, "ROLLBACK"));
  PQfinish(locker);
  ASSERT_FALSE(blocked);
  EXPECT_EQ(blocked.error().code, ErrorCode::Memory);
  EXPECT_THAT(blocked.error().describe(), HasSubstr("57014"));  // query_canceled
  EXPECT_LT(waited, std::chrono::seconds(10));
  EXPECT_EQ(quick->message_count(kernex::MemoryScope::local(), conv).value(), 0u);
}

TEST_F(MemoryPostgres, RecallUsesTheFullTextIndexes) {
  std::string plan;
  // Without seq scans to fall back on, a query no index serves would still plan a Seq Scan.
  ASSERT_TRUE(db.exec(
      "SET enable_seqscan = off; EXPLAIN SELECT seq FROM messages m WHERE m.role = 'user' AND "
      "to_tsvector('simple'::regconfig, "
      "left(m.content, 200000)) @@ phraseto_tsquery('simple', 'deploy')",
      &plan));
  EXPECT_THAT(plan, Not(HasSubstr("Seq Scan"))) << plan;
}

// The CLI's `kernex memory export` from the default SQLite store imports into PostgreSQL with
// `kernex memory import`, and exports back the same document.
TEST_F(MemoryPostgres, CliExportFromSqliteImportsIntoPostgres) {
  const auto data = dir / "data";
  {
    auto lite = host.create_memory("sqlite", Json{{"data_dir", data.string()}}).value();
    const std::string conv = conversation(*lite);
    ASSERT_TRUE(lite->append_messages(
        kernex::MemoryScope::local(), conv,
        {ContextEntry::user("remember the tuna"), ContextEntry::assistant("ok")}));
    ASSERT_TRUE(lite->store_fact(kernex::MemoryScope::local(), "alice", "cat", "Miso"));
    ASSERT_TRUE(lite->create_task(kernex::MemoryScope::local(),
                                  task("Feed the cat its tuna dinner", "2026-12-31 18:00:00")));
  }
  const auto sh = [](const std::string& args, int* status) {
    FILE* p = ::popen((std::string(KERNEX_CLI) + " " + args + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    *status = WEXITSTATUS(::pclose(p));
    return out;
  };
  int status = -1;
  const std::string exported = sh("memory --data-dir " + data.string() + " export --json", &status);
  ASSERT_EQ(status, 0) << exported;
  std::ofstream(dir / "backup.json") << exported;
  std::ofstream(dir / "pg.yaml") << "memory:\n  name: postgres\n  options:\n    dsn: \"" << db.dsn()
                                 << "\"\n";
  const std::string pg =
      "memory --config " + (dir / "pg.yaml").string() + " --data-dir " + (dir / "pgdata").string();
  const std::string imported = sh(pg + " import " + (dir / "backup.json").string(), &status);
  ASSERT_EQ(status, 0) << imported;
  EXPECT_EQ(Json::parse(sh(pg + " export --json", &status)), Json::parse(exported));
  EXPECT_EQ(store->fact(kernex::MemoryScope::local(), "alice", "cat").value(), "Miso");
}

TEST_F(MemoryPostgres, ImportRejectsJunkNamingTheRow) {
  for (const Json& junk :
       {Json{{"format", "something"}}, Json{{"format", 5}}, Json::array(), Json("x")}) {
    auto r = store->import_json(kernex::MemoryScope::local(), junk);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().describe(), HasSubstr("not a kernex memory export"));
  }
  auto version = store->import_json(kernex::MemoryScope::local(),
                                    Json{{"format", "kernex-memory"}, {"version", "one"}});
  ASSERT_FALSE(version);
  EXPECT_THAT(version.error().describe(), HasSubstr("unsupported export version \"one\""));
  Json doc{
      {"format", "kernex-memory"},
      {"version", 1},
      {"facts",
       Json::array({Json{{"sender_id", "a"}, {"key", "k"}, {"value", "v"}, {"colour", "red"}}})}};
  auto bad = store->import_json(kernex::MemoryScope::local(), doc);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().describe(), HasSubstr("facts[0]: unknown column 'colour'"));
  EXPECT_TRUE(
      store->fact_records(kernex::MemoryScope::local(), std::nullopt, true).value().empty());
}

}  // namespace
}  // namespace kernex
