// Processes (or threads) starting together on a new data dir all open the SQLite files the kernel
// creates: creating the file, switching it to WAL and migrating must not answer "database is
// locked" to any of them, whatever their timing. Each round uses a new directory, so every round
// races the first open again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "kernex/plugin_host.hpp"
#include "run_store.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::TempDir;

constexpr int kOpeners = 8;
constexpr int kRounds = 30;

// Runs `open` (returning "" or an error) in kOpeners child processes released together (threads
// of one process rarely meet the race: SQLite's own in-process locking orders them); the number of
// children that failed. A child prints its error to stderr.
template <class Open>
int failures_opening_together(Open open) {
  int release[2];
  if (::pipe(release) != 0) return kOpeners;
  std::vector<pid_t> children;
  for (int i = 0; i < kOpeners; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(release[1]);
      char byte = 0;
      (void)::read(release[0], &byte, 1);  // returns at end of file: when the parent closes it
      const std::string error = open();
      if (!error.empty()) std::fprintf(stderr, "opener %d: %s\n", i, error.c_str());
      ::_exit(error.empty() ? 0 : 1);
    }
    if (pid > 0) children.push_back(pid);
  }
  ::close(release[0]);
  ::close(release[1]);
  int failed = kOpeners - static_cast<int>(children.size());
  for (const pid_t pid : children) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ++failed;
  }
  return failed;
}

TEST(SqliteFirstOpen, MemoryStoresOpenedTogetherOnANewDataDirAllOpen) {
  TempDir dir;
  const PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  for (int round = 0; round < kRounds; ++round) {
    const auto data = dir / ("round" + std::to_string(round));
    const int failed = failures_opening_together([&]() -> std::string {
      auto store = host.create_memory("sqlite", Json{{"data_dir", data.string()}});
      if (!store) return store.error().describe();
      auto id = (*store)->open_conversation(kernex::MemoryScope::local(), {"cli", "alice", ""},
                                            std::chrono::minutes(5));
      return id ? std::string() : id.error().describe();
    });
    ASSERT_EQ(failed, 0) << "round " << round << " (their errors are on stderr)";
  }
}

TEST(SqliteFirstOpen, ServeRunStoresOpenedTogetherOnANewDataDirAllOpen) {
  TempDir dir;
  for (int round = 0; round < kRounds; ++round) {
    const auto file = dir / ("round" + std::to_string(round)) / "serve.db";
    const int failed = failures_opening_together([&]() -> std::string {
      auto store = server::RunStore::open(file);
      if (!store) return store.error().describe();
      auto unfinished = (*store)->unfinished();
      return unfinished ? std::string() : unfinished.error().describe();
    });
    ASSERT_EQ(failed, 0) << "round " << round << " (their errors are on stderr)";
  }
}

// The case users met: several `kernex run` at once on a data dir nobody has used yet.
TEST(SqliteFirstOpen, KernexRunsStartedTogetherOnANewDataDirAllSucceed) {
  constexpr int kRuns = 8;
  constexpr int kCliRounds = 3;
  TempDir dir;
  const auto script = dir.write("noted.jsonl", "{\"text\": \"noted\"}\n");
  for (int round = 0; round < kCliRounds; ++round) {
    const auto data = dir / ("data" + std::to_string(round));
    std::vector<testing::StartedProgram> runs;
    for (int i = 0; i < kRuns; ++i) {
      const auto out = dir / ("out" + std::to_string(round) + "-" + std::to_string(i));
      std::filesystem::create_directories(out);
      runs.push_back(testing::start_program(
          KERNEX_CLI, out, testing::clean_environment(),
          {"run", "--data-dir", data.string(), "--provider", "replay", "--provider-opt",
           "script=" + script.string(), "remember " + std::to_string(i)}));
    }
    for (const auto& run : runs) {
      const auto r = testing::finish_program(run, std::chrono::minutes(2));
      EXPECT_EQ(r.exit_code, 0) << "round " << round << ": " << r.err;
      EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("locked")));
    }
  }
}

}  // namespace
}  // namespace kernex
