// The workspace's unified diff against GNU diff -u on the same texts: exact hunks for hand-made
// cases, and for random ones a patch that rebuilds the new text with as few changed lines.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <sstream>

#include "kernex/workspace/unified_diff.hpp"
#include "temp_dir.hpp"

namespace {

using kernex::testing::TempDir;
using kernex::workspace::DiffOptions;
using kernex::workspace::unified_hunks;

// GNU diff's hunks (its two header lines dropped).
std::string gnu_hunks(const TempDir& tmp, const std::string& a, const std::string& b,
                      bool minimal = false) {
  tmp.write("old", a);
  tmp.write("new", b);
  const std::string cmd = std::string("diff -u ") + (minimal ? "--minimal " : "") + "'" +
                          (tmp / "old").string() + "' '" + (tmp / "new").string() + "'";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  char buffer[4096];
  for (std::size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    out.append(buffer, n);
  if (pipe) ::pclose(pipe);
  for (int header = 0; header < 2 && !out.empty(); ++header) out.erase(0, out.find('\n') + 1);
  return out;
}

std::string numbered(int from, int to, const std::string& tag = "line") {
  std::string out;
  for (int i = from; i <= to; ++i) out += tag + " " + std::to_string(i) + "\n";
  return out;
}

TEST(UnifiedDiff, MatchesGnuDiffOnHandMadeCases) {
  TempDir tmp;
  const std::string base = numbered(1, 30);
  std::string changed_twice = base;
  changed_twice.replace(changed_twice.find("line 5\n"), 7, "LINE five\n");
  changed_twice.replace(changed_twice.find("line 25\n"), 8, "");
  std::string close_pair = base;  // changes 6 lines apart: one hunk
  close_pair.replace(close_pair.find("line 10\n"), 8, "ten\n");
  close_pair.replace(close_pair.find("line 17\n"), 8, "seventeen\n");
  std::string far_pair = base;  // 7 lines apart: two hunks
  far_pair.replace(far_pair.find("line 10\n"), 8, "ten\n");
  far_pair.replace(far_pair.find("line 18\n"), 8, "eighteen\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\nb\nc\n", "a\nb\nc\n"}, {"", "one\ntwo\n"},
      {"one\ntwo\n", ""},         {"a\nb\nc\n", "a\nB\nc\n"},
      {"a\nb\nc", "a\nb\nc\n"},   {"a\nb\nc\n", "a\nb\nc"},
      {"a\nb", "a\nc"},           {base, numbered(1, 12) + "inserted\n" + numbered(13, 30)},
      {base, changed_twice},      {base, close_pair},
      {base, far_pair},           {base, numbered(4, 30)},
      {base, numbered(1, 27)},    {"x\n", numbered(1, 3) + "x\n" + numbered(4, 6)},
  };
  for (const auto& [a, b] : cases) {
    EXPECT_EQ(unified_hunks(a, b), gnu_hunks(tmp, a, b)) << "old:\n" << a << "new:\n" << b;
  }
}

// The new text rebuilt from the old one and the hunks (context checked on the way).
std::string apply_hunks(const std::string& old_text, const std::string& hunks) {
  std::vector<std::string> old_lines;
  std::istringstream in(old_text);
  for (std::string l; std::getline(in, l);) old_lines.push_back(l);
  std::vector<std::string> out;
  std::size_t next_old = 0;
  std::istringstream patch(hunks);
  for (std::string l; std::getline(patch, l);) {
    if (l.starts_with("@@")) {
      const std::string old_range = l.substr(4, l.find(' ', 4) - 4);  // "s" or "s,c"
      std::size_t start = std::stoul(old_range);
      if (!old_range.ends_with(",0")) --start;
      while (next_old < start) out.push_back(old_lines[next_old++]);
    } else if (l.starts_with(" ")) {
      EXPECT_EQ(old_lines.at(next_old), l.substr(1));
      out.push_back(old_lines[next_old++]);
    } else if (l.starts_with("-")) {
      EXPECT_EQ(old_lines.at(next_old), l.substr(1));
      ++next_old;
    } else if (l.starts_with("+")) {
      out.push_back(l.substr(1));
    }
  }
  while (next_old < old_lines.size()) out.push_back(old_lines[next_old++]);
  std::string text;
  for (const auto& l : out) text += l + "\n";
  return text;
}

std::size_t changed_lines(const std::string& hunks) {
  std::size_t n = 0;
  std::istringstream in(hunks);
  for (std::string l; std::getline(in, l);)
    if ((l.starts_with("+") || l.starts_with("-"))) ++n;
  return n;
}

TEST(UnifiedDiff, RandomTextsGiveMinimalPatchesThatApply) {
  TempDir tmp;
  std::mt19937 rng(19);
  const char* words[] = {"a", "b", "c", "d", "e"};
  auto random_text = [&] {
    std::string t;
    const int n = static_cast<int>(rng() % 25);
    for (int i = 0; i < n; ++i) t += std::string(words[rng() % 5]) + "\n";
    return t;
  };
  for (int round = 0; round < 150; ++round) {
    const std::string a = random_text(), b = random_text();
    const std::string ours = unified_hunks(a, b);
    EXPECT_EQ(apply_hunks(a, ours), b) << "old:\n" << a << "new:\n" << b << "hunks:\n" << ours;
    EXPECT_EQ(changed_lines(ours), changed_lines(gnu_hunks(tmp, a, b, true))) << "old:\n"
                                                                              << a << "new:\n"
                                                                              << b;
  }
}

TEST(UnifiedDiff, PastTheWorkBoundTheMiddleIsReplacedWhole) {
  std::string a, b;
  for (int i = 0; i < 3000; ++i) {
    a += "old " + std::to_string(i) + "\n";
    b += "new " + std::to_string(i) + "\n";
  }
  DiffOptions tight;
  tight.max_work = 1000;
  const std::string hunks = unified_hunks("head\n" + a + "tail\n", "head\n" + b + "tail\n", tight);
  EXPECT_TRUE(hunks.starts_with("@@ -1,3002 +1,3002 @@\n head\n-old 0\n")) << hunks.substr(0, 80);
  EXPECT_EQ(changed_lines(hunks), 6000u);
  EXPECT_EQ(apply_hunks("head\n" + a + "tail\n", hunks), "head\n" + b + "tail\n");
}

}  // namespace
