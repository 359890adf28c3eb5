// The `activate_skill` tool inside the agentic loop, through Kernel::run and the replay
// provider: the model activates skills, the instructions come back as the tool result, and the
// skills' toolboxes are offered (and callable) from the next model call on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "kernex/kernel.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/project.hpp"
#include "temp_dir.hpp"

using namespace kernex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// Offers one tool per toolbox of the running Context, as the script-toolbox plugin does, and
// answers "ran <name>" instead of spawning anything.
class ContextToolboxes final : public ToolExecutor {
 public:
  Result<std::vector<ToolSpec>> list_tools(const Context& context) override {
    ++listed;
    std::vector<ToolSpec> out;
    for (const auto& t : context.toolboxes) out.push_back(t.spec());
    return out;
  }
  Result<ToolResult> execute(const Context& context, const RunHandles&,
                             const ToolCall& call) override {
    for (const auto& t : context.toolboxes) {
      if (t.name == call.name) return ToolResult{call.id, call.name, "ran " + call.name, false};
    }
    return ToolResult{call.id, call.name, "no toolbox " + call.name + " in the context", true};
  }
  int listed = 0;
};

std::string skill_md(const std::string& name, const std::string& extra) {
  return "---\nname = \"" + name + "\"\ndescription = \"The " + name + " skill.\"\n" + extra +
         "[toolbox." + name + "_tool]\ndescription = \"" + name +
         " tool.\"\ncommand = \"echo\"\n---\n" + name + " instructions.\n";
}

Json call(const std::string& id, const std::string& name, Json args) {
  return Json{{"id", id}, {"name", name}, {"arguments", std::move(args)}};
}

std::vector<std::string> tool_names(const Json& request) {
  std::vector<std::string> out;
  for (const auto& t : request["tools"]) out.push_back(t["name"].get<std::string>());
  return out;
}

class SkillsLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    dir.write("skills/alpha/SKILL.md", skill_md("alpha", ""));
    dir.write("skills/beta/SKILL.md", skill_md("beta", "trigger = \"weather\"\n"));
    dir.write("skills/gamma/SKILL.md",
              skill_md("gamma", "[mcp.gamma_server]\ncommand = \"npx\"\n"));
  }

  // A kernel whose replay script is `lines`, recording every request, with the skills source
  // and the test executor.
  std::unique_ptr<Kernel> kernel(const std::vector<Json>& lines,
                                 std::vector<std::string> explicit_skills = {},
                                 std::shared_ptr<ContextSource> first_source = nullptr) {
    std::string script;
    for (const auto& l : lines) script += l.dump() + "\n";
    Config config;
    config.system_prompt = "BASE";
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                              {"record", (dir / "record.jsonl").string()}};
    config.toolboxes = std::vector<PluginRef>{};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    if (first_source) (*k)->add_context_source(first_source);
    auto loaded = skills::load_skills({dir / "skills"});
    EXPECT_TRUE(loaded.failures.empty());
    auto source =
        skills::SkillContextSource::create(std::move(loaded.skills), std::move(explicit_skills));
    EXPECT_TRUE(source) << source.error().describe();
    (*k)->add_context_source(*source);
    (*k)->add_toolbox(executor);
    return std::move(*k);
  }

  std::vector<Json> requests() const {
    std::vector<Json> out;
    std::ifstream in(dir / "record.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
    return out;
  }

  kernex::testing::TempDir dir;
  std::shared_ptr<ContextToolboxes> executor = std::make_shared<ContextToolboxes>();
};

TEST_F(SkillsLoop, ActivatedSkillsToolboxesAreOfferedOnTheNextCall) {
  auto k = kernel({
      Json{{"tool_calls",
            {call("c1", "activate_skill", {{"name", "gamma"}}),
             call("c2", "activate_skill", {{"name", "alpha"}})}}},
      Json{{"tool_calls", {call("c3", "gamma_tool", Json::object())}}},
      Json{{"text", "done"}},
  });
  auto run = k->run(Request::from_text("u", "what is the weather like?"));
  ASSERT_TRUE(run) << run.error().describe();
  EXPECT_EQ(run->text, "done");
  EXPECT_EQ(run->outcome, Outcome::EndTurn);
  ASSERT_EQ(run->tool_calls.size(), 3u);
  EXPECT_FALSE(run->tool_calls[0].result.is_error);
  EXPECT_THAT(run->tool_calls[0].result.content, HasSubstr("<skill_content name=\"gamma\">"));
  EXPECT_THAT(run->tool_calls[0].result.content, HasSubstr("gamma instructions."));
  EXPECT_THAT(run->tool_calls[0].result.content, HasSubstr("MCP server gamma_server"));
  EXPECT_EQ(run->tool_calls[2].result.content, "ran gamma_tool");
  EXPECT_FALSE(run->tool_calls[2].result.is_error);

  const auto reqs = requests();
  ASSERT_EQ(reqs.size(), 3u);
  // Turn 1: the triggered skill (beta) is active; its toolbox, then activate_skill.
  EXPECT_THAT(tool_names(reqs[0]), ElementsAre("beta_tool", "activate_skill"));
  EXPECT_THAT(reqs[0]["system"].get<std::string>(), HasSubstr("<available_skills>"));
  EXPECT_THAT(reqs[0]["system"].get<std::string>(), HasSubstr("beta instructions."));
  EXPECT_THAT(reqs[0]["system"].get<std::string>(), Not(HasSubstr("gamma instructions.")));
  // Turn 2: what the model activated joins after what was there, in the order it activated it;
  // the system prompt is unchanged, so a prompt cache keyed on it stays warm.
  EXPECT_THAT(tool_names(reqs[1]),
              ElementsAre("beta_tool", "gamma_tool", "alpha_tool", "activate_skill"));
  EXPECT_EQ(reqs[1]["system"], reqs[0]["system"]);
  const Json& messages = reqs[1]["messages"];
  ASSERT_EQ(messages.size(), 4u);  // user, assistant tool calls, two tool results
  EXPECT_EQ(messages[2]["tool_result"]["name"], "activate_skill");
  EXPECT_THAT(messages[2]["tool_result"]["content"].get<std::string>(),
              HasSubstr("gamma instructions."));
  EXPECT_THAT(messages[3]["tool_result"]["content"].get<std::string>(),
              HasSubstr("alpha instructions."));
  // Nothing changed the toolboxes in turn 2, so turn 3 offers the same tools.
  EXPECT_EQ(tool_names(reqs[2]), tool_names(reqs[1]));
  EXPECT_EQ(executor->listed, 2);  // once at the start, once after the activations

  // The next run starts from the message again: activations do not leak between runs.
  std::filesystem::remove(dir / "record.jsonl");
  auto again = kernel({Json{{"text", "hi"}}});
  ASSERT_TRUE(again->run(Request::from_text("u", "hello")));
  EXPECT_THAT(tool_names(requests().at(0)), ElementsAre("activate_skill"));
}

TEST_F(SkillsLoop, SameScriptGivesTheSameRequests) {
  const std::vector<Json> script = {
      Json{{"tool_calls",
            {call("c1", "activate_skill", {{"name", "gamma"}}),
             call("c2", "activate_skill", {{"name", "alpha"}})}}},
      Json{{"text", "done"}},
  };
  ASSERT_TRUE(kernel(script)->run(Request::from_text("u", "weather?")));
  const auto first = requests();
  std::filesystem::remove(dir / "record.jsonl");
  ASSERT_TRUE(kernel(script)->run(Request::from_text("u", "weather?")));
  EXPECT_EQ(requests(), first);
}

TEST_F(SkillsLoop, BadActivationsAreErrorResultsAndRepeatsChangeNothing) {
  auto k = kernel({
      Json{{"tool_calls",
            {call("c1", "activate_skill", {{"name", "nope"}}),
             call("c2", "activate_skill", {{"skill", "alpha"}}),
             call("c3", "activate_skill", {{"name", "beta"}})}}},
      Json{{"text", "ok"}},
  });
  auto run = k->run(Request::from_text("u", "weather"));
  ASSERT_TRUE(run) << run.error().describe();
  ASSERT_EQ(run->tool_calls.size(), 3u);
  EXPECT_TRUE(run->tool_calls[0].result.is_error);
  EXPECT_THAT(run->tool_calls[0].result.content,
              HasSubstr("unknown skill 'nope'; expected one of: alpha, beta, gamma"));
  EXPECT_TRUE(run->tool_calls[1].result.is_error);
  EXPECT_THAT(run->tool_calls[1].result.content, HasSubstr("{\"name\": \"<skill name>\"}"));
  EXPECT_FALSE(run->tool_calls[2].result.is_error);  // beta was triggered already
  EXPECT_THAT(run->tool_calls[2].result.content, HasSubstr("already active"));
  const auto reqs = requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(tool_names(reqs[1]), tool_names(reqs[0]));
  EXPECT_EQ(executor->listed, 1);
}

TEST_F(SkillsLoop, ExplicitSkillsAreActiveFromTheStartInNameOrder) {
  auto k = kernel({Json{{"text", "ok"}}}, {"gamma", "alpha"});
  ASSERT_TRUE(k->run(Request::from_text("u", "hello")));
  const Json req = requests().at(0);
  EXPECT_THAT(tool_names(req), ElementsAre("alpha_tool", "gamma_tool", "activate_skill"));
  const std::string system = req["system"];
  EXPECT_EQ(system.rfind("BASE\n\n", 0), 0u);
  EXPECT_LT(system.find("alpha instructions."), system.find("gamma instructions."));
}

TEST_F(SkillsLoop, AllowedToolsCanWithholdActivateSkill) {
  auto k = kernel({Json{{"tool_calls", {call("c1", "activate_skill", {{"name", "alpha"}})}}},
                   Json{{"text", "ok"}}});
  RunOptions options;
  options.allowed_tools = std::vector<std::string>{"beta_tool"};
  auto run = k->run(Request::from_text("u", "weather"), options);
  ASSERT_TRUE(run);
  EXPECT_THAT(tool_names(requests().at(0)), ElementsAre("beta_tool"));
  EXPECT_TRUE(run->tool_calls.at(0).result.is_error);
  EXPECT_THAT(run->tool_calls.at(0).result.content, HasSubstr("Unknown tool: activate_skill"));
}

TEST_F(SkillsLoop, ProjectInstructionsPrecedeTheSkills) {
  dir.write("proj/AGENTS.md", "---\nskills = [\"alpha\"]\n---\nYou are the project's assistant.\n");
  auto project = skills::load_project(dir / "proj");
  ASSERT_TRUE(project) << project.error().describe();
  // `kernex run --project` adds the project's source first and activates its skills by name.
  auto k = kernel({Json{{"text", "ok"}}}, project->skills,
                  std::make_shared<skills::ProjectContextSource>(*project));
  ASSERT_TRUE(k->run(Request::from_text("u", "hello")));
  const Json req = requests().at(0);
  EXPECT_THAT(tool_names(req), ElementsAre("alpha_tool", "activate_skill"));
  const std::string system = req["system"];
  EXPECT_EQ(system.rfind("BASE\n\nYou are the project's assistant.\n\n", 0), 0u) << system;
  EXPECT_LT(system.find("<available_skills>"), system.find("alpha instructions."));
}

}  // namespace
