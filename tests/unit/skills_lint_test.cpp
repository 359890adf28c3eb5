// Agent Skills conformance (lint_spec) against the reference validator's verdicts, StrictYAML
// corner cases, and the kernex lint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "kernex/skills/lint.hpp"

namespace fs = std::filesystem;
using namespace kernex::skills;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

const fs::path kFixtures = fs::path(KERNEX_SOURCE_DIR "/../shared/fixtures/skills");
const fs::path kCases = kFixtures / "spec-cases";

struct VerdictRow {
  std::string folder;
  bool valid = false;
  std::string message;
};

std::vector<VerdictRow> read_verdicts() {
  std::vector<VerdictRow> rows;
  std::ifstream in(kCases / "VERDICTS.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    VerdictRow row;
    std::string verdict;
    std::getline(fields, row.folder, '\t');
    std::getline(fields, verdict, '\t');
    std::getline(fields, row.message);
    row.valid = verdict == "valid";
    rows.push_back(row);
  }
  return rows;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kernex-lint-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path skill(const std::string& folder, const std::string& content,
                 const std::string& file = "SKILL.md") const {
    fs::create_directories(path_ / folder);
    std::ofstream(path_ / folder / file, std::ios::binary) << content;
    return path_ / folder;
  }

 private:
  fs::path path_;
};

}  // namespace

class SpecVerdicts : public ::testing::TestWithParam<VerdictRow> {};

TEST_P(SpecVerdicts, MatchesTheReferenceValidator) {
  const VerdictRow& row = GetParam();
  LintVerdict v = lint_spec(kCases / row.folder);
  EXPECT_EQ(v.valid, row.valid) << row.folder << ": " << v.message;
  if (row.valid) {
    EXPECT_EQ(v.message, "");
    EXPECT_TRUE(v.errors.empty());
  } else {
    // The TSV holds the first line of the message (multi-line YAML errors are cut there).
    EXPECT_THAT(v.message, StartsWith(row.message)) << row.folder;
    ASSERT_FALSE(v.errors.empty());
    EXPECT_EQ(v.errors.front(), v.message);
  }
}

INSTANTIATE_TEST_SUITE_P(SpecCases, SpecVerdicts, ::testing::ValuesIn(read_verdicts()),
                         [](const ::testing::TestParamInfo<VerdictRow>& info) {
                           std::string name;
                           for (char c : info.param.folder)
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(SpecVerdictsTable, CoversEveryCaseFolder) {
  auto rows = read_verdicts();
  EXPECT_EQ(rows.size(), 13u);
  std::size_t folders = 0;
  for (const auto& e : fs::directory_iterator(kCases)) folders += e.is_directory() ? 1 : 0;
  EXPECT_EQ(rows.size(), folders);
  EXPECT_EQ(skill_folders({kCases}).size(), folders);
}

TEST(SpecLint, AgentSkillsCorpusIsValidAndKernexCorpusIsNot) {
  for (const auto& folder : skill_folders({kFixtures / "agentskills"})) {
    auto v = lint_spec(folder);
    EXPECT_TRUE(v.valid) << folder << ": " << v.message;
  }
  for (const auto& folder : skill_folders({kFixtures / "kernex"})) {
    auto v = lint_spec(folder);
    EXPECT_FALSE(v.valid) << folder;
    EXPECT_THAT(v.message, HasSubstr("frontmatter")) << folder;
  }
}

TEST(SpecLint, StrictYamlRules) {
  TempDir dir;
  struct Case {
    std::string folder;
    std::string frontmatter;
    bool valid;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"flow-tools", "name: flow-tools\ndescription: d\nallowed-tools: [Read, Bash]\n", false,
       "Invalid YAML in frontmatter: While scanning"},
      {"flow-meta", "name: flow-meta\ndescription: d\nmetadata: {a: b}\n", false,
       "Invalid YAML in frontmatter: While scanning"},
      {"tagged", "name: tagged\ndescription: !!str d\n", false,
       "Invalid YAML in frontmatter: While scanning"},
      {"anchored", "name: anchored\ndescription: &x d\n", false,
       "Invalid YAML in frontmatter: While scanning"},
      {"dup", "name: dup\ndescription: d\nname: dup\n", false,
       "Invalid YAML in frontmatter: While parsing"},
      {"block-tools", "name: block-tools\ndescription: d\nallowed-tools:\n  - Read\n  - Bash\n",
       true, ""},
      {"null-desc", "name: null-desc\ndescription: null\n", true,
       ""},  // StrictYAML: the string "null"
      {"empty-desc", "name: empty-desc\ndescription:\n", false,
       "Field 'description' must be a non-empty string"},
      {"numbers", "name: numbers\ndescription: 42\ncompatibility: 1.5\n", true, ""},
      {"tools-map", "name: tools-map\ndescription: d\nallowed-tools:\n  a: b\n", false,
       "Field 'allowed-tools' must be either a string or a list of strings"},
      {"tools-nested", "name: tools-nested\ndescription: d\nallowed-tools:\n  - a\n  - - b\n",
       false, "Field 'allowed-tools' list items must all be strings"},
      {"compat-list", "name: compat-list\ndescription: d\ncompatibility:\n  - x\n", false,
       "Field 'compatibility' must be a string"},
      {"scalar-doc", "just text\n", false, "SKILL.md frontmatter must be a YAML mapping"},
      {"empty-doc", "\n", false, "SKILL.md frontmatter must be a YAML mapping"},
      {"-lead", "name: -lead\ndescription: d\n", false,
       "Skill name cannot start or end with a hyphen"},
      {"under_score", "name: under_score\ndescription: d\n", false,
       "Skill name 'under_score' contains invalid characters. Only letters, digits, and hyphens "
       "are allowed."},
      {"x", "name: " + std::string(65, 'x') + "\ndescription: d\n", false,
       "Skill name '" + std::string(65, 'x') + "' exceeds 64 character limit (65 chars)"},
      {"no-name", "description: d\n", false, "Missing required field in frontmatter: name"},
      {"two-extra", "name: two-extra\ndescription: d\nzeta: 1\nalpha: 2\n", false,
       "Unexpected fields in frontmatter: alpha, zeta. Only"},
      {"café", "name: café\ndescription: Unicode letters are allowed.\n", true, ""},
      {"ÉCOLE", "name: ÉCOLE\ndescription: d\n", false, "Skill name 'ÉCOLE' must be lowercase"},
      {"long-unicode",
       "name: long-unicode\ndescription: " +
           [] {
             std::string s;
             for (int i = 0; i < 1024; ++i) s += "é";
             return s;
           }() +
           "\n",
       true, ""},  // 1024 characters, 2048 bytes
  };
  for (const auto& c : cases) {
    auto folder = dir.skill(c.folder, "---\n" + c.frontmatter + "---\nBody\n");
    auto v = lint_spec(folder);
    EXPECT_EQ(v.valid, c.valid) << c.folder << ": " << v.message;
    if (!c.valid) {
      EXPECT_THAT(v.message, StartsWith(c.message)) << c.folder;
    }
  }
}

TEST(SpecLint, ReferenceParserQuirks) {
  TempDir dir;
  // The frontmatter ends at the first "---" anywhere, even inside a value.
  auto cut = lint_spec(dir.skill("cut", "---\nname: cut\ndescription: a---b\n---\n"));
  EXPECT_TRUE(cut.valid) << cut.message;
  // CRLF is fine (universal newlines); a BOM is not, as in the reference.
  EXPECT_TRUE(lint_spec(dir.skill("crlf", "---\r\nname: crlf\r\ndescription: d\r\n---\r\n")).valid);
  auto bom = lint_spec(dir.skill("bom", "\xEF\xBB\xBF---\nname: bom\ndescription: d\n---\n"));
  EXPECT_FALSE(bom.valid);
  EXPECT_EQ(bom.message, "SKILL.md must start with YAML frontmatter (---)");
  // Lower-case skill.md is accepted.
  EXPECT_TRUE(
      lint_spec(dir.skill("lower", "---\nname: lower\ndescription: d\n---\n", "skill.md")).valid);
  EXPECT_EQ(lint_spec(dir.skill("none", "x", "README.md")).message,
            "Missing required file: SKILL.md");
  auto missing = lint_spec(kCases / "does-not-exist");
  EXPECT_THAT(missing.message, StartsWith("Path does not exist: "));
  EXPECT_THAT(lint_spec(kCases / "VERDICTS.tsv").message, StartsWith("Not a directory: "));
  // A trailing slash still names the folder.
  EXPECT_TRUE(lint_spec(fs::path(kCases / "valid-minimal").string() + "/").valid);
}

TEST(SpecLint, ErrorsComeInTheReferenceOrder) {
  TempDir dir;
  auto v = lint_spec(
      dir.skill("Bad--Name-", "---\nname: Bad--Name-\nextra: x\ncompatibility:\n  - c\n---\n"));
  ASSERT_FALSE(v.valid);
  std::vector<std::string> expected = {
      "Unexpected fields in frontmatter: extra. Only ['allowed-tools', 'compatibility', "
      "'description', 'license', "
      "'metadata', 'name'] are allowed.",
      "Skill name 'Bad--Name-' must be lowercase",
      "Skill name cannot start or end with a hyphen",
      "Skill name cannot contain consecutive hyphens",
      "Missing required field in frontmatter: description",
      "Field 'compatibility' must be a string",
  };
  EXPECT_EQ(v.errors, expected);
  EXPECT_EQ(v.line, 3);
}

TEST(KernexLint, FixtureCorpora) {
  for (const auto& folder : skill_folders({kFixtures / "agentskills", kFixtures / "kernex"})) {
    auto v = lint(folder);
    if (folder.filename() == "backend-architect") {
      EXPECT_FALSE(v.valid);
      EXPECT_THAT(v.message, HasSubstr("toolbox.db_query.command"));
      EXPECT_GT(v.line, 0);
    } else {
      EXPECT_TRUE(v.valid) << folder << ": " << v.message;
    }
  }
  // kernex skills without permissions.commands may run anything: lint says so, as a warning.
  auto pw = lint(kFixtures / "kernex" / "playwright");
  bool warned = false;
  for (const auto& d : pw.diagnostics)
    warned |= d.severity == Severity::Warning && d.field == "permissions.commands";
  EXPECT_TRUE(warned);
}

TEST(KernexLint, JudgesKernexFieldsBeyondTheSpec) {
  TempDir dir;
  auto ok = lint(kCases / "valid-full");
  EXPECT_TRUE(ok.valid) << ok.message;
  auto unknown = lint(kCases / "unknown-field");  // `triggers` is a kernex field
  EXPECT_TRUE(unknown.valid) << unknown.message;
  auto bad = lint(dir.skill("bad", "---\nname: bad\ndescription: d\nlazy: maybe\n---\n"));
  EXPECT_FALSE(bad.valid);
  EXPECT_THAT(bad.message, HasSubstr("SKILL.md:4: lazy: expected true or false"));
  auto json = to_json(bad);
  EXPECT_EQ(json["valid"], false);
  EXPECT_EQ(json["line"], 4);
  EXPECT_EQ(json["diagnostics"][0]["field"], "lazy");
}

namespace {

// SKILL.md is read in chunks up to the cap (never into a buffer the cap's size): a body across
// many chunks reads whole, a file one byte over 16 MiB is refused, one at exactly 16 MiB is not.
TEST(SpecLint, FilesAreReadWholeUpToTheCap) {
  TempDir dir;
  const std::string head = "---\nname: big\ndescription: d\n---\n";
  const std::size_t cap = 16 * 1024 * 1024;
  EXPECT_TRUE(lint_spec(dir.skill("big", head + std::string(200 * 1024 + 7, 'x'))).valid);
  EXPECT_TRUE(lint_spec(dir.skill("big", head + std::string(cap - head.size(), 'x'))).valid);
  LintVerdict over = lint_spec(dir.skill("big", head + std::string(cap - head.size() + 1, 'x')));
  EXPECT_FALSE(over.valid);
  EXPECT_EQ(over.message, "SKILL.md is larger than 16 MiB");
}

}  // namespace
