// `kernex run --overlay` (and `workspace: {mode: overlay}`): a replayed model writes, deletes,
// renames and chmods through the files tools; the real tree stays byte for byte until
// `kernex workspace accept`, later runs of the session see earlier writes, and a run after accept
// or reject gets a fresh layer at a new path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "overlay_dirs.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::CliOutcome;
using kernex::testing::tree_snapshot;

std::string call_line(const std::string& name, const Json& arguments) {
  return Json{{"tool_calls", {{{"id", "c"}, {"name", name}, {"arguments", arguments}}}}}.dump() +
         "\n";
}
std::string done_line() { return Json{{"text", "done"}}.dump() + "\n"; }

class CliRunOverlay : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(real / "sub");
    std::ofstream(real / "a.txt") << "alpha\n";
    std::ofstream(real / "b.txt") << "bravo\n";
    std::ofstream(real / "sub/c.txt") << "charlie\n";
    env = kernex::testing::clean_environment();
    env.erase("KERNEX_DATA_DIR");
  }

  // bin/kernex ARGS with the real tree as its current directory (output files stay out of it).
  CliOutcome in_real_tree(std::vector<std::string> args) {
    args.insert(args.begin(), {"-c", "cd \"$0\" && exec \"$@\"", real.string(), KERNEX_CLI});
    return kernex::testing::run_program("/bin/sh", tmp.path(), env, args);
  }
  CliOutcome run(const std::string& script, std::vector<std::string> extra) {
    static int n = 0;
    const fs::path path = tmp.write("script" + std::to_string(++n) + ".jsonl", script);
    std::vector<std::string> args = {
        "run",        "--provider",  "replay", "--provider-opt", "script=" + path.string(),
        "--data-dir", data.string(), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("go");
    return in_real_tree(args);
  }
  CliOutcome workspace(std::vector<std::string> args) {
    args.insert(args.begin(), "workspace");
    args.insert(args.end(), {"--data-dir", data.string(), "--session", "cli"});
    return in_real_tree(args);
  }
  // The run's tool results, each checked to have succeeded.
  std::vector<std::string> results(const CliOutcome& r) {
    std::vector<std::string> out;
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    if (r.exit_code != 0) return out;
    const Json parsed = Json::parse(r.out);
    for (const auto& call : parsed["tool_calls"]) {
      EXPECT_FALSE(call["is_error"].get<bool>()) << call.dump();
      out.push_back(call["result"].get<std::string>());
    }
    return out;
  }
  std::vector<std::string> layers() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(data / "overlays", ec))
      names.push_back(e.path().filename().string());
    return names;
  }

  kernex::testing::TempDir tmp;
  fs::path real = fs::canonical(tmp.path()) / "real";
  fs::path data = tmp / "data";
  std::map<std::string, std::string> env;
};

TEST_F(CliRunOverlay, WritesWaitForAcceptAndLaterRunsSeeThem) {
  const std::string why = kernex::testing::OverlayDirs().overlay_unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  const auto before = tree_snapshot(real);
  const std::string edits =
      call_line("write", {{"file_path", "new.txt"}, {"content", "new\n"}}) +
      call_line("bash", {{"command",
                          "echo more >> a.txt && rm b.txt && mv sub/c.txt sub/d.txt && "
                          "chmod 700 a.txt && echo ok"}}) +
      done_line();
  results(run(edits, {"--overlay"}));
  EXPECT_EQ(tree_snapshot(real), before);  // byte for byte, modes included
  ASSERT_EQ(layers().size(), 1u);
  const std::string first_layer = layers()[0];

  // The next run of the session reads what the first wrote.
  auto seen = results(
      run(call_line("bash", {{"command", "cat new.txt sub/d.txt"}}) + done_line(), {"--overlay"}));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("new\ncharlie\n"), std::string::npos) << seen[0];
  EXPECT_EQ(layers(), std::vector<std::string>{first_layer});

  auto status = workspace({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.out,
            "M  a.txt (mode 644 -> 700)\nD  b.txt\nA  new.txt\nR  sub/c.txt -> sub/d.txt\n");
  auto diff = workspace({"diff"});
  EXPECT_NE(diff.out.find("+more\n"), std::string::npos) << diff.out;
  EXPECT_EQ(tree_snapshot(real), before);

  auto accepted = workspace({"accept", "--json"});
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err << accepted.out;
  EXPECT_TRUE(Json::parse(accepted.out)["layer_removed"].get<bool>());
  EXPECT_EQ(kernex::testing::file_text(real / "a.txt"), "alpha\nmore\n");
  EXPECT_EQ(fs::status(real / "a.txt").permissions(), fs::perms::owner_all);
  EXPECT_EQ(kernex::testing::file_text(real / "new.txt"), "new\n");
  EXPECT_EQ(kernex::testing::file_text(real / "sub/d.txt"), "charlie\n");
  EXPECT_FALSE(fs::exists(real / "b.txt"));
  EXPECT_FALSE(fs::exists(real / "sub/c.txt"));
  EXPECT_TRUE(layers().empty());

  // After accept the session starts a fresh layer, at a new path; workspace.mode from the config.
  const fs::path config = tmp.write("kernex.yaml", "workspace: {mode: overlay}\n");
  const auto accepted_tree = tree_snapshot(real);
  results(run(call_line("write", {{"file_path", "x.txt"}, {"content", "x"}}) + done_line(),
              {"--config", config.string()}));
  ASSERT_EQ(layers().size(), 1u);
  EXPECT_NE(layers()[0], first_layer);
  EXPECT_EQ(tree_snapshot(real), accepted_tree);
  EXPECT_EQ(workspace({"status"}).out, "A  x.txt\n");

  // --no-overlay overrides the config: the write lands in the tree.
  results(run(call_line("write", {{"file_path", "y.txt"}, {"content", "y"}}) + done_line(),
              {"--config", config.string(), "--no-overlay"}));
  EXPECT_EQ(kernex::testing::file_text(real / "y.txt"), "y");

  auto rejected = workspace({"reject"});
  EXPECT_EQ(rejected.exit_code, 0) << rejected.err;
  EXPECT_FALSE(fs::exists(real / "x.txt"));
  EXPECT_TRUE(layers().empty());
}

}  // namespace
