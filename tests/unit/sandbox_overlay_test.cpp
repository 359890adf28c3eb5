// The workspace through overlayfs (issue "Overlay workspace"): every write path of a sandboxed
// command lands in the upper layer, the real tree is never written, the command sees its own
// writes from one spawn to the next, and the layers themselves are out of its reach.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"
#include "overlay_dirs.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;

namespace {

using kernex::testing::file_text;
using kernex::testing::tree_snapshot;

class SandboxOverlay : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dirs_.root();
    ws_ = dirs_.ws();
    layers_ = WorkspaceOverlay::in(dirs_.layers());
    fs::create_directories(ws_ / "dir");
    fs::create_directories(ws_ / ".git");
    std::ofstream(ws_ / "a.txt") << "alpha\n";
    std::ofstream(ws_ / "dir" / "b.txt") << "bravo\n";
    std::ofstream(ws_ / "gone.txt") << "to delete\n";
    std::ofstream(ws_ / "big.txt") << std::string(10000, 'x');
    std::ofstream(ws_ / "script.sh") << "#!/bin/sh\n";
    std::ofstream(ws_ / ".git" / "config") << "[core]\n";
    before_ = tree_snapshot(ws_);
  }
  kernex::Result<Policy> overlay_policy() {
    return PolicyBuilder().workspace(ws_).workspace_overlay(layers_).Build();
  }
  SpawnResult sh(const Policy& policy, const std::string& script) {
    Command cmd;
    cmd.argv = {"/bin/sh", "-c", script};
    auto r = spawn(policy, cmd);
    EXPECT_TRUE(r) << (r ? "" : r.error().describe());
    return r ? *r : SpawnResult{};
  }

  kernex::testing::OverlayDirs dirs_;
  fs::path root_, ws_;
  WorkspaceOverlay layers_;
  std::map<std::string, std::string> before_;
};

TEST_F(SandboxOverlay, EveryWritePathLandsInTheUpperLayerOnly) {
  auto policy = overlay_policy();
  if (!policy) GTEST_SKIP() << "overlay not available here: " << policy.error().describe();
  auto r = sh(*policy,
              "set -e\n"
              "echo new > created.txt\n"
              "echo changed >> a.txt\n"
              "rm gone.txt\n"
              "mv dir/b.txt dir/renamed.txt\n"
              "chmod 600 script.sh\n"
              "ln -s a.txt link\n"
              "ln a.txt hard\n"
              "mkdir -p made/deeper && echo x > made/deeper/f\n"
              ": > big.txt\n"
              "echo done\n");
  ASSERT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "done\n");
  // Nothing reached the real tree.
  EXPECT_EQ(tree_snapshot(ws_), before_);
  // The next spawn sees the writes (one mount per policy, not per spawn).
  auto seen = sh(*policy,
                 "cat created.txt a.txt dir/renamed.txt; test ! -e gone.txt && echo no-gone;"
                 " stat -c %a script.sh; readlink link; wc -c < big.txt; cat made/deeper/f");
  EXPECT_EQ(seen.stdout_data, "new\nalpha\nchanged\nbravo\nno-gone\n600\na.txt\n0\nx\n")
      << seen.stderr_data;
  // ...because they are in the upper layer.
  EXPECT_EQ(file_text(layers_.upper / "created.txt"), "new\n");
  EXPECT_EQ(file_text(layers_.upper / "a.txt"), "alpha\nchanged\n");
  struct stat st {};
  ASSERT_EQ(::lstat((layers_.upper / "gone.txt").c_str(), &st), 0);  // a whiteout
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_TRUE(fs::is_symlink(layers_.upper / "link"));
}

TEST_F(SandboxOverlay, ProtectedPathsStayProtectedInsideTheOverlay) {
  auto policy = overlay_policy();
  if (!policy) GTEST_SKIP() << "overlay not available here: " << policy.error().describe();
  auto r = sh(*policy,
              "echo evil >> .git/config && echo wrote-git;"
              " mkdir -p .git/hooks 2>/dev/null && echo made-hooks;"
              " ls " +
                  layers_.upper.string() + " && echo saw-upper;" + " echo x > " +
                  (layers_.upper / "planted").string() + " && echo wrote-upper;" +
                  " cp script.sh s2 && ./s2 && echo ran;" + " true");
  EXPECT_EQ(r.stdout_data.find("wrote-git"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("saw-upper"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("wrote-upper"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("ran"), std::string::npos) << r.stdout_data;  // noexec
  EXPECT_EQ(file_text(ws_ / ".git" / "config"), "[core]\n");
  EXPECT_FALSE(fs::exists(layers_.upper / "planted"));
  EXPECT_EQ(tree_snapshot(ws_), before_);
}

TEST_F(SandboxOverlay, LayersMustBeOutOfReachAndEnforced) {
  auto inside =
      PolicyBuilder().workspace(ws_).workspace_overlay({ws_ / "dir", layers_.work}).Build();
  ASSERT_FALSE(inside);
  EXPECT_NE(inside.error().describe().find("out of the sandbox's reach"), std::string::npos)
      << inside.error().describe();
  auto unenforced =
      PolicyBuilder().workspace(ws_).workspace_overlay(layers_).enforce(false).Build();
  ASSERT_FALSE(unenforced);
  EXPECT_NE(unenforced.error().describe().find("needs enforcement"), std::string::npos);
  auto missing =
      PolicyBuilder().workspace(ws_).workspace_overlay({root_ / "nope", layers_.work}).Build();
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().describe().find("not an existing directory"), std::string::npos);
  auto no_workspace = PolicyBuilder().workspace_overlay(layers_).Build();
  ASSERT_FALSE(no_workspace);
}

// Every toolbox of a run has its own policy over the run's layers (the files tools, each skill's
// toolbox, the REPL, each MCP server): each must see the others' writes at once, even what it had
// looked up before, and write over what another already changed.
TEST_F(SandboxOverlay, PoliciesOverTheSameLayersSeeEachOthersWritesAtOnce) {
  auto a = overlay_policy();
  if (!a) GTEST_SKIP() << "overlay not available here: " << a.error().describe();
  auto b = overlay_policy();  // another policy (another namespace) over the same layers
  ASSERT_TRUE(b) << b.error().describe();
  // A looks up what B is about to make, change and delete.
  auto looked = sh(*a, "test -e made.txt || echo absent; cat a.txt gone.txt");
  EXPECT_EQ(looked.stdout_data, "absent\nalpha\nto delete\n") << looked.stderr_data;
  auto wrote = sh(*b, "echo made > made.txt && echo by-b >> a.txt && rm gone.txt && echo ok");
  EXPECT_EQ(wrote.stdout_data, "ok\n") << wrote.stderr_data;
  auto seen = sh(*a, "cat made.txt a.txt; test -e gone.txt || echo gone");
  EXPECT_EQ(seen.stdout_data, "made\nalpha\nby-b\ngone\n") << seen.stderr_data;
  // A writes over B's copy-up, and B sees it.
  auto over = sh(*a, "echo by-a >> a.txt && echo ok");
  EXPECT_EQ(over.stdout_data, "ok\n") << over.stderr_data;
  EXPECT_EQ(sh(*b, "cat a.txt").stdout_data, "alpha\nby-b\nby-a\n");
  EXPECT_EQ(file_text(layers_.upper / "a.txt"), "alpha\nby-b\nby-a\n");
  EXPECT_EQ(tree_snapshot(ws_), before_);
}

}  // namespace
