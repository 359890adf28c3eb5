// Permission rules: kernex's 17 permissions.rs cases, the 5 utf8.rs cases, matching details
// kernex pins by construction, and the YAML rules file this port adds.
#include "kernex/permissions.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kernex {
namespace {

using ::testing::HasSubstr;

PermissionRules rules(std::vector<std::string> allow, std::vector<std::string> deny) {
  return PermissionRules(std::move(allow), std::move(deny));
}

Json cmd(const std::string& command) { return Json{{"command", command}}; }

// --- glob ---

TEST(Permissions, GlobExactMatch) { EXPECT_TRUE(glob_match("git status", "git status")); }

TEST(Permissions, GlobTrailingStar) {
  EXPECT_TRUE(glob_match("git *", "git status"));
  EXPECT_TRUE(glob_match("git *", "git commit -m \"fix\""));
  EXPECT_FALSE(glob_match("git *", "rm -rf /"));
}

TEST(Permissions, GlobStarsOnBothSides) {
  EXPECT_TRUE(glob_match("*rm*", "sudo rm -rf /"));
  EXPECT_TRUE(glob_match("*rm*", "rm -rf"));
  EXPECT_FALSE(glob_match("*rm*", "git status"));
}

TEST(Permissions, GlobIsAsciiCaseInsensitive) {
  EXPECT_TRUE(glob_match("GIT *", "git status"));
  EXPECT_TRUE(glob_match("git *", "GIT STATUS"));
}

TEST(Permissions, GlobEmpty) {
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "anything"));
}

TEST(Permissions, GlobStarAlone) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("*", "anything at all"));
}

TEST(Permissions, GlobPiecesMatchInOrderWithoutOverlap) {
  EXPECT_FALSE(glob_match("a*a", "a"));  // prefix and suffix may not share a character
  EXPECT_TRUE(glob_match("a*a", "aa"));
  EXPECT_TRUE(glob_match("*AAB", "aaab"));  // a partial match restarts inside itself
  EXPECT_TRUE(glob_match("*ab*ab*", "xabyabz"));
  EXPECT_FALSE(glob_match("*ab*ab*", "xaby"));
  EXPECT_TRUE(glob_match("a**b", "ab"));
  EXPECT_FALSE(glob_match("*b*a", "ab"));
}

// A long rule against long arguments: backtracking to the last star took their product in time
// (minutes here); matching the pieces in order takes their sum.
TEST(Permissions, GlobCostIsLinear) {
  const std::string rule = "*" + std::string(200'000, 'a') + "b";
  EXPECT_FALSE(glob_match(rule, std::string(400'000, 'a')));
  EXPECT_TRUE(glob_match(rule, std::string(400'000, 'a') + "b"));
}

// --- pattern ---

TEST(Permissions, PatternBareToolName) {
  EXPECT_TRUE(pattern_matches("Bash", "bash", "some args"));
  EXPECT_TRUE(pattern_matches("Write", "write", ""));
  EXPECT_FALSE(pattern_matches("Read", "write", ""));
}

TEST(Permissions, PatternWithGlob) {
  EXPECT_TRUE(pattern_matches("Bash(git *)", "bash", "git status"));
  EXPECT_FALSE(pattern_matches("Bash(git *)", "bash", "rm -rf /"));
  EXPECT_FALSE(pattern_matches("Bash(git *)", "read", "git status"));
}

// --- check ---

TEST(Permissions, DefaultRulesAllowEverything) {
  EXPECT_TRUE(PermissionRules().check("bash", cmd("rm -rf /")).allowed);
}

TEST(Permissions, DenyBareTool) {
  const auto r = rules({}, {"Write"});
  EXPECT_FALSE(r.check("write", Json{{"path", "/etc/passwd"}}).allowed);
  EXPECT_TRUE(r.check("read", Json{{"path", "/etc/passwd"}}).allowed);
}

TEST(Permissions, DenyWithGlob) {
  const auto r = rules({}, {"Bash(rm *)"});
  EXPECT_FALSE(r.check("bash", cmd("rm -rf /")).allowed);
  EXPECT_TRUE(r.check("bash", cmd("git status")).allowed);
}

TEST(Permissions, AllowListRestricts) {
  const auto r = rules({"Read", "Bash(git *)"}, {});
  EXPECT_TRUE(r.check("read", Json{{"path", "src/lib.rs"}}).allowed);
  EXPECT_TRUE(r.check("bash", cmd("git log")).allowed);
  const auto write = r.check("write", Json{{"path", "out.txt"}});
  EXPECT_FALSE(write.allowed);
  EXPECT_EQ(write.reason, "tool 'write' not in allow list");
  EXPECT_FALSE(r.check("bash", cmd("curl https://example.com")).allowed);
}

TEST(Permissions, DenyWinsOverAllow) {
  const auto r = rules({"Bash"}, {"Bash(rm *)"});
  EXPECT_FALSE(r.check("bash", cmd("rm file.txt")).allowed);
  EXPECT_TRUE(r.check("bash", cmd("echo hello")).allowed);
}

TEST(Permissions, NestedObjectsAreSearched) {
  const auto r = rules({}, {"Bash(*rm -rf*)"});
  EXPECT_FALSE(r.check("bash", Json::parse(R"({"options":{"command":"rm -rf /"}})")).allowed);
}

TEST(Permissions, ArraysAreSearched) {
  const auto r = rules({}, {"Bash(*sudo*)"});
  EXPECT_FALSE(r.check("bash", Json::parse(R"({"argv":["bash","-c","sudo poweroff"]})")).allowed);
}

TEST(Permissions, ExtractIsCappedAt64KiB) {
  EXPECT_LE(extract_args_string(cmd(std::string(80 * 1024, 'x'))).size(), kMaxPermissionArgsLen);
}

TEST(Permissions, DenyReasonNamesThePattern) {
  const auto out = rules({}, {"Bash(sudo *)"}).check("bash", cmd("sudo apt-get install vim"));
  EXPECT_FALSE(out.allowed);
  EXPECT_THAT(out.reason, HasSubstr("Bash(sudo *)"));
  EXPECT_EQ(out.reason, "denied by rule: Bash(sudo *)");
}

// --- details kernex pins by construction ---

TEST(Permissions, ExtractWalksSortedKeysDepthFirstStringsOnly) {
  const Json args =
      Json::parse(R"({"z":"last","a":["x",{"k":"y"},3,true,null],"m":{"b":"b1","a":"a1"},"n":1})");
  EXPECT_EQ(extract_args_string(args), "x y a1 b1 last");
}

TEST(Permissions, ExtractEmptyStringLeaves) {
  EXPECT_EQ(extract_args_string(Json::parse(R"({"a":"","b":"x"})")), "x");
  EXPECT_EQ(extract_args_string(Json::parse(R"({"a":"x","b":""})")), "x ");
  EXPECT_EQ(extract_args_string(Json("top")), "top");
}

TEST(Permissions, ExtractTruncatesOnACharacterBoundary) {
  std::string s = "a";
  while (s.size() < 70'000) s += "\xC3\xA9";  // é, two bytes, so byte 65536 is mid-character
  const std::string out = extract_args_string(cmd(s));
  EXPECT_EQ(out.size(), kMaxPermissionArgsLen - 1);
  EXPECT_EQ(out, s.substr(0, kMaxPermissionArgsLen - 1));
}

TEST(Permissions, ExtractStopsAfterTheCap) {
  Json args = Json::array();
  args.push_back(std::string(kMaxPermissionArgsLen, 'a'));
  args.push_back("sudo");
  EXPECT_EQ(extract_args_string(args).size(), kMaxPermissionArgsLen);
  EXPECT_TRUE(rules({}, {"Bash(*sudo*)"}).check("bash", args).allowed);
}

TEST(Permissions, ExtractSurvivesDeepNesting) {
  const std::size_t depth = 100'000;
  const Json args =
      Json::parse(std::string(depth, '[') + "\"sudo reboot\"" + std::string(depth, ']'));
  EXPECT_EQ(extract_args_string(args), "sudo reboot");
}

TEST(Permissions, PatternsAreNotTrimmed) {
  EXPECT_FALSE(pattern_matches("Bash (git *)", "bash", "git status"));
  EXPECT_TRUE(pattern_matches("Bash (git *)", "bash ", "git status"));
  EXPECT_FALSE(pattern_matches(" Bash", "bash", ""));
}

TEST(Permissions, PatternParenthesesRules) {
  // '(' without a trailing ')' is part of a literal tool name.
  EXPECT_TRUE(pattern_matches("Bash(git", "bash(git", ""));
  // The glob runs from the first '(' to the final ')'.
  EXPECT_TRUE(pattern_matches("Bash(echo (hi))", "bash", "echo (hi)"));
  EXPECT_TRUE(pattern_matches("Bash()", "bash", ""));
  EXPECT_FALSE(pattern_matches("Bash()", "bash", "x"));
  EXPECT_FALSE(pattern_matches("WebFetch", "web_fetch", ""));
}

TEST(Permissions, GlobOnlyStarIsSpecial) {
  EXPECT_TRUE(glob_match("a?c", "a?c"));
  EXPECT_FALSE(glob_match("a?c", "abc"));
  EXPECT_TRUE(glob_match("[x]\\*", "[X]\\anything"));
  EXPECT_TRUE(glob_match("*a*b*c*", "xxaxxbxxcxx"));
  EXPECT_FALSE(glob_match("*a*b*c*", "xxaxxcxxbxx"));
  EXPECT_TRUE(glob_match("**", ""));
}

TEST(Permissions, GlobFoldsOnlyAscii) {
  EXPECT_TRUE(glob_match("caf\xC3\xA9 *", "CAF\xC3\xA9 ok"));
  EXPECT_FALSE(glob_match("\xC3\xA9", "\xC3\x89"));  // é vs É: non-ASCII is exact
  EXPECT_TRUE(glob_match("*\xF0\x9F\x8E\x89*", "party \xF0\x9F\x8E\x89 time"));
}

TEST(Permissions, GlobLongInputIsQuick) {
  const std::string text(kMaxPermissionArgsLen, 'a');
  EXPECT_FALSE(glob_match("*a*a*a*a*a*b", text));
  EXPECT_TRUE(glob_match("*a*a*a*a*a*a", text));
}

// --- utf8.rs floor_char_boundary (5) ---

TEST(Utf8, AsciiBoundaries) {
  EXPECT_EQ(floor_char_boundary("hello", 3), 3u);
  EXPECT_EQ(floor_char_boundary("hello", 0), 0u);
  EXPECT_EQ(floor_char_boundary("hello", 5), 5u);
}

TEST(Utf8, MaxBeyondLength) { EXPECT_EQ(floor_char_boundary("hi", 99), 2u); }

TEST(Utf8, TwoByteCharacter) {
  const std::string s = "\xC3\xA9";  // é
  EXPECT_EQ(floor_char_boundary(s, 1), 0u);
  EXPECT_EQ(floor_char_boundary(s, 2), 2u);
}

TEST(Utf8, FourByteEmoji) {
  const std::string s =
      "a\xF0\x9F\x8E\x89"
      "b";  // a🎉b
  for (std::size_t max : {4u, 3u, 2u, 1u}) EXPECT_EQ(floor_char_boundary(s, max), 1u) << max;
  EXPECT_EQ(floor_char_boundary(s, 0), 0u);
}

TEST(Utf8, MixedWidthHearts) {
  const std::string s =
      "\xE2\x9D\xA4\xEF\xB8\x8F\xF0\x9F\xA7\xA1\xF0\x9F\x92\x9B\xF0\x9F\x92\x9A\xF0\x9F\x92\x99"
      "\xF0\x9F\x92\x9C";  // ❤️🧡💛💚💙💜
  ASSERT_EQ(s.size(), 26u);
  EXPECT_EQ(floor_char_boundary(s, 13), 10u);
  EXPECT_EQ(floor_char_boundary(s, 14), 14u);
  EXPECT_EQ(floor_char_boundary(s, 15), 14u);
  EXPECT_EQ(floor_char_boundary(s, 26), 26u);
}

// --- YAML rules files (kernex had none: defect §7.6) ---

TEST(Permissions, DefectNoFileFormat) {
  const auto r = PermissionRules::parse_yaml(
      "# rules\nallow:\n  - Read\n  - \"Bash(git *)\"\ndeny:\n  - Bash(git push *)\n",
      "perms.yaml");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->allow(), (std::vector<std::string>{"Read", "Bash(git *)"}));
  EXPECT_EQ(r->deny(), std::vector<std::string>{"Bash(git push *)"});
  EXPECT_TRUE(r->check("bash", cmd("git status")).allowed);
  EXPECT_FALSE(r->check("bash", cmd("git push origin")).allowed);
  EXPECT_FALSE(r->check("write", Json::object()).allowed);
}

TEST(Permissions, YamlLoadsFromFile) {
  const auto path = std::filesystem::path(KERNEX_BINARY_DIR) / "permissions_test_rules.yaml";
  std::ofstream(path) << "deny: [Write]\n";
  const auto r = PermissionRules::load_yaml_file(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->deny(), std::vector<std::string>{"Write"});
  EXPECT_TRUE(r->allow().empty());
  std::filesystem::remove(path);
}

TEST(Permissions, YamlMissingFileIsAnIoError) {
  const auto r = PermissionRules::load_yaml_file("/nonexistent/kernex/perms.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Io);
  EXPECT_THAT(r.error().message, HasSubstr("/nonexistent/kernex/perms.yaml"));
}

TEST(Permissions, YamlEmptyDocumentsAndListsMeanNoRules) {
  for (const char* text : {"", "# nothing\n", "allow: []\ndeny:\n"}) {
    const auto r = PermissionRules::parse_yaml(text, "p.yaml");
    ASSERT_TRUE(r) << text << ": " << r.error().message;
    EXPECT_TRUE(r->empty());
  }
}

struct YamlErrorCase {
  const char* text;
  std::vector<std::string> expected;  // substrings of the message
};

TEST(Permissions, YamlErrorsNameFileKeyAndLine) {
  const std::vector<YamlErrorCase> cases = {
      {"allow: [Read]\nasks: [Bash]\n",
       {"p.yaml:2", "unknown permissions key 'asks'", "expected 'allow', 'ask' or 'deny'"}},
      {"allow: Read\n", {"p.yaml:1", "'allow'", "list"}},
      {"deny:\n  - Write\n  - {Bash: x}\n", {"p.yaml:3", "'deny'", "item 2", "string"}},
      {"deny:\n  - Write\n  -\n", {"p.yaml:2", "'deny'", "item 2"}},
      {"allow:\n  - [Read]\n", {"p.yaml:2", "'allow'", "item 1"}},
      {"- Read\n- Write\n", {"p.yaml:1", "mapping"}},
      {"allow: [Read\ndeny: x\n", {"p.yaml:", "invalid YAML"}},
      {"deny: [Write]\n  bad: indent\n", {"p.yaml:", "invalid YAML"}},
  };
  for (const auto& c : cases) {
    const auto r = PermissionRules::parse_yaml(c.text, "p.yaml");
    ASSERT_FALSE(r) << c.text;
    EXPECT_EQ(r.error().code, ErrorCode::Config) << c.text;
    for (const auto& s : c.expected) EXPECT_THAT(r.error().message, HasSubstr(s)) << c.text;
  }
}

}  // namespace
}  // namespace kernex
