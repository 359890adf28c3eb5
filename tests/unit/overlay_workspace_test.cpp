// Overlay mode through a whole run (issue "Overlay workspace", item 1): with RunOptions::workspace
// and workspace_layers set, every sandboxed process of the run (the files tools, a skill's script
// toolbox, the REPL and the tools its code calls) writes into the layers' upper/ while the real
// tree stays byte for byte unchanged, and a later call, of the same toolbox or another, sees the
// earlier writes. The MCP server case is in tests/interop (it needs the npm servers).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "kernex/sandbox/toolbox.hpp"
#include "overlay_tool_run.hpp"

namespace kernex {
namespace {

namespace fs = std::filesystem;
using testing::file_text;
using testing::results_of;
using testing::tree_snapshot;

class OverlayWorkspace : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path ws = dirs_.ws();
    fs::create_directories(ws / ".git");
    std::ofstream(ws / "a.txt") << "alpha\n";
    std::ofstream(ws / "b.txt") << "bravo\n";
    std::ofstream(ws / "gone.txt") << "to delete\n";
    std::ofstream(ws / "script.sh") << "#!/bin/sh\n";
    std::ofstream(ws / ".git" / "config") << "[core]\n";
    before_ = tree_snapshot(ws);
    if (auto why = dirs_.overlay_unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
  // Where a write of the run landed.
  fs::path upper(const std::string& rel) const { return dirs_.upper() / rel; }
  Json files() const { return Json{{"workspace", dirs_.ws().string()}}; }
  void expect_real_tree_unchanged() const { EXPECT_EQ(tree_snapshot(dirs_.ws()), before_); }

  testing::OverlayDirs dirs_;
  std::map<std::string, std::string> before_;
};

TEST_F(OverlayWorkspace, FilesToolsWriteIntoTheUpperLayerAndSeeTheirWrites) {
  auto calls = testing::run_tools_in_overlay(
      dirs_, {{"files", files()}},
      {{"write", {{"file_path", "new.txt"}, {"content", "hello\n"}}},
       {"edit", {{"file_path", "a.txt"}, {"old_string", "alpha"}, {"new_string", "ALPHA"}}},
       {"bash",
        {{"command",
          "rm gone.txt && mv b.txt renamed.txt && chmod 600 script.sh && ln -s new.txt link && "
          "ln a.txt hard && mkdir -p made/deeper && echo x > made/deeper/f && : > .git/probe; "
          "echo ok"}}},
       {"read", {{"file_path", "link"}}},
       {"bash",
        {{"command",
          "cat a.txt hard renamed.txt made/deeper/f; test -e gone.txt || echo no-gone; "
          "stat -c %a script.sh"}}},
       {"grep", {{"pattern", "ALPHA"}}}});
  ASSERT_TRUE(calls) << calls.error().describe();
  const auto results = results_of(*calls);
  ASSERT_EQ(results.size(), 6u);
  EXPECT_EQ(results[2].rfind("ok\n", 0), 0u) << results[2];
  // .git stays read-only in the overlay.
  EXPECT_NE(results[2].find(".git/probe: Read-only file system"), std::string::npos) << results[2];
  EXPECT_NE(results[3].find("hello"), std::string::npos) << results[3];
  EXPECT_EQ(results[4], "ALPHA\nALPHA\nbravo\nx\nno-gone\n600\n");
  EXPECT_NE(results[5].find("a.txt"), std::string::npos) << results[5];
  EXPECT_NE(results[5].find("hard"), std::string::npos) << results[5];

  expect_real_tree_unchanged();
  EXPECT_EQ(file_text(upper("new.txt")), "hello\n");
  EXPECT_EQ(file_text(upper("a.txt")), "ALPHA\n");
  EXPECT_EQ(file_text(upper("renamed.txt")), "bravo\n");
  EXPECT_EQ(file_text(upper("made/deeper/f")), "x\n");
  EXPECT_TRUE(fs::is_symlink(upper("link")));
  struct stat st {};
  ASSERT_EQ(::lstat(upper("gone.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));  // a whiteout
  ASSERT_EQ(::lstat(upper("script.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(fs::exists(upper(".git/probe")));
}

// A skill's toolbox runs under its own policy: it sees what the files tools wrote, and they see
// what it wrote, within the same run.
TEST_F(OverlayWorkspace, ScriptToolboxesShareTheOverlayWithTheFilesTools) {
  Toolbox note;
  note.name = "note";
  note.description = "appends a note";
  note.parameters = Json{{"type", "object"}, {"properties", {{"text", {{"type", "string"}}}}}};
  note.command = "sh";
  note.args = {"-c", "printf '%s\\n' \"$1\" >> notes.txt && cat a.txt notes.txt", "sh", "{text}"};
  auto source =
      std::make_shared<testing::FixedTools>(std::vector<Toolbox>{note}, std::vector<McpServer>{});
  auto calls =
      testing::run_tools_in_overlay(dirs_, {{"files", files()}, {"script", files()}},
                                    {{"write", {{"file_path", "a.txt"}, {"content", "by files\n"}}},
                                     {"note", {{"text", "first"}}},
                                     {"read", {{"file_path", "notes.txt"}}},
                                     {"note", {{"text", "second"}}}},
                                    source);
  ASSERT_TRUE(calls) << calls.error().describe();
  const auto results = results_of(*calls);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[1], "by files\nfirst\n");
  EXPECT_NE(results[2].find("first"), std::string::npos) << results[2];
  EXPECT_EQ(results[3], "by files\nfirst\nsecond\n");
  expect_real_tree_unchanged();
  EXPECT_EQ(file_text(upper("notes.txt")), "first\nsecond\n");
  EXPECT_EQ(file_text(upper("a.txt")), "by files\n");
}

// The REPL worker writes through the overlay, and so do the tools its code calls: each sees the
// other's writes at once, and later calls of the run see both.
TEST_F(OverlayWorkspace, ReplCodeAndTheToolsItCallsWriteIntoTheUpperLayer) {
  auto calls = testing::run_tools_in_overlay(
      dirs_,
      {{"repl", {{"workspace", dirs_.ws().string()}, {"timeout", 20}, {"offer", "always"}}},
       {"files", files()}},
      {{"write", {{"file_path", "seed.txt"}, {"content", "seed\n"}}},
       {"eval_code",
        {{"code",
          "import os\n"
          "open('repl.txt', 'w').write('from repl\\n')\n"
          "print(open('seed.txt').read().strip())\n"
          "tools.write(file_path='from-code.txt', content='code\\n')\n"
          "print(open('from-code.txt').read().strip())\n"
          "os.remove('a.txt')\n"
          "print(tools.bash(command='cat repl.txt; test -e a.txt || echo a-gone').strip())\n"}}},
       {"read", {{"file_path", "repl.txt"}}}});
  ASSERT_TRUE(calls) << calls.error().describe();
  std::string eval, last;
  for (const auto& c : *calls) {
    if (c["name"] == "eval_code") eval = c.value("result", std::string());
    last = c.value("result", std::string());
  }
  EXPECT_NE(eval.find("seed\\ncode\\nfrom repl\\na-gone"), std::string::npos) << eval;
  EXPECT_NE(last.find("from repl"), std::string::npos) << last;
  expect_real_tree_unchanged();
  EXPECT_EQ(file_text(upper("repl.txt")), "from repl\n");
  EXPECT_EQ(file_text(upper("from-code.txt")), "code\n");
  struct stat st {};
  ASSERT_EQ(::lstat(upper("a.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));  // a whiteout
}

// Layers without a workspace are refused before anything runs.
TEST_F(OverlayWorkspace, LayersNeedAWorkspace) {
  Config config;
  config.provider.name = "replay";
  config.provider.config = {{"script", (dirs_.root() / "none.jsonl").string()}};
  config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
  config.pricing_file = fs::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  config.data_dir = dirs_.root() / "data";
  std::ofstream(dirs_.root() / "none.jsonl") << "{\"text\": \"never\"}\n";
  auto kernel = Kernel::create(config);
  ASSERT_TRUE(kernel) << kernel.error().describe();
  RunOptions options;
  options.workspace_layers = dirs_.layers();
  auto run = (*kernel)->run(Request::from_text("test", "go"), options);
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("workspace_layers needs"), std::string::npos)
      << run.error().describe();
  // And at the sandbox's door, for a host that fills a Context by hand.
  sandbox::CallScope scope;
  scope.workspace_layers = dirs_.layers();
  auto where = sandbox::call_workspace(scope, dirs_.ws());
  ASSERT_FALSE(where);
  EXPECT_NE(where.error().message.find("without the workspace"), std::string::npos);
}

}  // namespace
}  // namespace kernex
