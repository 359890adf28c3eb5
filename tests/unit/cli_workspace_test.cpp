// `kernex workspace status|diff|accept|reject` on a session's real overlay layers under
// <data_dir>/overlays/<session> (made with the library, written through an overlayfs mount).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "kernex/workspace/overlay.hpp"
#include "kernex/workspace/sessions.hpp"
#include "overlay_mount.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::run_cli;
using kernex::testing::TempDir;

class CliWorkspace : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(real / "a.txt") << "alpha\n";
    std::ofstream(real / "b.txt") << "bravo\n";
  }

  // A session's overlay, written through a mount; false (with the reason) when mounts are refused.
  bool session(const std::string& id, const std::string& script, std::string& why) {
    const fs::path layer = kernex::workspace::overlays_dir(data) / id;
    kernex::workspace::CreateOptions options;
    options.session_id = id;
    auto o = kernex::workspace::Overlay::create(real, layer, options);
    EXPECT_TRUE(o) << o.error().describe();
    const auto run = kernex::testing::run_in_overlay(real, layer, tmp / "mnt", script);
    why = run.skip_reason + run.output;
    return run.mounted && run.exit_code == 0;
  }

  kernex::testing::CliOutcome cli(std::vector<std::string> args) {
    args.insert(args.begin(), "workspace");
    args.push_back("--data-dir");
    args.push_back(data.string());
    return run_cli(tmp.path(), kernex::testing::clean_environment(), args);
  }

  TempDir tmp;
  fs::path real = [this] {
    fs::create_directories(tmp / "real");
    return tmp / "real";
  }();
  fs::path data = tmp / "data";
};

TEST_F(CliWorkspace, StatusDiffAcceptRejectBySession) {
  std::string why;
  if (!session("older", "echo older > a.txt", why)) GTEST_SKIP() << why;
  ASSERT_TRUE(session("newer", "echo more >> a.txt; rm b.txt; echo c > c.txt", why)) << why;

  auto status = cli({"status"});  // the most recent session
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.out, "M  a.txt\nD  b.txt\nA  c.txt\n");
  auto json = cli({"status", "--session", "older", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json parsed = Json::parse(json.out);
  EXPECT_EQ(parsed["session"], "older");
  EXPECT_EQ(parsed["changes"].size(), 1u);

  auto diff = cli({"diff", "a.txt"});
  EXPECT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_EQ(diff.out,
            "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n alpha\n+more\n");

  auto accepted = cli({"accept", "--session", "newer", "a.txt", "c.txt"});
  EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_EQ(accepted.out, "applied   a.txt\napplied   c.txt\n");
  EXPECT_TRUE(fs::exists(real / "b.txt"));
  // The older session's a.txt now conflicts with what landed.
  auto conflict = cli({"accept", "--session", "older", "--json"});
  EXPECT_EQ(conflict.exit_code, 7);
  EXPECT_EQ(Json::parse(conflict.out)["conflicts"][0]["path"], "a.txt");

  auto rejected = cli({"reject", "--session", "older"});
  EXPECT_EQ(rejected.exit_code, 0) << rejected.err;
  EXPECT_FALSE(fs::exists(data / "overlays/older"));
  auto gone = cli({"status", "--session", "older"});
  EXPECT_EQ(gone.exit_code, 2);
  EXPECT_EQ(cli({"status", "--session", "../escape"}).exit_code, 2);
}

}  // namespace
