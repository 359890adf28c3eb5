// Loading skills: both fixture corpora, broken skills, kernex extension fields in YAML,
// mcp.json/toolbox.json merging and the load-time permission checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "kernex/skills/checks.hpp"
#include "kernex/skills/loader.hpp"

namespace fs = std::filesystem;
using namespace kernex::skills;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

const fs::path kFixtures = fs::path(KERNEX_SOURCE_DIR "/../shared/fixtures/skills");

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kernex-skills-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& rel, const std::string& content) const {
    fs::path p = path_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  fs::path path_;
};

const Skill& by_name(const LoadedSkills& loaded, const std::string& name) {
  const Skill* s = loaded.find(name);
  if (s == nullptr) throw std::runtime_error("skill not loaded: " + name);
  return *s;
}

const SkillFailure* failure_for(const LoadedSkills& loaded, const std::string& folder) {
  for (const auto& f : loaded.failures) {
    if (f.path.filename() == folder) return &f;
  }
  return nullptr;
}

std::vector<std::string> names(const LoadedSkills& loaded) {
  std::vector<std::string> out;
  for (const auto& s : loaded.skills) out.push_back(s.name);
  return out;
}

}  // namespace

TEST(SkillsFixtures, EveryAgentSkillLoads) {
  auto loaded = load_skills({kFixtures / "agentskills"});
  EXPECT_TRUE(loaded.failures.empty())
      << (loaded.failures.empty() ? "" : loaded.failures[0].describe());
  ASSERT_EQ(loaded.skills.size(), 7u);
  for (const auto& s : loaded.skills) {
    EXPECT_EQ(s.name, s.path.filename().string());
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_FALSE(s.instructions.empty()) << s.name;
    EXPECT_EQ(s.format, SourceFormat::Yaml) << s.name;
    EXPECT_EQ(s.license, "Complete terms in LICENSE.txt") << s.name;
    EXPECT_NE(s.instructions.substr(0, 3), "---") << s.name;
    EXPECT_TRUE(s.warnings.empty()) << s.name << ": " << s.warnings[0].describe();
  }
  EXPECT_TRUE(std::is_sorted(loaded.skills.begin(), loaded.skills.end(),
                             [](const Skill& a, const Skill& b) { return a.name < b.name; }));
  EXPECT_EQ(by_name(loaded, "webapp-testing").instructions.substr(0, 25),
            "# Web Application Testing");
}

TEST(SkillsFixtures, KernexCorpusLoadsWithToolboxesAndMcpServers) {
  auto loaded = load_skills({kFixtures / "kernex"});
  EXPECT_TRUE(loaded.failures.empty())
      << (loaded.failures.empty() ? "" : loaded.failures[0].describe());

  // backend-architect's db_query runs psql, which its permissions.commands does not list: that
  // toolbox is refused with the reason and never runs; the rest of the skill loads (kernex).
  const Skill& backend = by_name(loaded, "backend-architect");
  ASSERT_EQ(backend.refused.size(), 1u);
  const auto& r = backend.refused[0];
  EXPECT_EQ(r.field, "toolbox.db_query.command");
  EXPECT_GT(r.line, 1);
  EXPECT_THAT(r.message, HasSubstr("\"psql\""));
  EXPECT_THAT(r.message, HasSubstr("permissions.commands"));
  EXPECT_THAT(r.describe(), HasSubstr("backend-architect/SKILL.md:"));
  EXPECT_TRUE(backend.toolboxes.empty());  // db_query was its only toolbox
  EXPECT_FALSE(backend.instructions.empty());
  for (const auto& s : loaded.skills) {
    if (s.name != "backend-architect") {
      EXPECT_TRUE(s.refused.empty()) << s.name << ": " << s.refused[0].describe();
    }
  }

  ASSERT_EQ(loaded.skills.size(), 16u);
  for (const auto& s : loaded.skills) {
    EXPECT_EQ(s.format, SourceFormat::Toml) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_FALSE(s.instructions.empty()) << s.name;
    EXPECT_FALSE(s.triggers.empty()) << s.name;
    EXPECT_TRUE(s.warnings.empty()) << s.name << ": " << s.warnings[0].describe();
  }

  const Skill& pw = by_name(loaded, "playwright");
  EXPECT_THAT(pw.requirements, ElementsAre("npx"));
  EXPECT_EQ(pw.homepage, "https://github.com/microsoft/playwright-mcp");
  EXPECT_THAT(pw.triggers, ElementsAre("browse", "website", "click", "scrape", "web page",
                                       "navigate", "screenshot"));
  ASSERT_EQ(pw.mcp_servers.size(), 1u);
  EXPECT_EQ(pw.mcp_servers[0].name, "playwright");
  EXPECT_EQ(pw.mcp_servers[0].command, "npx");
  EXPECT_THAT(pw.mcp_servers[0].args, ElementsAre("@playwright/mcp@latest", "--headless"));
  EXPECT_TRUE(pw.toolboxes.empty());

  const Skill& a11y = by_name(loaded, "accessibility-auditor");
  EXPECT_EQ(a11y.version, "0.1.0");
  ASSERT_EQ(a11y.toolboxes.size(), 3u);
  EXPECT_EQ(a11y.toolboxes[0].name, "axe_audit");
  EXPECT_EQ(a11y.toolboxes[1].name, "contrast_check");
  EXPECT_EQ(a11y.toolboxes[2].name, "lighthouse_a11y");
  const auto& axe = a11y.toolboxes[0];
  EXPECT_EQ(axe.description, "Run axe-core accessibility audit against a URL.");
  EXPECT_EQ(axe.command, "npx");
  EXPECT_THAT(axe.args, ElementsAre("-y", "@axe-core/cli"));
  EXPECT_EQ(axe.parameters["type"], "object");
  EXPECT_EQ(axe.parameters["required"], kernex::Json::array({"url"}));
  EXPECT_EQ(axe.parameters["properties"]["url"]["type"], "string");
  EXPECT_THAT(axe.allowed_commands, ElementsAre("npm", "npx", "node"));
  EXPECT_TRUE(axe.network);  // derived from permissions.network = ["localhost"]
  EXPECT_EQ(a11y.permissions.files.front(), "read:src/**");
  EXPECT_THAT(a11y.permissions.network, ElementsAre("localhost"));

  const Skill& ai = by_name(loaded, "ai-engineer");
  ASSERT_EQ(ai.toolboxes.size(), 2u);
  EXPECT_THAT(ai.toolboxes[0].env_passthrough,
              ElementsAre("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN"));

  // Arguments reach execve directly, so a newline in one is not a shell hazard.
  const Skill& api = by_name(loaded, "api-tester");
  const auto& req = *std::find_if(api.toolboxes.begin(), api.toolboxes.end(),
                                  [](const kernex::Toolbox& t) { return t.name == "api_request"; });
  EXPECT_THAT(req.args.at(2), HasSubstr("\n---HTTP_STATUS:%{http_code}---\n"));

  const Skill& hook = by_name(loaded, "webhook");
  ASSERT_EQ(hook.toolboxes.size(), 2u);
  EXPECT_EQ(hook.toolboxes[0].name, "webhook_get");
  EXPECT_FALSE(hook.toolboxes[0].network);
  EXPECT_TRUE(hook.toolboxes[0].allowed_commands.empty());
  EXPECT_THAT(hook.toolboxes[1].args,
              ElementsAre("-s", "-X", "POST", "-H", "Content-Type: application/json"));

  const Skill& tmpl = by_name(loaded, "my-skill");  // _template
  EXPECT_EQ(tmpl.mcp_servers.at(0).name, "my-server");
}

TEST(SkillsFixtures, BothCorporaTogetherHaveUniqueSortedNames) {
  auto loaded = load_skills({kFixtures / "agentskills", kFixtures / "kernex"});
  EXPECT_EQ(loaded.skills.size(), 23u);
  auto n = names(loaded);
  EXPECT_TRUE(std::is_sorted(n.begin(), n.end()));
  EXPECT_EQ(std::adjacent_find(n.begin(), n.end()), n.end());
  EXPECT_TRUE(loaded.failures.empty());
}

TEST(SkillsFixtures, OneSkillFolderIsAcceptedAsADir) {
  auto loaded = load_skills({kFixtures / "kernex" / "git"});
  ASSERT_EQ(loaded.skills.size(), 1u);
  EXPECT_EQ(loaded.skills[0].name, "git");
  EXPECT_THAT(loaded.skills[0].requirements, ElementsAre("npx", "git"));
}

TEST(SkillsLoading, BrokenSkillsFailWithFileLineAndFieldWhileOthersLoad) {
  TempDir dir;
  dir.write("good/SKILL.md", "---\nname: good\ndescription: Works.\n---\nDo good things.\n");
  dir.write("bad-yaml/SKILL.md", "---\nname: bad-yaml\ndescription: [unclosed\n---\nbody\n");
  dir.write("no-name/SKILL.md", "---\ndescription: Lacks a name.\n---\nbody\n");
  dir.write("bad-toml/SKILL.md",
            "---\nname = \"bad-toml\"\ndescription = \"x\"\ntrigger = [1, \n---\nbody\n");
  dir.write("wrong-type/SKILL.md",
            "---\nname = \"wrong-type\"\ndescription = \"x\"\n\n[toolbox.t]\ndescription = "
            "\"T.\"\ncommand = [\"bash\"]\n---\n");
  dir.write("unclosed/SKILL.md", "---\nname: unclosed\ndescription: never closed\n");
  dir.write("no-frontmatter/SKILL.md", "# Just markdown\n");
  dir.write("not-a-skill/README.md", "ignored: no SKILL.md\n");

  auto loaded = load_skills({dir.path()});
  EXPECT_THAT(names(loaded), ElementsAre("good"));
  ASSERT_EQ(loaded.failures.size(), 6u);

  const auto* yaml = failure_for(loaded, "bad-yaml");
  ASSERT_NE(yaml, nullptr);
  EXPECT_EQ(yaml->problems[0].file, dir.path() / "bad-yaml" / "SKILL.md");
  EXPECT_GE(yaml->problems[0].line, 3);
  EXPECT_THAT(yaml->problems[0].message, HasSubstr("invalid YAML frontmatter"));

  const auto* no_name = failure_for(loaded, "no-name");
  ASSERT_NE(no_name, nullptr);
  EXPECT_EQ(no_name->problems[0].field, "name");
  EXPECT_EQ(no_name->problems[0].line, 2);
  EXPECT_THAT(no_name->problems[0].message, HasSubstr("missing required field"));
  EXPECT_THAT(no_name->describe(), HasSubstr("no-name/SKILL.md:2: name: missing required field"));

  const auto* toml = failure_for(loaded, "bad-toml");
  ASSERT_NE(toml, nullptr);
  EXPECT_THAT(toml->problems[0].message, HasSubstr("invalid TOML frontmatter"));
  EXPECT_GE(toml->problems[0].line, 4);

  const auto* wrong = failure_for(loaded, "wrong-type");
  ASSERT_NE(wrong, nullptr);
  EXPECT_EQ(wrong->problems[0].field, "toolbox.t.command");
  EXPECT_EQ(wrong->problems[0].line, 7);
  EXPECT_THAT(wrong->problems[0].message,
              HasSubstr("expected a string, got a list (the program to run)"));

  const auto* unclosed = failure_for(loaded, "unclosed");
  ASSERT_NE(unclosed, nullptr);
  EXPECT_THAT(unclosed->problems[0].message, HasSubstr("never closed"));
  const auto* plain = failure_for(loaded, "no-frontmatter");
  ASSERT_NE(plain, nullptr);
  EXPECT_THAT(plain->problems[0].message, HasSubstr("'---'"));
  EXPECT_EQ(plain->error().code, kernex::ErrorCode::Skill);
}

TEST(SkillsLoading, BomAndCrlfLoad) {
  TempDir dir;
  dir.write("crlf/SKILL.md",
            "\xEF\xBB\xBF---\r\nname: crlf\r\ndescription: Windows file.\r\n---\r\n\r\nLine "
            "one.\r\nLine two.\r\n");
  dir.write("toml-crlf/SKILL.md",
            "\xEF\xBB\xBF---\r\nname = \"toml-crlf\"\r\ndescription = \"T\"\r\n---\r\nBody.\r\n");
  auto loaded = load_skills({dir.path()});
  ASSERT_TRUE(loaded.failures.empty()) << loaded.failures[0].describe();
  EXPECT_EQ(by_name(loaded, "crlf").instructions, "Line one.\nLine two.");
  EXPECT_EQ(by_name(loaded, "crlf").description, "Windows file.");
  EXPECT_EQ(by_name(loaded, "toml-crlf").format, SourceFormat::Toml);
}

TEST(SkillsLoading, InvalidUtf8AndOversizeAreErrors) {
  TempDir dir;
  dir.write("latin1/SKILL.md", "---\nname: latin1\ndescription: caf\xE9\n---\n");
  dir.write("huge/SKILL.md",
            "---\nname: huge\ndescription: big\n---\n" + std::string(kMaxSkillFileBytes, 'x'));
  auto loaded = load_skills({dir.path()});
  EXPECT_TRUE(loaded.skills.empty());
  ASSERT_EQ(loaded.failures.size(), 2u);
  EXPECT_THAT(failure_for(loaded, "latin1")->problems[0].message, HasSubstr("UTF-8"));
  EXPECT_EQ(failure_for(loaded, "latin1")->problems[0].line, 3);
  EXPECT_THAT(failure_for(loaded, "huge")->problems[0].message, HasSubstr("256 KiB"));
}

TEST(SkillsLoading, MissingDirAndDuplicateNamesAreFailures) {
  TempDir a, b;
  a.write("one/SKILL.md", "---\nname: same\ndescription: First.\n---\n");
  b.write("two/SKILL.md", "---\nname: same\ndescription: Second.\n---\n");
  auto loaded = load_skills({a.path(), b.path(), a.path() / "nope"});
  ASSERT_EQ(loaded.skills.size(), 1u);
  EXPECT_EQ(loaded.skills[0].description, "First.");
  ASSERT_EQ(loaded.failures.size(), 2u);
  EXPECT_THAT(failure_for(loaded, "two")->describe(), HasSubstr("duplicate skill name 'same'"));
  EXPECT_THAT(failure_for(loaded, "nope")->describe(), HasSubstr("does not exist"));
}

TEST(SkillsLoading, YamlCarriesKernexExtensionFields) {
  TempDir dir;
  dir.write("ext/SKILL.md", R"(---
name: ext
description: YAML with kernex fields.
license: MIT
compatibility: Needs git
allowed-tools: Bash(git:*) Read
metadata:
  author: someone
trigger: lint|check
requires: [sh]
model: claude-haiku-4-5
lazy: yes
permissions:
  commands: [bash, npx]
  env: [GITHUB_TOKEN]
  network: [api.github.com]
  files: ["read:~/.config/app", "write:out/**", "!~/.ssh"]
toolbox:
  lint:
    description: Lint a file.
    command: bash
    args: [scripts/lint.sh]
    parameters:
      type: object
      properties:
        file: {type: string}
      required: [file]
mcp:
  github:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-github"]
mcp-fetch: npx -y @modelcontextprotocol/server-fetch
---
Instructions here.
)");
  auto loaded = load_skills({dir.path()});
  ASSERT_TRUE(loaded.failures.empty()) << loaded.failures[0].describe();
  const Skill& s = loaded.skills.at(0);
  EXPECT_EQ(s.format, SourceFormat::Yaml);
  EXPECT_EQ(s.license, "MIT");
  EXPECT_EQ(s.compatibility, "Needs git");
  EXPECT_THAT(s.allowed_tools, ElementsAre("Bash(git:*)", "Read"));
  EXPECT_EQ(s.metadata["author"], "someone");
  EXPECT_THAT(s.triggers, ElementsAre("lint", "check"));
  EXPECT_THAT(s.requirements, ElementsAre("sh"));
  EXPECT_TRUE(s.available);
  EXPECT_EQ(s.model, "claude-haiku-4-5");
  EXPECT_TRUE(s.lazy);
  EXPECT_THAT(s.permissions.read_paths(), ElementsAre("~/.config/app"));
  EXPECT_THAT(s.permissions.write_paths(), ElementsAre("out/**"));
  EXPECT_THAT(s.permissions.denied_paths(), ElementsAre("~/.ssh"));
  ASSERT_EQ(s.toolboxes.size(), 1u);
  EXPECT_EQ(s.toolboxes[0].parameters["required"], kernex::Json::array({"file"}));
  EXPECT_THAT(s.toolboxes[0].env_passthrough, ElementsAre("GITHUB_TOKEN"));
  EXPECT_THAT(s.toolboxes[0].allowed_commands, ElementsAre("bash", "npx"));
  EXPECT_TRUE(s.toolboxes[0].network);
  ASSERT_EQ(s.mcp_servers.size(), 2u);
  EXPECT_EQ(s.mcp_servers[0].name, "fetch");
  EXPECT_THAT(s.mcp_servers[0].args, ElementsAre("-y", "@modelcontextprotocol/server-fetch"));
  EXPECT_EQ(s.mcp_servers[1].name, "github");
  EXPECT_EQ(s.instructions, "Instructions here.");
  EXPECT_TRUE(s.warnings.empty()) << s.warnings[0].describe();

  auto json = to_json(s);
  EXPECT_EQ(json["name"], "ext");
  EXPECT_EQ(json["format"], "yaml");
  EXPECT_EQ(json["toolboxes"][0]["command"], "bash");
  EXPECT_EQ(json["mcp_servers"][1]["args"][0], "-y");
}

TEST(SkillsLoading, UnknownFieldsAreWarningsAndMetadataBinsFillRequires) {
  TempDir dir;
  dir.write("w/SKILL.md",
            "---\nname: w\ndescription: d\ntrigers: typo\nmetadata: "
            "{\"openclaw\":{\"requires\":{\"bins\":[\"git\",\"curl\"]}}}\n---\n");
  auto loaded = load_skills({dir.path()});
  ASSERT_EQ(loaded.skills.size(), 1u);
  const Skill& s = loaded.skills[0];
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_EQ(s.warnings[0].field, "trigers");
  EXPECT_EQ(s.warnings[0].line, 4);
  EXPECT_THAT(s.requirements, ElementsAre("git", "curl"));
}

// Manifest fields go through the typed config reader (kernex/config_fields.hpp): an unknown key
// names the known ones and the nearest; a wrong type says what was expected, what was found and
// what the field is for, at the file, line and key path; nothing hostile crashes the reader.
TEST(SkillsLoading, ManifestFieldsAreReadThroughTheFieldTables) {
  auto typo = parse_skill("---\nname: w\ndescription: d\ndescripton: x\n---\n", "w/SKILL.md", "w");
  ASSERT_TRUE(typo) << typo.error().describe();
  ASSERT_EQ(typo->warnings.size(), 1u);
  EXPECT_EQ(typo->warnings[0].line, 4);
  EXPECT_THAT(typo->warnings[0].describe(),
              HasSubstr("w/SKILL.md:4: warning: descripton: ignored: unknown key (expected one of: "
                        "name, "
                        "description,"));
  EXPECT_THAT(typo->warnings[0].message, HasSubstr("did you mean `description`?"));

  auto lazy = parse_skill("---\nname: w\ndescription: d\nlazy: maybe\n---\n", "w/SKILL.md", "w");
  ASSERT_FALSE(lazy);
  EXPECT_THAT(lazy.error().describe(),
              HasSubstr("w/SKILL.md:4: lazy: expected true or false, got \"maybe\""));
  auto yes = parse_skill("---\nname: w\ndescription: d\nlazy: Yes\n---\n", "w/SKILL.md", "w");
  ASSERT_TRUE(yes) << yes.error().describe();
  EXPECT_TRUE(yes->lazy);

  // TOML numbers are not strings; a YAML number is its text.
  auto toml = parse_skill("+++\nname = 5\ndescription = \"d\"\n+++\n", "t/SKILL.md", "t");
  ASSERT_FALSE(toml);
  EXPECT_THAT(toml.error().describe(),
              HasSubstr("t/SKILL.md:2: name: expected a string, got 5 (the skill's name)"));
  auto yaml = parse_skill("---\nname: w\ndescription: d\nlicense: 2.0\n---\n", "w/SKILL.md", "w");
  ASSERT_TRUE(yaml) << yaml.error().describe();
  EXPECT_EQ(yaml->license, "2.0");

  auto empty = parse_skill("---\nname: w\ndescription:\n---\n", "w/SKILL.md", "w");
  ASSERT_FALSE(empty);
  EXPECT_THAT(empty.error().describe(), HasSubstr("description: expected a"));

  // A huge value is shown cut short, never whole.
  const std::string huge(100'000, 'x');
  auto big =
      parse_skill("---\nname: w\ndescription: d\nlazy: " + huge + "\n---\n", "w/SKILL.md", "w");
  ASSERT_FALSE(big);
  EXPECT_LT(big.error().describe().size(), 1000u);

  const std::string box_head =
      "---\nname: w\ndescription: d\ntoolbox:\n  t:\n    description: x\n    command: run\n"
      "    netwrok: true\n";
  auto bad_args = parse_skill(box_head + "    args: [a, [b]]\n---\n", "w/SKILL.md", "w");
  ASSERT_FALSE(bad_args);
  EXPECT_THAT(bad_args.error().describe(),
              HasSubstr("w/SKILL.md:9: toolbox.t.args[1]: expected a string, got a list (program "
                        "arguments)"));
  auto box = parse_skill(box_head + "---\n", "w/SKILL.md", "w");
  ASSERT_TRUE(box) << box.error().describe();
  ASSERT_EQ(box->warnings.size(), 1u);
  EXPECT_EQ(box->warnings[0].field, "toolbox.t.netwrok");
  EXPECT_EQ(box->warnings[0].line, 8);
  EXPECT_THAT(box->warnings[0].message, HasSubstr("did you mean `network`?"));
}

TEST(SkillsLoading, SideFilesMergeAndOverride) {
  TempDir dir;
  dir.write("m/SKILL.md", R"(---
name = "m"
description = "Merging."

[permissions]
commands = ["echo", "npx"]

[mcp.a]
command = "npx"
args = ["@old/mcp"]

[toolbox.good]
description = "Fine."
command = "echo"

[toolbox.over]
description = "Old."
command = "echo"
args = ["old"]
---
)");
  dir.write("m/mcp.json", R"({"mcpServers": {"a": {"command": "npx", "args": ["@new/mcp"]},
                                             "b": {"command": "npx", "env": {"KEY": "val"}}}})");
  dir.write("m/toolbox.json",
            R"({"toolboxes": {"over": {"description": "New.", "command": "echo", "args": ["new"]},
                                               "extra": {"description": "E.", "command": "echo", "network": false}}})");
  auto loaded = load_skills({dir.path()});
  ASSERT_TRUE(loaded.failures.empty()) << loaded.failures[0].describe();
  const Skill& s = loaded.skills[0];
  ASSERT_EQ(s.mcp_servers.size(), 2u);
  EXPECT_THAT(s.mcp_servers[0].args, ElementsAre("@new/mcp"));
  EXPECT_EQ(s.mcp_servers[1].env.at("KEY"), "val");
  ASSERT_EQ(s.toolboxes.size(), 3u);
  EXPECT_EQ(s.toolboxes[0].name, "extra");
  EXPECT_EQ(s.toolboxes[1].name, "good");
  EXPECT_EQ(s.toolboxes[2].description, "New.");
  EXPECT_THAT(s.toolboxes[2].args, ElementsAre("new"));
}

// A number no double holds is a JSON error of the file too, not an exception that ends the kernel.
TEST(SkillsLoading, SideFileNumberOverflowIsAnError) {
  TempDir dir;
  dir.write("n/SKILL.md", "---\nname: n\ndescription: d\n---\n");
  dir.write("n/mcp.json", R"({"mcpServers": {"a": {"command": "npx", "args": [1e400]}}})");
  auto loaded = load_skills({dir.path()});
  const auto* n = failure_for(loaded, "n");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->problems[0].file, dir.path() / "n" / "mcp.json");
  EXPECT_THAT(n->problems[0].message, HasSubstr("expected valid JSON"));
}

TEST(SkillsLoading, SideFileErrorsNameTheFile) {
  TempDir dir;
  dir.write("j/SKILL.md", "---\nname: j\ndescription: d\n---\n");
  dir.write("j/mcp.json", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"npx\",}\n  }\n}\n");
  dir.write("k/SKILL.md", "---\nname: k\ndescription: d\npermissions:\n  commands: [echo]\n---\n");
  dir.write("k/toolbox.json",
            R"({"toolboxes": {"py": {"description": "P.", "command": "python3"}}})");
  auto loaded = load_skills({dir.path()});
  ASSERT_EQ(loaded.skills.size(), 1u);  // k loads without its refused toolbox
  const auto* j = failure_for(loaded, "j");
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->problems[0].file, dir.path() / "j" / "mcp.json");
  EXPECT_EQ(j->problems[0].line, 3);
  EXPECT_THAT(j->problems[0].message, HasSubstr("expected valid JSON"));
  const Skill& k = by_name(loaded, "k");
  EXPECT_TRUE(k.toolboxes.empty());
  ASSERT_EQ(k.refused.size(), 1u);
  EXPECT_EQ(k.refused[0].file, dir.path() / "k" / "toolbox.json");
  EXPECT_EQ(k.refused[0].field, "toolboxes.py.command");
  EXPECT_THAT(k.refused[0].message, HasSubstr("\"python3\""));
}

// kernex skills.rs: a refused toolbox.json override leaves the frontmatter entry of that name,
// and the json's other entries still load.
TEST(SkillsPermissions, RefusedOverrideKeepsTheFrontmatterEntry) {
  TempDir dir;
  dir.write("s/SKILL.md", R"(---
name = "s"
description = "d"
[permissions]
commands = ["echo"]
[toolbox.good]
description = "Fine."
command = "echo"
[mcp.m]
command = "/usr/bin/echo"
---
)");
  dir.write("s/toolbox.json",
            R"({"toolboxes": {"good": {"description": "Py.", "command": "python3"},
                                               "extra": {"description": "E.", "command": "echo"}}})");
  dir.write("s/mcp.json", R"({"mcpServers": {"m": {"command": "npx"}}})");
  auto loaded = load_skills({dir.path()});
  ASSERT_EQ(loaded.skills.size(), 1u);
  const Skill& s = loaded.skills[0];
  ASSERT_EQ(s.toolboxes.size(), 2u);
  EXPECT_EQ(s.toolboxes[0].name, "extra");
  EXPECT_EQ(s.toolboxes[1].description, "Fine.");
  ASSERT_EQ(s.mcp_servers.size(), 1u);
  EXPECT_EQ(s.mcp_servers[0].command, "/usr/bin/echo");
  ASSERT_EQ(s.refused.size(), 2u);
  EXPECT_EQ(s.refused[0].field, "mcpServers.m.command");
  EXPECT_EQ(s.refused[1].field, "toolboxes.good.command");
  EXPECT_EQ(to_json(s)["refused"].size(), 2u);
}

// Each unsafe toolbox or MCP server is refused with the reason and never reaches the Context;
// the skill itself still loads. A hijacking declaration of the skill itself refuses the skill.
TEST(SkillsPermissions, LoadTimeChecksRefuseTheEntryWithTheReason) {
  struct Case {
    std::string name;
    std::string frontmatter;
    std::string field;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"undeclared-command",
       "[permissions]\ncommands = [\"echo\"]\n[toolbox.t]\ndescription = \"T\"\ncommand = \"sh\"\n",
       "toolbox.t.command", "not in the skill's declared permissions.commands [echo]"},
      {"undeclared-passthrough",
       "[permissions]\nenv = [\"A_TOKEN\"]\n[toolbox.t]\ndescription = \"T\"\ncommand = "
       "\"sh\"\nenv_passthrough = [\"B_TOKEN\"]\n",
       "toolbox.t.env_passthrough", "B_TOKEN through, which is not declared in permissions.env"},
      {"undeclared-network",
       "[toolbox.t]\ndescription = \"T\"\ncommand = \"curl\"\nnetwork = true\n",
       "toolbox.t.network", "declares no permissions.network"},
      {"preload-override",
       "[toolbox.t]\ndescription = \"T\"\ncommand = \"sh\"\nenv = { LD_PRELOAD = \"/tmp/evil.so\" "
       "}\n",
       "toolbox.t.env.LD_PRELOAD", "hijack"},
      {"path-override",
       "[toolbox.t]\ndescription = \"T\"\ncommand = \"sh\"\nenv = { PATH = \"/tmp\" }\n",
       "toolbox.t.env.PATH", "hijack"},
      {"mcp-path-override",
       "[mcp.s]\ncommand = \"npx\"\nenv = { NODE_OPTIONS = \"--require /tmp/x.js\" }\n",
       "mcp.s.env.NODE_OPTIONS", "hijack"},
      {"unsafe-mcp", "[mcp.pwned]\ncommand = \"sh -c 'rm -rf /'\"\n", "mcp.pwned.command",
       "is not allowed"},
      {"mcp-not-declared", "[permissions]\ncommands = [\"node\"]\n[mcp.bad]\ncommand = \"npx\"\n",
       "mcp.bad.command", "not in the skill's declared permissions.commands"},
      {"relative-toolbox", "[toolbox.t]\ndescription = \"T\"\ncommand = \"bin/tool\"\n",
       "toolbox.t.command", "is not allowed"},
  };
  TempDir dir;
  for (const auto& c : cases) {
    dir.write(c.name + "/SKILL.md",
              "---\nname = \"" + c.name + "\"\ndescription = \"d\"\n" + c.frontmatter + "---\n");
  }
  dir.write("preload-passthrough/SKILL.md",
            "---\nname = \"preload-passthrough\"\ndescription = \"d\"\n[permissions]\nenv = "
            "[\"LD_PRELOAD\"]\n---\n");
  auto loaded = load_skills({dir.path()});
  ASSERT_EQ(loaded.failures.size(), 1u);
  EXPECT_EQ(loaded.failures[0].path.filename(), "preload-passthrough");
  EXPECT_EQ(loaded.failures[0].problems.at(0).field, "permissions.env");
  EXPECT_THAT(loaded.failures[0].problems.at(0).message, HasSubstr("hijack"));
  for (const auto& c : cases) {
    const Skill& s = by_name(loaded, c.name);
    EXPECT_TRUE(s.toolboxes.empty()) << c.name;
    EXPECT_TRUE(s.mcp_servers.empty()) << c.name;
    ASSERT_FALSE(s.refused.empty()) << c.name;
    EXPECT_EQ(s.refused[0].field, c.field) << c.name;
    EXPECT_THAT(s.refused[0].message, HasSubstr(c.says)) << c.name;
    EXPECT_GT(s.refused[0].line, 0) << c.name;
  }
}

TEST(SkillsPermissions, DeclaredUseLoads) {
  TempDir dir;
  dir.write("ok/SKILL.md", R"(---
name = "ok"
description = "d"
[permissions]
commands = ["sh", "/usr/local/bin/tool"]
env = ["GITHUB_TOKEN", "OTHER"]
network = ["api.github.com"]
[toolbox.a]
description = "A"
command = "/usr/bin/sh"
env_passthrough = ["OTHER"]
network = true
env = { GREETING = "hola", PORT = 8080 }
[toolbox.b]
description = "B"
command = "/usr/local/bin/tool"
---
)");
  auto loaded = load_skills({dir.path()});
  ASSERT_TRUE(loaded.failures.empty()) << loaded.failures[0].describe();
  const auto& a = loaded.skills[0].toolboxes[0];
  EXPECT_THAT(a.env_passthrough, ElementsAre("OTHER"));
  EXPECT_EQ(a.env.at("PORT"), "8080");
  EXPECT_TRUE(loaded.skills[0].toolboxes[1].network);
}

TEST(SkillsPermissions, McpServersCarryTheSkillsPermissions) {
  TempDir dir;
  dir.write("gh/SKILL.md", R"(---
name = "gh"
description = "d"
[permissions]
commands = ["npx", "git"]
env = ["GITHUB_TOKEN"]
network = ["api.github.com"]
[mcp.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
---
)");
  dir.write("quiet/SKILL.md",
            "---\nname: quiet\ndescription: d\npermissions: {commands: [node]}\n"
            "mcp: {local: {command: node, args: [server.js]}}\n---\n");
  auto loaded = load_skills({dir.path()});
  ASSERT_TRUE(loaded.failures.empty()) << loaded.failures[0].describe();
  ASSERT_EQ(loaded.skills.size(), 2u);
  const kernex::McpServer& gh = loaded.skills[0].mcp_servers.at(0);
  EXPECT_TRUE(gh.network);
  EXPECT_THAT(gh.env_passthrough, ElementsAre("GITHUB_TOKEN"));
  EXPECT_THAT(gh.allowed_commands, ElementsAre("npx", "git"));
  const kernex::McpServer& local = loaded.skills[1].mcp_servers.at(0);
  EXPECT_FALSE(local.network);
  EXPECT_TRUE(local.env_passthrough.empty());
  // They survive the JSON form (Context round trips, mcp serve).
  kernex::Json j = gh;
  EXPECT_EQ(j.get<kernex::McpServer>().env_passthrough, gh.env_passthrough);
  EXPECT_TRUE(j.get<kernex::McpServer>().network);
}

TEST(SkillsChecks, CommandAndEnvVectorsFromKernex) {
  for (const char* ok : {"npx", "uvx", "node", "/usr/bin/python3", "/opt/homebrew/bin/uv",
                         "/bin/sh", "/usr/bin/node"}) {
    EXPECT_TRUE(is_safe_mcp_command(ok)) << ok;
  }
  for (const char* bad : {"mcp-server-fetch",
                          "payload",
                          "my-tool",
                          "my_tool",
                          "@scope/tool",
                          "@playwright/mcp",
                          "bin/tool",
                          "/tmp/payload",
                          "/home/user/.cache/evil",
                          "/var/tmp/x",
                          "/etc/payload",
                          "../../tmp/payload",
                          "/usr/bin/../../tmp/x",
                          "rm; sudo poweroff",
                          "",
                          "cmd; rm -rf /",
                          "cmd | cat",
                          "cmd & bg",
                          "$(whoami)",
                          "cmd > /tmp/out",
                          "cmd < /etc/passwd",
                          "`whoami`",
                          "cmd (sub)",
                          "cmd)"}) {
    EXPECT_FALSE(is_safe_mcp_command(bad)) << bad;
  }
  EXPECT_TRUE(is_safe_command_token("my-tool"));
  EXPECT_TRUE(is_safe_command_token("bash"));
  EXPECT_FALSE(is_safe_command_token("bin/tool"));
  EXPECT_FALSE(is_safe_command_token("../tool"));

  Permissions any;
  EXPECT_TRUE(any.allows_command("/usr/bin/npx"));
  EXPECT_TRUE(any.allows_command("anything"));
  Permissions npx{{}, {}, {}, {"npx"}};
  EXPECT_TRUE(npx.allows_command("npx"));
  EXPECT_TRUE(npx.allows_command("/usr/bin/npx"));
  EXPECT_TRUE(npx.allows_command("/opt/node/bin/npx"));
  EXPECT_FALSE(npx.allows_command("rm"));
  EXPECT_FALSE(npx.allows_command("/tmp/payload"));
  Permissions exact{{}, {}, {}, {"/usr/local/bin/mcp-foo"}};
  EXPECT_TRUE(exact.allows_command("/usr/local/bin/mcp-foo"));
  EXPECT_FALSE(exact.allows_command("mcp-foo"));
  EXPECT_FALSE(exact.allows_command("/tmp/mcp-foo"));

  EXPECT_TRUE(is_valid_env_name("GITHUB_TOKEN"));
  EXPECT_TRUE(is_valid_env_name("_X"));
  EXPECT_FALSE(is_valid_env_name("1BAD"));
  EXPECT_FALSE(is_valid_env_name("BAD-KEY"));
  for (const char* hijack :
       {"LD_PRELOAD", "ld_library_path", "DYLD_INSERT_LIBRARIES", "PATH", "NODE_OPTIONS",
        "PYTHONPATH", "BASH_ENV", "GIT_SSH_COMMAND", "GLIBC_TUNABLES"}) {
    EXPECT_TRUE(is_hijacking_env_name(hijack)) << hijack;
  }
  for (const char* fine : {"GITHUB_TOKEN", "HOME", "LANG", "PATHNAME", "MY_LD_PRELOAD"}) {
    EXPECT_FALSE(is_hijacking_env_name(fine)) << fine;
  }
}

TEST(SkillsLoading, RequirementsDecideAvailability) {
  TempDir dir;
  dir.write("here/SKILL.md", "---\nname: here\ndescription: d\nrequires: [sh]\n---\n");
  dir.write("gone/SKILL.md",
            "---\nname: gone\ndescription: d\nrequires: [__nonexistent_tool_xyz_12345__]\n---\n");
  auto loaded = load_skills({dir.path()});
  EXPECT_TRUE(by_name(loaded, "here").available);
  EXPECT_FALSE(by_name(loaded, "gone").available);
  EXPECT_TRUE(program_on_path("sh"));
  EXPECT_FALSE(program_on_path("__nonexistent_tool_xyz_12345__"));
}

TEST(SkillsLoading, HostileYamlDoesNotCrash) {
  TempDir dir;
  std::string laughs = "---\nname: lol\ndescription: d\na: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'k'; ++c, ++prev) {
    laughs += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" +
              prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
              ", *" + prev + "]\n";
  }
  laughs += "---\n";
  dir.write("lol/SKILL.md", laughs);
  dir.write("deep/SKILL.md",
            "---\nname: deep\ndescription: d\nx: " + std::string(5000, '[') + "\n---\n");
  dir.write("dup/SKILL.md", "---\nname: dup\ndescription: d\nname: again\n---\n");
  auto loaded = load_skills({dir.path()});
  EXPECT_TRUE(loaded.skills.empty());
  EXPECT_EQ(loaded.failures.size(), 3u);
  EXPECT_THAT(failure_for(loaded, "dup")->problems[0].message, HasSubstr("Duplicate key 'name'"));
  EXPECT_EQ(failure_for(loaded, "dup")->problems[0].line, 4);
}

// Copies are bounded in bytes and counted when an anchor is defined too: one long aliased string,
// or anchors nested over a wide list, reach gigabytes without a single nested alias.
TEST(SkillsLoading, AliasAndAnchorCopiesAreBounded) {
  std::string wide =
      "---\nname: wide\ndescription: d\na: &a " + std::string(200 * 1024, 'x') + "\nb: [";
  for (int i = 0; i < 10000; ++i) wide += "*a, ";
  wide += "]\n---\n";
  auto refused = parse_skill(wide, "wide/SKILL.md", "wide");
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().problems[0].message, HasSubstr("aliases copy more than 4 MiB"));

  std::string nested = "---\nname: nested\ndescription: d\nx: ";
  for (int i = 0; i < 100; ++i) nested += "&a" + std::to_string(i) + " [";
  for (int i = 0; i < 60000; ++i) nested += "y, ";
  nested += std::string(100, ']') + "\n---\n";
  auto deep = parse_skill(nested, "nested/SKILL.md", "nested");
  ASSERT_FALSE(deep);
  EXPECT_THAT(deep.error().problems[0].message, HasSubstr("document too large"));

  // An anchor used a few times is ordinary YAML and still loads.
  auto fine =
      parse_skill("---\nname: fine\ndescription: d\nmetadata:\n  a: &v one\n  b: *v\n---\nBody\n",
                  "fine/SKILL.md", "fine");
  ASSERT_TRUE(fine) << fine.error().problems[0].message;
}

// toml++'s own checks fail on a table header opening with no key character: an error, not an
// abort (debug) or undefined behaviour (release).
TEST(SkillsLoading, TomlParserCheckFailuresAreErrors) {
  for (const char* header : {"[#toolbox.x]", "[[ ,]]", "[ \t!]"}) {
    auto toml =
        parse_skill(std::string("+++\nname = \"t\"\ndescription = \"d\"\n") + header + "\n+++\n",
                    "t/SKILL.md", "t");
    ASSERT_FALSE(toml) << header;
    EXPECT_THAT(toml.error().problems[0].message, HasSubstr("TOML")) << header;
  }
  // A non-ASCII character in a table header ran toml++'s whitespace test into "unreachable"
  // (UBSan reports it); it is an ordinary quoted key.
  auto quoted = parse_skill(
      "+++\nname = \"t\"\ndescription = \"d\"\n[mcp.\"café ☕\"]\ncommand = \"npx\"\n+++\n",
      "t/SKILL.md", "t");
  ASSERT_TRUE(quoted) << quoted.error().problems[0].message;
  EXPECT_THAT(to_json(*quoted).dump(), HasSubstr("café ☕"));
}
