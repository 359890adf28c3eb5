// What only the SQLite memory plugin has: its file (modes, WAL, where the kernel puts it), its
// options and the CLI over memory.db. Everything the MemoryStore interface promises is checked for
// every store in memory_conformance_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sys/wait.h>

#include <cstdio>

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
