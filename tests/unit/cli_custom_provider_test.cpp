// examples/custom-provider end to end, as a plugin author would do it: install this build to a
// prefix, move the prefix (installs must be relocatable), build the example against it with
// find_package(kernex), and run the installed `kernex` with the plugin. The installed kernel
// must find its own plugins and data beside its library and nothing of the build tree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

using kernex::Json;
using Outcome = kernex::testing::CliOutcome;

// One install and one example build for the whole suite: each takes seconds.
class CliCustomProvider : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new kernex::testing::TempDir();
    const fs::path logs = dir_->path() / "logs";
    fs::create_directories(logs);
    const auto env = kernex::testing::clean_environment();
    const fs::path staged = dir_->path() / "staged";
    auto step = [&](const std::vector<std::string>& args) {
      auto o = kernex::testing::run_program(KERNEX_CMAKE_COMMAND, logs, env, args);
      std::string command = "cmake";
      for (const std::string& a : args) command += " " + a;
      EXPECT_EQ(o.exit_code, 0) << command << "\n" << o.out << o.err;
      return o.exit_code == 0;
    };
    ok_ = step({"--install", KERNEX_BINARY_DIR, "--prefix", staged.string()});
    // Moved after installing: nothing may point back at the install-time prefix either.
    prefix_ = dir_->path() / "moved";
    if (ok_) fs::rename(staged, prefix_);
    example_build_ = dir_->path() / "example";
    ok_ = ok_ && step({"-S", std::string(KERNEX_SOURCE_DIR) + "/examples/custom-provider", "-B",
                       example_build_.string(), "-G", KERNEX_CMAKE_GENERATOR,
                       "-DCMAKE_CXX_COMPILER=" KERNEX_CXX_COMPILER,
                       "-DCMAKE_PREFIX_PATH=" + prefix_.string()});
    ok_ = ok_ && step({"--build", example_build_.string()});
    // examples/custom-channel, against the same install.
    channel_build_ = dir_->path() / "channel-example";
    ok_ = ok_ && step({"-S", std::string(KERNEX_SOURCE_DIR) + "/examples/custom-channel", "-B",
                       channel_build_.string(), "-G", KERNEX_CMAKE_GENERATOR,
                       "-DCMAKE_CXX_COMPILER=" KERNEX_CXX_COMPILER,
                       "-DCMAKE_PREFIX_PATH=" + prefix_.string()});
    ok_ = ok_ && step({"--build", channel_build_.string()});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(ok_) << "installing kernex or building the example failed (see above)";
    env_ = kernex::testing::clean_environment();
    env_.erase("KERNEX_PLUGIN_PATH");
    env_["KERNEX_DATA_DIR"] = (work_.path() / "data").string();
    env_["HOME"] = work_.path().string();
  }

  Outcome installed_kernex(const std::vector<std::string>& args) {
    return kernex::testing::run_program((prefix_ / "bin" / "kernex").string(), work_.path(), env_,
                                        args);
  }

  static fs::path example_plugin() { return example_build_ / "libkernex-echo.so"; }

  static kernex::testing::TempDir* dir_;
  static fs::path prefix_, example_build_, channel_build_;
  static bool ok_;
  kernex::testing::TempDir work_;
  std::map<std::string, std::string> env_;
};

kernex::testing::TempDir* CliCustomProvider::dir_ = nullptr;
fs::path CliCustomProvider::prefix_;
fs::path CliCustomProvider::example_build_;
fs::path CliCustomProvider::channel_build_;
bool CliCustomProvider::ok_ = false;

TEST_F(CliCustomProvider, InstalledKernexRunsThePluginFromKernexPluginPath) {
  ASSERT_TRUE(fs::is_regular_file(example_plugin()));
  env_["KERNEX_PLUGIN_PATH"] = example_build_.string();
  auto run = installed_kernex({"run", "--provider", "echo", "hello from", "outside the tree"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "hello from outside the tree\n");

  auto json = installed_kernex(
      {"run", "--provider", "echo", "--provider-opt", "prefix=echo: ", "--json", "hi"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json result = Json::parse(json.out);
  EXPECT_EQ(result["text"], "echo: hi");
  EXPECT_EQ(result["provider"], "echo");
  EXPECT_EQ(result["outcome"], "end_turn");

  auto bad = installed_kernex({"run", "--provider", "echo", "--provider-opt", "volume=11", "hi"});
  EXPECT_EQ(bad.exit_code, 4) << bad.out;
  EXPECT_NE(bad.err.find("unknown or mistyped option 'volume'"), std::string::npos) << bad.err;

  // Streamed: one text delta per word, then the result object.
  auto streamed =
      installed_kernex({"run", "--provider", "echo", "--json", "--stream", "one two three"});
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  std::vector<std::string> deltas;
  Json last;
  for (std::size_t start = 0; start < streamed.out.size();) {
    const std::size_t end = streamed.out.find('\n', start);
    last = Json::parse(streamed.out.substr(start, end - start));
    if (last.value("event", "") == "text_delta") deltas.push_back(last["text"]);
    start = end == std::string::npos ? streamed.out.size() : end + 1;
  }
  EXPECT_EQ(deltas, (std::vector<std::string>{"one ", "two ", "three"}));
  EXPECT_EQ(last["text"], "one two three");
}

TEST_F(CliCustomProvider, InstalledKernelUsesOnlyItsOwnPluginsAndData) {
  const fs::path installed = fs::canonical(prefix_);
  auto plugins = installed_kernex({"plugins", "--json"});
  ASSERT_EQ(plugins.exit_code, 0) << plugins.out << plugins.err;
  const Json list = Json::parse(plugins.out);
  ASSERT_FALSE(list.empty());
  bool replay = false;
  for (const Json& p : list) {
    const std::string path = p["path"];
    EXPECT_TRUE(path.starts_with(installed.string() + "/")) << path << " is not in the install";
    EXPECT_FALSE(path.starts_with(KERNEX_BINARY_DIR)) << path << " is in the build tree";
    replay = replay || p["name"] == "replay";
  }
  EXPECT_TRUE(replay);

  auto doctor = installed_kernex({"doctor", "--json"});
  ASSERT_EQ(doctor.exit_code, 0) << doctor.err;
  const Json report = Json::parse(doctor.out);
  EXPECT_EQ(fs::path(report["pricing_file"]["path"].get<std::string>()),
            installed / "share" / "kernex" / "pricing.yaml");
  EXPECT_EQ(report["pricing_file"]["exists"], true);

  // The same dir twice, and once more through a symlink: read once, so no duplicate errors.
  const fs::path plugin_dir = installed / "lib" / "kernex" / "plugins";
  fs::create_directory_symlink(plugin_dir, work_.path() / "link");
  env_["KERNEX_PLUGIN_PATH"] =
      plugin_dir.string() + ":" + plugin_dir.string() + ":" + (work_.path() / "link").string();
  auto twice = installed_kernex({"plugins", "--json"});
  EXPECT_EQ(twice.exit_code, 0) << twice.out << twice.err;
  EXPECT_EQ(Json::parse(twice.out).size(), list.size());
  env_.erase("KERNEX_PLUGIN_PATH");

  // `cmake --install` of the example puts it where the installed kernel looks by default.
  auto install = kernex::testing::run_program(KERNEX_CMAKE_COMMAND, work_.path(), env_,
                                              {"--install", example_build_.string()});
  ASSERT_EQ(install.exit_code, 0) << install.out << install.err;
  EXPECT_TRUE(fs::is_regular_file(plugin_dir / "libkernex-echo.so"));
  auto run = installed_kernex({"run", "--provider", "echo", "installed"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "installed\n");
}

// examples/custom-channel: a channel plugin built out of tree, run by the installed
// `kernex channel run`; two messages of one session share a conversation.
TEST_F(CliCustomProvider, InstalledKernexRunsAnOutOfTreeChannel) {
  ASSERT_TRUE(fs::is_regular_file(channel_build_ / "libkernex-inbox.so"));
  env_["KERNEX_PLUGIN_PATH"] = channel_build_.string();
  const fs::path in = work_.path() / "in", out = work_.path() / "out";
  fs::create_directories(in);
  std::ofstream(in / "alice.1.txt") << "hello";
  std::ofstream(in / "alice.2.txt") << "again";
  std::ofstream(work_.path() / "answers.jsonl") << "{\"text\": \"first answer\"}\n"
                                                   "{\"text\": \"second answer\"}\n";
  std::ofstream(work_.path() / "inbox.yaml")
      << "provider: {name: replay, options: {script: " << (work_.path() / "answers.jsonl").string()
      << "}}\nchannels:\n  - name: inbox\n    options: {inbox: " << in.string()
      << ", outbox: " << out.string() << ", stop_when_idle: true}\n";
  auto plugins = installed_kernex({"plugins", "--json"});
  ASSERT_EQ(plugins.exit_code, 0) << plugins.err;
  bool listed = false;
  for (const Json& p : Json::parse(plugins.out))
    listed = listed || (p["name"] == "inbox" && p["kind"] == "channel");
  EXPECT_TRUE(listed) << plugins.out;

  auto run = installed_kernex(
      {"channel", "run", "inbox", "--config", (work_.path() / "inbox.yaml").string()});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  auto read = [](const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(read(out / "alice.1.txt"), "first answer\n");
  EXPECT_EQ(read(out / "alice.2.txt"), "second answer\n");
  EXPECT_FALSE(fs::exists(in / "alice.1.txt"));
  // The channel's state lies in the data dir, under its name.
  EXPECT_EQ(read(work_.path() / "data/channels/inbox/handled"), "alice.1.txt\nalice.2.txt\n");

  auto missing = installed_kernex(
      {"channel", "run", "nope", "--config", (work_.path() / "inbox.yaml").string()});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no channel `nope`"), std::string::npos) << missing.err;
}

}  // namespace
