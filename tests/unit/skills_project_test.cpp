// Projects: kernex's projects.rs cases, plus errors that name the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "kernex/skills/project.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex::skills;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

Project parsed(const std::string& text) {
  auto p = parse_project(text, "/p/demo/AGENTS.md");
  EXPECT_TRUE(p) << p.error().describe();
  return p ? *p : Project{};
}

TEST(SkillsProjects, MissingDirGivesNone) {
  EXPECT_TRUE(load_projects("/nonexistent/kernex/projects").empty());
}

TEST(SkillsProjects, RoleMdProject) {
  kernex::testing::TempDir dir;
  dir.write("projects/my-project/ROLE.md", "You are a helpful assistant.");
  auto projects = load_projects(dir / "projects");
  ASSERT_EQ(projects.size(), 1u);
  EXPECT_EQ(projects[0].name, "my-project");
  EXPECT_EQ(projects[0].instructions, "You are a helpful assistant.");
  EXPECT_TRUE(projects[0].skills.empty());
  ASSERT_NE(find_project(projects, "my-project"), nullptr);
  EXPECT_EQ(find_project(projects, "other"), nullptr);
}

TEST(SkillsProjects, WhitespaceOnlyAndNoFileAreSkipped) {
  kernex::testing::TempDir dir;
  dir.write("projects/blank/ROLE.md", "  \n\t\n");
  dir.write("projects/nofile/notes.txt", "x");
  dir.write("projects/ok/AGENTS.md", "Do things.");
  auto projects = load_projects(dir / "projects");
  ASSERT_EQ(projects.size(), 1u);
  EXPECT_EQ(projects[0].name, "ok");
  auto blank = load_project(dir / "projects" / "blank");
  ASSERT_FALSE(blank);
  EXPECT_THAT(blank.error().message, HasSubstr("ROLE.md"));
  auto nofile = load_project(dir / "projects" / "nofile");
  ASSERT_FALSE(nofile);
  EXPECT_THAT(nofile.error().message, HasSubstr("missing AGENTS.md (or ROLE.md)"));
}

TEST(SkillsProjects, TomlAndYamlFrontmatterNameSkills) {
  auto toml = parsed(
      "---\nskills = [\"ibkr-trader\", \"playwright-mcp\"]\n---\nYou are a trading assistant.\n");
  EXPECT_THAT(toml.skills, ElementsAre("ibkr-trader", "playwright-mcp"));
  EXPECT_THAT(toml.instructions, HasSubstr("trading assistant"));
  auto yaml =
      parsed("---\nskills: [ibkr-trader, playwright-mcp]\n---\nYou are a trading assistant.\n");
  EXPECT_THAT(yaml.skills, ElementsAre("ibkr-trader", "playwright-mcp"));
  EXPECT_EQ(yaml.instructions, "You are a trading assistant.");
  auto block = parsed("---\nskills:\n  - a\n  - b\n---\nBody");
  EXPECT_THAT(block.skills, ElementsAre("a", "b"));
}

TEST(SkillsProjects, NoFrontmatterKeepsTheBodyVerbatim) {
  const std::string text = "Plain role.\n\nSecond paragraph.";
  auto p = parsed(text);
  EXPECT_TRUE(p.skills.empty());
  EXPECT_EQ(p.instructions, text);
  auto empty_list = parsed("---\nskills = []\n---\nBody kept.");
  EXPECT_TRUE(empty_list.skills.empty());
  EXPECT_EQ(empty_list.instructions, "Body kept.");
}

TEST(SkillsProjects, LoadWithFrontmatterStripsIt) {
  kernex::testing::TempDir dir;
  dir.write("projects/trade/AGENTS.md",
            "\xEF\xBB\xBF---\r\nskills = [\"ibkr-trader\"]\r\n---\r\nTrade carefully.\r\n");
  auto p = load_project(dir / "projects" / "trade");
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_THAT(p->skills, ElementsAre("ibkr-trader"));
  EXPECT_EQ(p->instructions, "Trade carefully.");
  EXPECT_THAT(p->instructions, Not(HasSubstr("---")));
  EXPECT_EQ(to_json(*p)["skills"][0], "ibkr-trader");
}

TEST(SkillsProjects, AgentsMdWinsOverRoleMd) {
  kernex::testing::TempDir dir;
  dir.write("p/AGENTS.md", "modern instructions");
  dir.write("p/ROLE.md", "legacy instructions");
  auto p = load_project(dir / "p");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->instructions, "modern instructions");
  EXPECT_EQ(p->file.filename(), "AGENTS.md");
  kernex::testing::TempDir only;
  only.write("q/AGENTS.md", "agents only");
  EXPECT_EQ(load_project(only / "q")->instructions, "agents only");
}

TEST(SkillsProjects, SkillsOnlyProjectLoads) {
  kernex::testing::TempDir dir;
  dir.write("p/AGENTS.md", "---\nskills = [\"git\"]\n---\n");
  auto p = load_project(dir / "p");
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_TRUE(p->instructions.empty());
  EXPECT_THAT(p->skills, ElementsAre("git"));
}

TEST(SkillsProjects, BadFrontmatterNamesFileAndLine) {
  auto wrong = parse_project("\n\n---\nskills: 5\n---\nBody", "/p/x/AGENTS.md");
  ASSERT_FALSE(wrong);
  EXPECT_THAT(wrong.error().message,
              HasSubstr("/p/x/AGENTS.md:4: skills: expected a list of skill names"));
  auto items = parse_project("---\nskills: [[a]]\n---\nBody", "/p/x/AGENTS.md");
  ASSERT_FALSE(items);
  EXPECT_THAT(items.error().message, HasSubstr("expected skill names (strings)"));
  auto broken = parse_project("---\nskills: [a\n---\nBody", "/p/x/AGENTS.md");
  ASSERT_FALSE(broken);
  EXPECT_THAT(broken.error().message, HasSubstr("invalid frontmatter"));
  EXPECT_FALSE(parse_project("bad \xFF byte", "/p/x/AGENTS.md"));
}

TEST(SkillsProjects, ContextSourceAppendsInstructions) {
  Project p;
  p.instructions = "Project rules.";
  ProjectContextSource source(p);
  kernex::Context ctx;
  ASSERT_TRUE(source.contribute(ctx, kernex::Request::from_text("u", "hi")));
  EXPECT_EQ(ctx.system_prompt, "Project rules.");
  ASSERT_TRUE(source.contribute(ctx, kernex::Request::from_text("u", "hi")));
  EXPECT_EQ(ctx.system_prompt, "Project rules.\n\nProject rules.");
}

}  // namespace
