// Durability of the SQLite store against crashes, concurrent processes and bad input.
// Writers run as separate processes (tests/memory/memory_writer) so they can be SIGKILLed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>

#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// A child process whose stdout we read line by line.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~Child() {
    if (out_ != nullptr) std::fclose(out_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::optional<std::string> line() {
    char buf[256];
    if (std::fgets(buf, sizeof buf, out_) == nullptr) return std::nullopt;
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void kill() { ::kill(pid_, SIGKILL); }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

std::string integrity(const std::filesystem::path& db) {
  Child check({KERNEX_MEMORY_WRITER, "check", db.string()});
  std::string all;
  while (auto l = check.line()) all += *l;
  check.wait();
  return all;
}

class MemoryDurability : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> open(Json options = Json::object()) {
    if (!options.contains("path")) options["path"] = db.string();
    auto store = host.create_memory("sqlite", options);
    EXPECT_TRUE(store) << store.error().describe();
    return store ? *store : nullptr;
  }
  // Runs memory_writer `mode` (1000 writes) and SIGKILLs it once `kill_after` are acknowledged;
  // the last acknowledged, as the pipe tells after the kill (-1: none).
  long acked_before_kill(const std::string& mode, long kill_after) {
    Child writer({KERNEX_MEMORY_WRITER, mode, db.string(), "1000"});
    long acked = -1;
    while (auto l = writer.line()) {
      acked = std::stol(l->substr(4));
      if (acked + 1 >= kill_after) {
        writer.kill();
        break;
      }
    }
    // Acknowledgements already in the pipe were printed after their commit: they count too.
    while (auto l = writer.line()) acked = std::stol(l->substr(4));
    writer.wait();
    return acked;
  }
  TempDir dir;
  std::filesystem::path db = dir / "memory.db";
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
};

TEST_F(MemoryDurability, SigkilledWriterKeepsEveryAcknowledgedExchange) {
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 3; ++round) {
    const long kill_after = std::uniform_int_distribution<long>(1, 900)(rng);
    const long acked = acked_before_kill("write", kill_after);
    ASSERT_GE(acked, 0) << "round " << round;

    EXPECT_EQ(integrity(db), "ok") << "round " << round;
    auto store = open();
    auto conv = store->open_conversation(kernex::MemoryScope::local(), {"test", "writer", ""},
                                         std::chrono::minutes(120));
    ASSERT_TRUE(conv);
    auto messages = store->conversation_messages(kernex::MemoryScope::local(), *conv, 0, 1000000);
    ASSERT_TRUE(messages) << messages.error().describe();
    // Every round appends to the same conversation: check this round's tail is whole and in order.
    std::map<std::string, int> seen;
    for (const auto& m : messages.value()) ++seen[m.entry.content];
    for (long i = 0; i <= acked; ++i) {
      ASSERT_GE(seen["question " + std::to_string(i)], 1)
          << "lost acknowledged exchange " << i << " in round " << round;
      ASSERT_GE(seen["answer " + std::to_string(i)], 1)
          << "lost acknowledged exchange " << i << " in round " << round;
    }
    // Exchanges are atomic: never a question without its answer.
    for (std::size_t i = 0; i + 1 < messages->size(); i += 2) {
      ASSERT_EQ((*messages)[i].entry.role, "user");
      ASSERT_EQ((*messages)[i + 1].entry.role, "assistant");
      ASSERT_EQ((*messages)[i].entry.content.substr(9), (*messages)[i + 1].entry.content.substr(7));
    }
    ASSERT_EQ(messages->size() % 2, 0u);
    ASSERT_EQ(store->message_count(kernex::MemoryScope::local(), *conv).value(), messages->size());
  }
}

// An audit row is acknowledged when record_tool_call returns: a kill -9 right after (before any
// later write could carry it to the disk) keeps it.
TEST_F(MemoryDurability, SigkilledWriterKeepsEveryAcknowledgedAuditRow) {
  std::mt19937 rng(std::random_device{}());
  std::map<std::string, int> acknowledged;  // by tool name, over the rounds
  for (int round = 0; round < 3; ++round) {
    const long kill_after = std::uniform_int_distribution<long>(1, 100)(rng);
    const long acked = acked_before_kill("audit", kill_after);
    ASSERT_GE(acked, 0) << "round " << round;
    for (long i = 0; i <= acked; ++i) ++acknowledged["tool " + std::to_string(i)];

    EXPECT_EQ(integrity(db), "ok") << "round " << round;
    auto rows = open()->audit_log(MemoryScope::local(), 100000);
    ASSERT_TRUE(rows) << rows.error().describe();
    std::map<std::string, int> seen;
    for (const auto& r : *rows) ++seen[r.tool];
    for (const auto& [tool, times] : acknowledged)
      ASSERT_GE(seen[tool], times)
          << "lost an acknowledged audit row (" << tool << "), round " << round;
  }
}

TEST_F(MemoryDurability, TwoProcessesClaimingRunEachTaskExactlyOnce) {
  constexpr int kTasks = 150;
  {
    auto store = open();
    for (int i = 0; i < kTasks; ++i) {
      TaskSpec t;
      t.channel = "cli";
      t.sender_id = "s" + std::to_string(i);  // distinct senders: no dedup
      t.reply_target = "r";
      t.description = "task number " + std::to_string(i);
      t.due_at = "2020-01-01 00:00:00";
      ASSERT_TRUE(store->create_task(kernex::MemoryScope::local(), t));
    }
  }
  Child a({KERNEX_MEMORY_WRITER, "claim", db.string(), "worker-a"});
  Child b({KERNEX_MEMORY_WRITER, "claim", db.string(), "worker-b"});
  std::map<std::string, int> ran;
  int by_a = 0, by_b = 0;
  while (auto l = a.line()) ++ran[l->substr(4)], ++by_a;
  while (auto l = b.line()) ++ran[l->substr(4)], ++by_b;
  EXPECT_EQ(WEXITSTATUS(a.wait()), 0);
  EXPECT_EQ(WEXITSTATUS(b.wait()), 0);
  EXPECT_EQ(ran.size(), static_cast<std::size_t>(kTasks));
  for (const auto& [id, n] : ran) EXPECT_EQ(n, 1) << id;
  auto store = open();
  for (const auto& [id, n] : ran) {
    auto runs = store->task_runs(kernex::MemoryScope::local(), id, 10).value();
    EXPECT_EQ(runs.size(), 1u) << id;
    EXPECT_EQ(store->task(kernex::MemoryScope::local(), id).value()->status, "delivered");
  }
  RecordProperty("claims", std::to_string(by_a) + "/" + std::to_string(by_b));
}

TEST_F(MemoryDurability, InvalidUtf8IsRefusedAndNothingIsLost) {
  auto store = open();
  auto conv = store
                  ->open_conversation(kernex::MemoryScope::local(), {"cli", "u", ""},
                                      std::chrono::minutes(120))
                  .value();
  ASSERT_TRUE(
      store->append_messages(kernex::MemoryScope::local(), conv,
                             {ContextEntry::user("good"), ContextEntry::assistant("fine")}));
  auto bad = store->append_messages(
      kernex::MemoryScope::local(), conv,
      {ContextEntry::user("ok part"), ContextEntry::assistant("bad \xC3\x28 byte")});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::Parse);
  EXPECT_THAT(bad.error().describe(),
              HasSubstr("message 2 of the exchange (assistant): content is not valid UTF-8"));
  EXPECT_THAT(bad.error().describe(), HasSubstr("offset 4"));
  ContextEntry args = ContextEntry::assistant("");
  args.tool_calls = {ToolCall{"c", "t", Json{{"text", "\xFF"}}}};
  EXPECT_FALSE(store->append_messages(kernex::MemoryScope::local(), conv, {args}));
  EXPECT_FALSE(
      store->store_fact(kernex::MemoryScope::local(), "u", "k", "\xC0\xAF"));  // overlong "/"
  EXPECT_FALSE(store->recall(kernex::MemoryScope::local(),
                             {"bad \xED\xA0\x80 surrogate", "u", 5, "", 0, std::nullopt}));
  EXPECT_EQ(
      store->recent_messages(kernex::MemoryScope::local(), conv, 10).value(),
      (std::vector<ContextEntry>{ContextEntry::user("good"), ContextEntry::assistant("fine")}));
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), 2u);
}

TEST_F(MemoryDurability, TenMegabyteMessageIsRefusedUnlessAllowed) {
  const std::string big(10u << 20, 'x');
  {
    auto store = open();
    auto conv = store
                    ->open_conversation(kernex::MemoryScope::local(), {"cli", "u", ""},
                                        std::chrono::minutes(120))
                    .value();
    ASSERT_TRUE(
        store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user("before")}));
    auto r = store->append_messages(kernex::MemoryScope::local(), conv, {ContextEntry::user(big)});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::Limit);
    EXPECT_THAT(r.error().describe(),
                HasSubstr("10485760 bytes, over max_message_bytes (4194304)"));
    EXPECT_EQ(store->recent_messages(kernex::MemoryScope::local(), conv, 10).value(),
              std::vector<ContextEntry>{ContextEntry::user("before")});
  }
  auto roomy = open(Json{{"max_message_bytes", 16 << 20}});
  auto conv = roomy
                  ->open_conversation(kernex::MemoryScope::local(), {"cli", "u", ""},
                                      std::chrono::minutes(120))
                  .value();
  ASSERT_TRUE(roomy->append_messages(kernex::MemoryScope::local(), conv,
                                     {ContextEntry::user(big), ContextEntry::assistant("a")}));
  auto back = roomy->recent_messages(kernex::MemoryScope::local(), conv, 2).value();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].content, big);
  EXPECT_EQ(integrity(db), "ok");
}

TEST_F(MemoryDurability, UnwritableLocationIsAClearError) {
  // A regular file where the data directory should be: fails for root too.
  dir.write("not-a-dir", "x");
  auto r = host.create_memory("sqlite",
                              Json{{"path", (dir / "not-a-dir" / "sub" / "memory.db").string()}});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().describe(), HasSubstr("cannot create the data directory"));
  EXPECT_THAT(r.error().describe(), HasSubstr("not-a-dir/sub"));
  if (::geteuid() != 0) {
    std::filesystem::create_directories(dir / "ro");
    {
      auto store = open(Json{{"path", (dir / "ro" / "m.db").string()}});
      ASSERT_TRUE(store);
    }
    std::filesystem::permissions(dir / "ro" / "m.db", std::filesystem::perms::owner_read);
    auto ro = host.create_memory("sqlite", Json{{"path", (dir / "ro" / "m.db").string()}});
    ASSERT_FALSE(ro);
    EXPECT_THAT(ro.error().describe(), HasSubstr("not writable"));
  }
}

TEST_F(MemoryDurability, FullDiskFailsCleanlyAndKeepsEarlierData) {
  auto store = open(Json{{"max_size_mb", 1}});
  auto conv = store
                  ->open_conversation(kernex::MemoryScope::local(), {"cli", "u", ""},
                                      std::chrono::minutes(120))
                  .value();
  const std::string chunk(64 << 10, 'y');
  std::size_t saved = 0;
  Result<void> r;
  for (int i = 0; i < 64; ++i) {
    r = store->append_messages(kernex::MemoryScope::local(), conv,
                               {ContextEntry::user("n" + std::to_string(i) + " " + chunk)});
    if (!r) break;
    ++saved;
  }
  ASSERT_FALSE(r) << "a 1 MB store took 4 MB";
  EXPECT_THAT(r.error().describe(), HasSubstr("full"));
  EXPECT_GT(saved, 0u);
  // Earlier exchanges are intact, the store still reads, and the file is sound.
  EXPECT_EQ(store->message_count(kernex::MemoryScope::local(), conv).value(), saved);
  auto all = store->conversation_messages(kernex::MemoryScope::local(), conv, 0, 1000).value();
  ASSERT_EQ(all.size(), saved);
  EXPECT_EQ(all.back().entry.content, "n" + std::to_string(saved - 1) + " " + chunk);
  EXPECT_EQ(integrity(db), "ok");
}

}  // namespace
}  // namespace kernex
