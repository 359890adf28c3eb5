// What only the SQLite memory plugin has: its file (modes, WAL, where the kernel puts it), its
// options and the CLI over memory.db. Everything the MemoryStore interface promises is checked for
// every store in memory_conformance_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sqlite3.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

class MemorySqlite : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> open(Json options = Json::object()) {
    if (!options.contains("path")) options["path"] = (dir / "data" / "memory.db").string();
    auto store = host.create_memory("sqlite", options);
    EXPECT_TRUE(store) << store.error().describe();
    return store ? *store : nullptr;
  }
  std::string conversation(MemoryStore& s) {
    auto id = s.open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                  std::chrono::minutes(120));
    EXPECT_TRUE(id) << id.error().describe();
    return id.value_or("");
  }

  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  std::shared_ptr<MemoryStore> store = open();
};

// ---- Opening ----

TEST_F(MemorySqlite, FileIsPrivateAndDataDirIsCreated0700) {
  struct stat st {};
  ASSERT_EQ(::stat((dir / "data").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((dir / "data" / "memory.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(store->append_messages(kernex::MemoryScope::local(), conversation(*store),
                                     {ContextEntry::user("hi")}));
  EXPECT_TRUE(std::filesystem::exists(dir / "data" / "memory.db-wal"));  // WAL mode
}

TEST_F(MemorySqlite, DataDirOptionDefaultsTheFileName) {
  auto s = host.create_memory("sqlite", Json{{"data_dir", (dir / "d2").string()}});
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_TRUE(std::filesystem::exists(dir / "d2" / "memory.db"));
}

TEST_F(MemorySqlite, BadOptionsAreConfigErrors) {
  auto unknown = host.create_memory("sqlite", Json{{"path", "x.db"}, {"colour", "red"}});
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().describe(), HasSubstr("unknown option 'colour'"));
  auto none = host.create_memory("sqlite", Json::object());
  ASSERT_FALSE(none);
  EXPECT_THAT(none.error().describe(), HasSubstr("'path'"));
  auto sync = host.create_memory("sqlite", Json{{"path", "x.db"}, {"synchronous", "sometimes"}});
  ASSERT_FALSE(sync);
  EXPECT_THAT(sync.error().describe(), HasSubstr("synchronous"));
}

// ---- A turn's writes (group commit) ----

// Rows of `sql` (one integer column) through a connection of this test's own.
std::int64_t raw_count(const std::filesystem::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
  const std::int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

// A turn of a new conversation: its row, an audit row and the exchange. Once save_exchange has
// returned, all of it is committed (another connection sees it), from any number of threads.
TEST_F(MemorySqlite, ATurnsWritesAreCommittedWhenItsExchangeIsAcknowledged) {
  constexpr int kThreads = 6, kTurns = 20;
  std::atomic<int> unseen{0}, failed{0};
  const auto file = dir / "data" / "memory.db";
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTurns; ++i) {
        const auto scope = MemoryScope::local();
        const std::string sender = "s" + std::to_string(t) + "-" + std::to_string(i);
        auto conv = store->open_conversation(scope, {"api", sender, ""}, std::chrono::minutes(5));
        auto again = store->open_conversation(scope, {"api", sender, ""}, std::chrono::minutes(5));
        if (!conv || !again || *conv != *again) {
          ++failed;
          continue;
        }
        AuditRecord audit;
        audit.conversation_id = *conv;
        audit.sender_id = sender;
        audit.tool = "lookup";
        ExchangeRecord record;
        record.conversation_id = *conv;
        record.messages = {ContextEntry::user("q " + sender), ContextEntry::assistant("a")};
        if (!store->record_tool_call(scope, audit) || !store->save_exchange(scope, record)) {
          ++failed;
          continue;
        }
        if (raw_count(file, "SELECT COUNT(*) FROM conversations WHERE id = '" + *conv + "'") != 1 ||
            raw_count(file, "SELECT message_count FROM conversations WHERE id = '" + *conv + "'") !=
                2 ||
            raw_count(file, "SELECT COUNT(*) FROM audit_log WHERE conversation_id = '" + *conv +
                                "'") != 1)
          ++unseen;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(unseen.load(), 0);
  EXPECT_EQ(raw_count(file, "SELECT COUNT(*) FROM messages"), 2 * kThreads * kTurns);
}

// Runs `sql` through a connection of this test's own (the store's file, as another process would).
void raw_exec(const std::filesystem::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

// last_activity is only rewritten when it changes (it is in two indexes): an exchange saved to a
// conversation last active long ago still moves it to now, and counts its messages.
TEST_F(MemorySqlite, AnExchangeMovesAnOldConversationsLastActivityToNow) {
  const auto file = dir / "data" / "memory.db";
  const auto scope = MemoryScope::local();
  const std::string id = conversation(*store);
  ASSERT_TRUE(store->append_messages(scope, id, {ContextEntry::user("first")}));
  raw_exec(file, "UPDATE conversations SET last_activity = '2000-01-01 00:00:00' WHERE id = '" +
                     id + "'");
  ExchangeRecord record;
  record.conversation_id = id;
  record.messages = {ContextEntry::user("again"), ContextEntry::assistant("yes")};
  ASSERT_TRUE(store->save_exchange(scope, record));
  const std::string where = " FROM conversations WHERE id = '" + id + "'";
  EXPECT_EQ(raw_count(file, "SELECT message_count" + where), 3);
  EXPECT_EQ(raw_count(file, "SELECT last_activity > datetime('now', '-1 hour')" + where), 1);
  // Another tenant's save names nothing: neither its count nor its time moves.
  raw_exec(file, "UPDATE conversations SET last_activity = '2000-01-01 00:00:00' WHERE id = '" +
                     id + "'");
  EXPECT_FALSE(store->save_exchange(MemoryScope::of("other").value(), record));
  EXPECT_EQ(raw_count(file, "SELECT message_count" + where), 3);
  EXPECT_EQ(raw_count(file, "SELECT last_activity = '2000-01-01 00:00:00'" + where), 1);
}

// The newest summaries of the key's other conversations, newest first (a tie on the time goes to
// the later summary), at most `limit`, never the excluded one's nor another tenant's.
TEST_F(MemorySqlite, RecentSummariesAreTheNewestOfTheKeysOtherConversations) {
  const auto file = dir / "data" / "memory.db";
  const auto scope = MemoryScope::local();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(conversation(*store));
    ASSERT_TRUE(store->append_messages(scope, ids.back(), {ContextEntry::user("m")}));
    ASSERT_TRUE(store->close_conversation(scope, ids.back(), "summary " + std::to_string(i)));
  }
  const char* times[] = {"2026-01-03 00:00:00", "2026-01-05 00:00:00", "2026-01-04 00:00:00",
                         "2026-01-05 00:00:00", "2026-01-01 00:00:00"};
  for (int i = 0; i < 5; ++i) {
    raw_exec(file, std::string("UPDATE summaries SET updated_at = '") + times[i] +
                       "' WHERE conversation_id = '" + ids[static_cast<std::size_t>(i)] + "'");
  }
  const ConversationKey key{"cli", "alice", ""};
  const auto texts = [&](const std::string& exclude, std::size_t limit) {
    std::vector<std::string> out;
    auto got = store->recent_summaries(scope, key, exclude, limit);
    EXPECT_TRUE(got) << got.error().describe();
    for (const auto& s : got.value_or(std::vector<SummaryRecord>{})) out.push_back(s.text);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(texts("", 3), (V{"summary 3", "summary 1", "summary 2"}));
  EXPECT_EQ(texts(ids[3], 3), (V{"summary 1", "summary 2", "summary 0"}));
  EXPECT_EQ(texts("", 10), (V{"summary 3", "summary 1", "summary 2", "summary 0", "summary 4"}));
  EXPECT_EQ(texts("", 1), (V{"summary 3"}));
  EXPECT_TRUE(texts("", 0).empty());
  auto other = store->recent_summaries(MemoryScope::of("other").value(), key, "", 3);
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->empty());
}

// A conversation opened and not yet written is still the key's, in its tenant only: listed,
// counted and closed like any other.
TEST_F(MemorySqlite, AnOpenedConversationIsTheKeysBeforeItsFirstExchange) {
  auto acme = MemoryScope::of("acme").value(), other = MemoryScope::of("other").value();
  auto a = store->open_conversation(acme, {"api", "bob", ""}, std::chrono::minutes(5));
  auto b = store->open_conversation(other, {"api", "bob", ""}, std::chrono::minutes(5));
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(store->open_conversation(acme, {"api", "bob", ""}, std::chrono::minutes(5)).value(),
            *a);
  auto listed = store->list_conversations(acme, {});
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().id, *a);
  EXPECT_EQ(store->message_count(acme, *a).value(), 0u);
  EXPECT_FALSE(store->message_count(other, *a));  // another tenant's: unknown
  AuditRecord audit;
  audit.conversation_id = *a;
  audit.tool = "lookup";
  ASSERT_TRUE(store->record_tool_call(acme, audit));
  EXPECT_EQ(store->audit_log(acme, 10).value().size(), 1u);
  EXPECT_EQ(store->audit_log(other, 10).value().size(), 0u);
  ASSERT_TRUE(store->delete_conversation(acme, *a));
  EXPECT_EQ(store->audit_log(acme, 10).value().size(), 0u);
}

// A new conversation's row is written lazily (with the turn's first commit). When that insert
// fails, the calls that name the conversation say so, with the cause, not a bare "no conversation"
// or a foreign key error; the next open of the key makes a new one.
TEST_F(MemorySqlite, AFailedConversationInsertIsNamedWithItsCause) {
  const auto file = dir / "data" / "memory.db";
  const auto exec = [&](const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  };
  exec(
      "CREATE TRIGGER refuse BEFORE INSERT ON conversations "
      "BEGIN SELECT RAISE(ABORT, 'PLANTED-REFUSAL'); END");
  const auto scope = MemoryScope::local();
  auto conv = store->open_conversation(scope, {"api", "bob", ""}, std::chrono::minutes(5));
  ASSERT_TRUE(conv) << conv.error().describe();
  ExchangeRecord record;
  record.conversation_id = *conv;
  record.messages = {ContextEntry::user("q"), ContextEntry::assistant("a")};
  auto saved = store->save_exchange(scope, record);
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code, ErrorCode::Memory);
  EXPECT_THAT(saved.error().message, HasSubstr("conversation " + *conv + " was never created"));
  EXPECT_THAT(saved.error().describe(), HasSubstr("PLANTED-REFUSAL"));
  auto appended = store->append_messages(scope, *conv, {ContextEntry::user("q")});
  ASSERT_FALSE(appended);
  EXPECT_THAT(appended.error().describe(), HasSubstr("PLANTED-REFUSAL"));
  auto counted = store->message_count(scope, *conv);
  ASSERT_FALSE(counted);
  EXPECT_THAT(counted.error().message, HasSubstr("was never created"));
  // Another tenant naming the id learns nothing of it.
  auto other = store->message_count(MemoryScope::of("other").value(), *conv);
  ASSERT_FALSE(other);
  EXPECT_THAT(other.error().message, Not(HasSubstr("never created")));

  exec("DROP TRIGGER refuse");
  auto again = store->open_conversation(scope, {"api", "bob", ""}, std::chrono::minutes(5));
  ASSERT_TRUE(again);
  EXPECT_NE(*again, *conv);
  record.conversation_id = *again;
  EXPECT_TRUE(store->save_exchange(scope, record));
}

// ---- Through the kernel ----

class MemorySqliteKernel : public MemorySqlite {
 protected:
  std::unique_ptr<Kernel> kernel(const std::vector<std::string>& lines) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.system_prompt = "BASE PROMPT";
    config.data_dir = dir / "kdata";
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                              {"record", (dir / "record.jsonl").string()}};
    config.memory = PluginRef{"sqlite", Json::object()};
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    return k ? std::move(*k) : nullptr;
  }
  Json request(std::size_t i) {
    return Json::parse(testing::read_lines(dir / "record.jsonl").at(i));
  }
  static std::string text(const std::string& t) { return Json{{"text", t}}.dump(); }
};

TEST_F(MemorySqliteKernel, StoreFileLivesInTheKernelsDataDir) {
  // The kernel gives the store its data_dir: memory.db lands there, and a second kernel (a new
  // process) finds the first one's history in it. (How the kernel uses a store:
  // memory_conformance_test.)
  {
    auto k = kernel({text("first answer")});
    ASSERT_TRUE(k->run(Request::from_text("u1", "hello")));
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "kdata" / "memory.db"));
  auto k = kernel({text("second answer")});
  ASSERT_TRUE(k->run(Request::from_text("u1", "again")));
  EXPECT_EQ(request(1)["messages"].size(), 3u);
}

}  // namespace
}  // namespace kernex

namespace kernex {
namespace {

// `kernex run` twice in one data dir, then the memory subcommands over what it saved.
class MemoryCli : public ::testing::Test {
 protected:
  std::string sh(const std::string& args, int* status = nullptr) {
    const std::string cmd = std::string(KERNEX_CLI) + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int rc = ::pclose(p);
    if (status) *status = WEXITSTATUS(rc);
    return out;
  }
  // A word-count conversation: the replay provider asks for the builtin word_count tool.
  std::string run(const std::string& script, const std::string& message) {
    return sh("run --config " + fixture + "kernex.yaml --data-dir " + data.string() +
              " --provider-opt script=" + fixture + script + " '" + message + "'");
  }
  std::string memory(const std::string& args, const std::filesystem::path& d) {
    return sh("memory --config " + fixture + "kernex.yaml --data-dir " + d.string() + " " + args);
  }
  const std::string fixture = KERNEX_SOURCE_DIR "/tests/fixtures/word-count/";
  TempDir dir;
  std::filesystem::path data = dir / "data";
};

TEST_F(MemoryCli, RunRemembersAndExportRoundTrips) {
  ASSERT_THAT(run("script.jsonl", "How many words are in a b c?"), HasSubstr("9 words"));
  ASSERT_THAT(run("followup.jsonl", "What did I ask you before?"), HasSubstr("earlier"));
  Json history = Json::parse(memory("history --json", data));
  ASSERT_EQ(history.size(), 1u) << history.dump();
  const Json& messages = history[0]["messages"];
  ASSERT_EQ(messages.size(), 6u);
  EXPECT_EQ(messages[0]["content"], "How many words are in a b c?");
  EXPECT_EQ(messages[1]["tool_calls"][0]["name"], "word_count");
  EXPECT_EQ(messages[4]["content"], "What did I ask you before?");

  Json hits = Json::parse(memory("search 'how many words' --json", data));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0]["source"], "message");
  EXPECT_EQ(Json::parse(memory("usage --json", data))[0]["requests"], 2);
  EXPECT_EQ(Json::parse(memory("facts --json", data)), Json::array());

  const std::string exported = memory("export --json", data);
  dir.write("backup.json", exported);
  int status = -1;
  sh("memory --data-dir " + (dir / "copy").string() + " import " + (dir / "backup.json").string(),
     &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(memory("export --json", dir / "copy"), exported);
  const std::string again = sh(
      "memory --data-dir " + (dir / "copy").string() + " import " + (dir / "backup.json").string(),
      &status);
  EXPECT_EQ(status, 8) << again;
  EXPECT_THAT(again, HasSubstr("nothing was"));
}

// Without a config the kernel keeps memory in <data dir>/memory.db, the file `kernex memory`
// reads; `memory: none` turns it off. The replay provider's record file shows what the second
// run's model was sent.
class DefaultMemoryCli : public MemoryCli {
 protected:
  // One run answering "noted", with the request it sent appended to `record`.
  int run_plain(const std::string& message, const std::string& config_args = "") {
    int status = -1;
    const std::string out =
        sh("run " + config_args + " --data-dir " + data.string() +
               " --provider replay --provider-opt script=" + script.string() +
               " --provider-opt record=" + record.string() + " '" + message + "'",
           &status);
    EXPECT_EQ(status, 0) << out;
    return status;
  }
  // The messages of the `i`th request the provider received, as text.
  std::string request_messages(std::size_t i) {
    const auto lines = testing::read_lines(record);
    if (i >= lines.size()) return "";
    return Json::parse(lines[i]).value("messages", Json::array()).dump();
  }
  std::filesystem::path script = dir.write("noted.jsonl", R"({"text": "noted"})"
                                                          "\n");
  std::filesystem::path record = dir / "record.jsonl";
};

TEST_F(DefaultMemoryCli, RunsWithoutAConfigShareMemoryInTheDataDir) {
  ::unsetenv("KERNEX_CONFIG");
  ASSERT_EQ(run_plain("my locker code is 4711"), 0);
  ASSERT_EQ(run_plain("what is my locker code?"), 0);
  EXPECT_TRUE(std::filesystem::exists(data / "memory.db"));
  EXPECT_THAT(request_messages(1), HasSubstr("my locker code is 4711"));
  EXPECT_THAT(request_messages(1), HasSubstr("noted"));

  int status = -1;
  const std::string history = sh("memory history --json --data-dir " + data.string(), &status);
  ASSERT_EQ(status, 0) << history;
  const Json conversations = Json::parse(history);
  ASSERT_EQ(conversations.size(), 1u) << history;
  EXPECT_EQ(conversations[0]["messages"].size(), 4u) << history;
}

TEST_F(DefaultMemoryCli, MemoryNoneKeepsNothing) {
  ::unsetenv("KERNEX_CONFIG");
  for (const std::string yaml : {"memory: none\n", "memory: {name: none}\n"}) {
    const auto config = dir.write("kernex.yaml", yaml);
    std::filesystem::remove_all(data);
    std::filesystem::remove(record);
    ASSERT_EQ(run_plain("my locker code is 4711", "--config " + config.string()), 0);
    ASSERT_EQ(run_plain("what is my locker code?", "--config " + config.string()), 0);
    EXPECT_FALSE(std::filesystem::exists(data / "memory.db")) << yaml;
    EXPECT_THAT(request_messages(1), Not(HasSubstr("4711"))) << yaml;

    int status = -1;
    const std::string out =
        sh("memory history --config " + config.string() + " --data-dir " + data.string(), &status);
    EXPECT_EQ(status, 3) << out;
    EXPECT_THAT(out, HasSubstr("memory: none")) << yaml;
  }
}

}  // namespace
}  // namespace kernex
