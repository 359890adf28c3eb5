// Saved skills and checkpoints belong to one tenant. In a host that serves tenants (a registered
// tool area holding `<area>/<tenant>/<session>` workspaces, as `kernex serve` does) a skill saved
// by one tenant's code lands in that tenant's area and another tenant's code neither imports it nor
// learns of it; a workspace outside every area gets nothing kept on disk.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernex/kernel.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/skills/trust.hpp"
#include "replay_lines.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

namespace fs = std::filesystem;

class SavedSkillTenants : public ::testing::Test {
 protected:
  void SetUp() override { register_tool_area(area(), "serve workspaces"); }
  fs::path data() const { return dir_.path() / "data"; }
  fs::path area() const { return data() / "workspaces"; }

  // A run in `workspace` whose code is `code`; returns its submitted result.
  Json run_in(const fs::path& workspace, const std::string& code) {
    fs::create_directories(workspace);
    std::ofstream(dir_.path() / "script.jsonl") << testing::eval_code_line(code, "m1") << "\n"
                                                << testing::answer_line("done", 10) << "\n";
    Config config;
    config.provider.name = "replay";
    config.provider.config = {{"script", (dir_.path() / "script.jsonl").string()}};
    config.toolboxes = std::vector<PluginRef>{
        {"repl", Json{{"timeout", 20}, {"offer", "always"}, {"pool_size", 0}}}};
    config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
    config.data_dir = data();
    auto kernel = Kernel::create(config);
    EXPECT_TRUE(kernel) << kernel.error().describe();
    if (!kernel) return Json();
    RunOptions options;
    options.workspace = workspace;
    auto result = (*kernel)->run(Request::from_text("test", "go"), options);
    EXPECT_TRUE(result) << result.error().describe();
    return result && result->result ? *result->result : Json();
  }

  testing::TempDir dir_;
};

TEST_F(SavedSkillTenants, ASkillSavedByOneTenantIsNotAnothers) {
  const Json saved = run_in(area() / "alice" / "s1",
                            "submit_result(save_skill('tally', 'X = 1\\n', 'Holds one.'))\n");
  ASSERT_TRUE(saved.is_object()) << saved.dump();
  EXPECT_EQ(saved["folder"], (data() / "repl-skills" / "alice" / "tally").string());
  EXPECT_TRUE(fs::is_regular_file(data() / "repl-skills" / "alice" / "tally" / "tally.py"));

  const Json bob = run_in(area() / "bob" / "s1",
                          "try:\n"
                          "    import skills.tally\n"
                          "    submit_result('imported')\n"
                          "except ImportError as e:\n"
                          "    submit_result(type(e).__name__ + ': ' + str(e))\n");
  ASSERT_TRUE(bob.is_string()) << bob.dump();
  EXPECT_EQ(bob.get<std::string>().find("alice"), std::string::npos) << bob;
  EXPECT_EQ(bob.get<std::string>().rfind("ModuleNotFoundError", 0), 0u) << bob;
  EXPECT_FALSE(fs::exists(data() / "repl-skills" / "bob"));  // reading made nothing
}

TEST_F(SavedSkillTenants, AWorkspaceOutsideEveryAreaKeepsNothingOnDisk) {
  const Json r = run_in(dir_.path() / "elsewhere",
                        "out = {}\n"
                        "try:\n"
                        "    save_skill('tally', 'X = 1', 'Holds one.')\n"
                        "    out['save'] = 'saved'\n"
                        "except ValueError as e:\n"
                        "    out['save'] = str(e)\n"
                        "v = 1\n"
                        "out['persisted'] = checkpoint('v')['persisted']\n"
                        "submit_result(out)\n");
  ASSERT_TRUE(r.is_object()) << r.dump();
  EXPECT_NE(r["save"], "saved");
  EXPECT_EQ(r["persisted"], false);
  EXPECT_FALSE(fs::exists(data() / "repl-skills" / "local"));
  EXPECT_FALSE(fs::exists(data() / "repl-checkpoints"));
}

// One kernel, one conversation: a later turn (the same REPL session) imports a skill a person
// trusted after an earlier turn saved it, without a new process.
TEST_F(SavedSkillTenants, ALaterTurnOfTheSessionImportsASkillTrustedMeanwhile) {
  const fs::path workspace = area() / "alice" / "s1";
  fs::create_directories(workspace);
  Config config;
  config.provider.name = "replay";
  config.provider.config = {{"script", (dir_.path() / "script.jsonl").string()}};
  config.toolboxes = std::vector<PluginRef>{
      {"repl", Json{{"timeout", 20}, {"offer", "always"}, {"pool_size", 0}}}};
  config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR};
  config.data_dir = data();
  config.memory = PluginRef{"sqlite", Json::object()};
  const std::string use =
      "try:\n"
      "    import skills.tally as t\n"
      "    submit_result(t.X)\n"
      "except ImportError as e:\n"
      "    submit_result(str(e))\n";
  std::ofstream(dir_.path() / "script.jsonl")
      << testing::eval_code_line("submit_result(save_skill('tally', 'X = 7\\n', 'Holds seven.'))",
                                 "m1")
      << "\n"
      << testing::answer_line("saved", 10) << "\n"
      << testing::eval_code_line(use, "m1") << "\n"
      << testing::answer_line("done", 10) << "\n";
  auto kernel = Kernel::create(config);
  ASSERT_TRUE(kernel) << kernel.error().describe();
  RunOptions options;
  options.workspace = workspace;
  auto first = (*kernel)->run(Request::from_text("test", "save"), options);
  ASSERT_TRUE(first && first->result) << (first ? first->text : first.error().describe());
  const fs::path folder = (*first->result)["folder"].get<std::string>();
  ASSERT_TRUE(skills::trust_skill(data() / skills::kTrustFileName, folder));
  auto second = (*kernel)->run(Request::from_text("test", "use"), options);
  ASSERT_TRUE(second && second->result) << (second ? second->text : second.error().describe());
  EXPECT_EQ(*second->result, 7) << *second->result;
}

}  // namespace
}  // namespace kernex
