// Trigger matching (kernex semantics, the spec's cases) and Agent Skills activation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "kernex/skills/activation.hpp"
#include "kernex/skills/loader.hpp"

namespace fs = std::filesystem;
using namespace kernex::skills;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const fs::path kFixtures = fs::path(KERNEX_SOURCE_DIR "/../shared/fixtures/skills");

kernex::McpServer server(const std::string& name) {
  return kernex::McpServer{name, "npx", {"@" + name + "/mcp"}, {}};
}
kernex::Toolbox toolbox(const std::string& name) {
  kernex::Toolbox t;
  t.name = name;
  t.description = name + " tool";
  t.command = "echo";
  return t;
}

Skill skill(const std::string& name, const std::string& trigger,
            std::vector<kernex::McpServer> servers = {}, std::vector<kernex::Toolbox> boxes = {}) {
  Skill s;
  s.name = name;
  s.description = "The " + name + " skill.";
  s.instructions = "Use " + name + " well.";
  s.path = "/skills/" + name;
  s.file = "/skills/" + name + "/SKILL.md";
  for (std::size_t pos = 0; pos <= trigger.size();) {
    auto bar = trigger.find('|', pos);
    if (bar == std::string::npos) bar = trigger.size();
    if (bar > pos) s.triggers.push_back(trigger.substr(pos, bar - pos));
    pos = bar + 1;
  }
  s.mcp_servers = std::move(servers);
  s.toolboxes = std::move(boxes);
  return s;
}

std::vector<std::string> server_names(const std::vector<kernex::McpServer>& v) {
  std::vector<std::string> out;
  for (const auto& s : v) out.push_back(s.name);
  return out;
}
std::vector<std::string> toolbox_names(const std::vector<kernex::Toolbox>& v) {
  std::vector<std::string> out;
  for (const auto& t : v) out.push_back(t.name);
  return out;
}

}  // namespace

TEST(TriggerMatching, McpServersFromKernexCases) {
  std::vector<Skill> skills = {skill("playwright", "browse|website", {server("playwright")})};
  EXPECT_THAT(server_names(match_skill_triggers(skills, "please browse google.com")),
              ElementsAre("playwright"));
  EXPECT_TRUE(match_skill_triggers(skills, "what is the weather?").empty());

  std::vector<Skill> upper = {skill("pw", "Browse|Website", {server("playwright")})};
  EXPECT_EQ(match_skill_triggers(upper, "BROWSE google.com").size(), 1u);

  skills[0].available = false;
  EXPECT_TRUE(match_skill_triggers(skills, "please browse google.com").empty());

  std::vector<Skill> shared = {skill("a", "browse", {server("playwright")}),
                               skill("b", "website", {server("playwright")})};
  EXPECT_EQ(match_skill_triggers(shared, "browse a website").size(), 1u);

  std::vector<Skill> no_trigger = {skill("x", "", {server("s")})};
  EXPECT_TRUE(match_skill_triggers(no_trigger, "anything").empty());
  std::vector<Skill> no_mcp = {skill("x", "browse")};
  EXPECT_TRUE(match_skill_triggers(no_mcp, "browse").empty());

  std::vector<Skill> lazy = {skill("l", "browse", {server("s")})};
  lazy[0].lazy = true;  // lazy skills still bring their servers (kernex)
  EXPECT_EQ(match_skill_triggers(lazy, "browse").size(), 1u);
}

TEST(TriggerMatching, SubstringWithoutWordBoundariesAsInKernex) {
  Skill github = skill("github", "github|PR|repo");
  EXPECT_TRUE(trigger_matches(github, "please improve this"));  // "pr" in "improve"
  Skill git = skill("git", "log");
  EXPECT_TRUE(trigger_matches(git, "Login page"));
  EXPECT_FALSE(trigger_matches(skill("blank", " | "), "anything"));
}

TEST(TriggerMatching, Toolboxes) {
  std::vector<Skill> skills = {
      skill("linter", "lint|check", {}, {toolbox("linter"), toolbox("fixer")})};
  EXPECT_THAT(toolbox_names(match_skill_toolboxes(skills, "please lint this file")),
              ElementsAre("linter", "fixer"));
  EXPECT_TRUE(match_skill_toolboxes(skills, "deploy to production").empty());

  std::vector<Skill> dup = {skill("a", "lint", {}, {toolbox("linter")}),
                            skill("b", "lint", {}, {toolbox("linter")})};
  EXPECT_EQ(match_skill_toolboxes(dup, "lint").size(), 1u);

  skills[0].available = false;
  EXPECT_TRUE(match_skill_toolboxes(skills, "lint").empty());
  skills[0].available = true;
  skills[0].lazy = true;
  EXPECT_TRUE(match_skill_toolboxes(skills, "lint").empty());

  std::vector<Skill> named = {skill("lint", "", {}, {toolbox("linter"), toolbox("fixer")})};
  EXPECT_THAT(toolbox_names(toolboxes_for_skill(named, "lint")), ElementsAre("linter", "fixer"));
  EXPECT_TRUE(toolboxes_for_skill(named, "unknown").empty());
}

TEST(TriggerMatching, LazyDirectoryAndSkillSearch) {
  EXPECT_EQ(lazy_skill_directory({}), "");
  Skill pw = skill("playwright", "browse");
  pw.lazy = true;
  pw.description = "Browser automation.";
  std::string dir = lazy_skill_directory({pw});
  EXPECT_THAT(dir, HasSubstr("playwright"));
  EXPECT_THAT(dir, HasSubstr("Browser automation."));
  EXPECT_THAT(dir, HasSubstr("skill_search"));
  pw.available = false;
  EXPECT_EQ(lazy_skill_directory({pw}), "");

  auto search = skill_search_toolbox();
  EXPECT_EQ(search.name, "skill_search");
  EXPECT_TRUE(search.parameters["properties"].contains("skill_name"));
  EXPECT_EQ(search.parameters["required"], kernex::Json::array({"skill_name"}));
}

TEST(TriggerMatching, FixtureSkillsTriggerByName) {
  auto loaded = load_skills({kFixtures / "kernex"});
  auto names = triggered_skills(loaded.skills, "Please take a screenshot of the website");
  EXPECT_THAT(names, ::testing::Contains("playwright"));
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_THAT(server_names(match_skill_triggers(loaded.skills, "take a screenshot")),
              ElementsAre("playwright"));
}

TEST(Activation, CatalogueListsNamesAndDescriptionsInNameOrder) {
  EXPECT_EQ(skill_catalogue({}), "");
  std::vector<Skill> skills = {skill("zeta", ""), skill("alpha", "")};
  skills[1].description = "Uses <tags> & \"quotes\".";
  std::string c = skill_catalogue(skills);
  EXPECT_LT(c.find("<name>\nalpha\n</name>"), c.find("<name>\nzeta\n</name>"));
  EXPECT_THAT(c, HasSubstr("Uses &lt;tags&gt; &amp; &quot;quotes&quot;."));
  EXPECT_THAT(c, HasSubstr("<location>\n/skills/zeta/SKILL.md\n</location>"));
  EXPECT_THAT(c, HasSubstr("activate_skill"));
  EXPECT_THAT(c, Not(HasSubstr("Use zeta well.")));  // instructions only once activated
  std::vector<Skill> reversed = {skills[1], skills[0]};
  EXPECT_EQ(skill_catalogue(reversed), c);

  auto spec = activate_skill_tool(skills);
  EXPECT_EQ(spec.name, "activate_skill");
  EXPECT_EQ(spec.parameters["properties"]["name"]["enum"], kernex::Json::array({"alpha", "zeta"}));
  EXPECT_EQ(spec.parameters["required"], kernex::Json::array({"name"}));
}

TEST(Activation, ActivatedSkillsEnrichTheContextInNameOrder) {
  Skill b = skill("beta", "deploy", {server("srv-b")}, {toolbox("tb-b")});
  Skill a = skill("alpha", "", {server("srv-a")}, {toolbox("tb-a")});
  a.model = "model-a";
  b.model = "model-b";
  SkillActivator activator({b, a, skill("gamma", "")});

  EXPECT_THAT(activator.activate_triggered("please deploy"), ElementsAre("beta"));
  auto again = activator.activate("alpha");
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(*again);
  EXPECT_FALSE(*activator.activate("alpha"));
  auto unknown = activator.activate("nope");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, kernex::ErrorCode::Skill);
  EXPECT_THAT(unknown.error().message, HasSubstr("expected one of: alpha, beta, gamma"));

  kernex::Context ctx("hello");
  ctx.system_prompt = "Base.";
  ctx.toolboxes.push_back(toolbox("tb-b"));  // already present: not duplicated
  activator.apply(ctx);
  EXPECT_EQ(ctx.system_prompt.rfind("Base.\n\n", 0), 0u);
  auto pa = ctx.system_prompt.find("Use alpha well.");
  auto pb = ctx.system_prompt.find("Use beta well.");
  ASSERT_NE(pa, std::string::npos);
  ASSERT_NE(pb, std::string::npos);
  EXPECT_LT(pa, pb);
  EXPECT_THAT(ctx.system_prompt, Not(HasSubstr("Use gamma well.")));
  EXPECT_THAT(toolbox_names(ctx.toolboxes), ElementsAre("tb-b", "tb-a"));
  EXPECT_THAT(server_names(ctx.mcp_servers), ElementsAre("srv-a", "srv-b"));
  EXPECT_EQ(ctx.model, "model-a");

  // Activation order does not change the result: the prompt prefix stays cache-stable.
  SkillActivator other({a, b, skill("gamma", "")});
  ASSERT_TRUE(other.activate("alpha").has_value());
  ASSERT_TRUE(other.activate("beta").has_value());
  kernex::Context ctx2("hello");
  ctx2.system_prompt = "Base.";
  ctx2.toolboxes.push_back(toolbox("tb-b"));
  other.apply(ctx2);
  EXPECT_EQ(ctx2.system_prompt, ctx.system_prompt);

  kernex::Context explicit_model("x");
  explicit_model.model = "chosen";
  activator.apply(explicit_model);
  EXPECT_EQ(explicit_model.model, "chosen");
}

TEST(Activation, ActivateSkillToolCall) {
  SkillActivator activator({skill("pdf", "", {}, {toolbox("pdf_extract")})});
  kernex::ToolCall call{"call-1", "activate_skill", {{"name", "pdf"}}};
  auto r = activator.handle_tool_call(call);
  EXPECT_FALSE(r.is_error);
  EXPECT_EQ(r.call_id, "call-1");
  EXPECT_THAT(r.content, HasSubstr("<skill_content name=\"pdf\">"));
  EXPECT_THAT(r.content, HasSubstr("Use pdf well."));
  EXPECT_THAT(r.content, HasSubstr("pdf_extract"));
  EXPECT_EQ(activator.active().size(), 1u);

  auto bad = activator.handle_tool_call({"call-2", "activate_skill", {{"skill", "pdf"}}});
  EXPECT_TRUE(bad.is_error);
  auto missing = activator.handle_tool_call({"call-3", "activate_skill", {{"name", "nope"}}});
  EXPECT_TRUE(missing.is_error);
  EXPECT_THAT(missing.content, HasSubstr("unknown skill 'nope'"));
  auto not_object = activator.handle_tool_call({"call-4", "activate_skill", kernex::Json::array()});
  EXPECT_TRUE(not_object.is_error);
}

TEST(Activation, FixtureSkillActivationCarriesItsTools) {
  auto loaded = load_skills({kFixtures / "kernex", kFixtures / "agentskills"});
  const Skill* a11y = loaded.find("accessibility-auditor");
  ASSERT_NE(a11y, nullptr);
  Activation act = activate(*a11y);
  EXPECT_EQ(act.toolboxes.size(), 3u);
  EXPECT_THAT(activation_text(act), HasSubstr(a11y->instructions.substr(0, 40)));
  const Skill* mcp = loaded.find("mcp-builder");
  ASSERT_NE(mcp, nullptr);
  EXPECT_TRUE(activate(*mcp).toolboxes.empty());
}
