// Skill lock files: SHA-256 of every file, verification, and refusal at load of a locked skill
// whose files changed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernex/skills/loader.hpp"
#include "kernex/skills/lock.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex::skills;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

constexpr const char* kSkill = "---\nname: s\ndescription: d\n---\nBody\n";

TEST(SkillsLock, Sha256MatchesKnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(SkillsLock, LockRecordsEveryFileButItself) {
  kernex::testing::TempDir dir;
  dir.write("s/SKILL.md", kSkill);
  dir.write("s/scripts/a.sh", "abc");
  dir.write("s/assets/deep/x.bin", "");
  auto lock = write_lock(dir / "s");
  ASSERT_TRUE(lock) << lock.error().describe();
  EXPECT_EQ(lock->files.size(), 3u);
  EXPECT_EQ(lock->files.at("scripts/a.sh"), sha256_hex("abc"));
  EXPECT_EQ(lock->files.at("assets/deep/x.bin"), sha256_hex(""));
  EXPECT_FALSE(lock->files.contains(std::string(kLockFileName)));

  auto read = read_lock(dir / "s");
  ASSERT_TRUE(read && *read);
  EXPECT_EQ((*read)->files, lock->files);
  auto check = verify_lock(dir / "s");
  ASSERT_TRUE(check && *check);
  EXPECT_TRUE((*check)->ok());
  // Relocking is stable.
  auto again = write_lock(dir / "s");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->files, lock->files);
}

TEST(SkillsLock, VerifyReportsChangedMissingAndExtra) {
  kernex::testing::TempDir dir;
  dir.write("s/SKILL.md", kSkill);
  dir.write("s/a.txt", "a");
  dir.write("s/b.txt", "b");
  ASSERT_TRUE(write_lock(dir / "s"));
  dir.write("s/a.txt", "A");
  fs::remove(dir / "s" / "b.txt");
  dir.write("s/c.txt", "c");
  fs::create_symlink("/etc/passwd", dir / "s" / "link");
  auto check = verify_lock(dir / "s");
  ASSERT_TRUE(check && *check);
  EXPECT_THAT((*check)->changed, ElementsAre("a.txt"));
  EXPECT_THAT((*check)->missing, ElementsAre("b.txt"));
  EXPECT_THAT((*check)->extra, ElementsAre("c.txt", "link"));
  EXPECT_EQ((*check)->describe(), "changed: a.txt; missing: b.txt; extra: c.txt, link");
  EXPECT_EQ(to_json(**check)["ok"], false);
}

TEST(SkillsLock, RepointedSymlinkIsAChange) {
  kernex::testing::TempDir dir;
  dir.write("s/SKILL.md", kSkill);
  fs::create_symlink("SKILL.md", dir / "s" / "alias.md");
  ASSERT_TRUE(write_lock(dir / "s"));
  fs::remove(dir / "s" / "alias.md");
  fs::create_symlink("/etc/hostname", dir / "s" / "alias.md");
  auto check = verify_lock(dir / "s");
  ASSERT_TRUE(check && *check);
  EXPECT_THAT((*check)->changed, ElementsAre("alias.md"));
}

TEST(SkillsLock, NoLockAndBadLocks) {
  kernex::testing::TempDir dir;
  dir.write("s/SKILL.md", kSkill);
  auto none = verify_lock(dir / "s");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  for (const char* bad :
       {"not json", "[]", "{\"version\": 2, \"algorithm\": \"sha256\", \"files\": {}}",
        "{\"version\": 1, \"algorithm\": \"md5\", \"files\": {}}",
        "{\"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"a\": 1}}"}) {
    dir.write("s/kernex.lock", bad);
    auto r = read_lock(dir / "s");
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("kernex.lock")) << bad;
  }
}

TEST(SkillsLock, ALockedSkillThatChangedIsRefusedAtLoad) {
  kernex::testing::TempDir dir;
  dir.write("skills/s/SKILL.md", kSkill);
  dir.write("skills/t/SKILL.md", "---\nname: t\ndescription: d\n---\n");
  ASSERT_TRUE(write_lock(dir / "skills" / "s"));
  ASSERT_EQ(load_skills({dir / "skills"}).skills.size(), 2u);

  dir.write("skills/s/SKILL.md", "---\nname: s\ndescription: now evil\n---\nBody\n");
  auto loaded = load_skills({dir / "skills"});
  ASSERT_EQ(loaded.skills.size(), 1u);  // t is not locked and still loads
  EXPECT_EQ(loaded.skills[0].name, "t");
  ASSERT_EQ(loaded.failures.size(), 1u);
  const auto& problem = loaded.failures[0].problems.at(0);
  EXPECT_EQ(problem.file, dir / "skills" / "s" / "kernex.lock");
  EXPECT_THAT(problem.message, HasSubstr("changed: SKILL.md"));

  dir.write("skills/s/kernex.lock", "garbage");
  auto garbled = load_skills({dir / "skills"});
  ASSERT_EQ(garbled.failures.size(), 1u);
  EXPECT_THAT(garbled.failures[0].describe(), HasSubstr("expected a JSON object"));
}

}  // namespace
