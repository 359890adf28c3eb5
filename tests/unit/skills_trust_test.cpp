// Trusting skills in writable locations (kernex/skills/trust.hpp) and the loader's use of it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kernex/kernel_files.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/trust.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex::skills;

namespace {

class SkillsTrust : public ::testing::Test {
 protected:
  void SetUp() override {
    skill_ = dir_.write("ws/skills/s/SKILL.md", "---\nname: s\ndescription: d\n---\nBody\n")
                 .parent_path();
    dir_.write("ws/skills/s/run.sh", "echo hi\n");
    rule_.store = dir_ / "data" / std::string(kTrustFileName);
    rule_.writable = {dir_ / "ws"};
  }
  kernex::testing::TempDir dir_;
  fs::path skill_;
  TrustRule rule_;
};

TEST_F(SkillsTrust, WritableLocationIsInsideOrAroundAWorkspaceOrBelowAWorldWritableDir) {
  EXPECT_EQ(writable_location(skill_, {dir_ / "ws"}), fs::canonical(dir_ / "ws"));
  EXPECT_EQ(writable_location(dir_ / "ws", {skill_ / "sub"}), fs::weakly_canonical(skill_ / "sub"));
  ::chmod(dir_.path().c_str(), 0700);
  // Only /tmp above it is world-writable: outside the listed dirs it still counts.
  auto tmp = writable_location(skill_, {dir_ / "elsewhere"});
  ASSERT_TRUE(tmp.has_value());
  EXPECT_EQ(tmp->string().find(dir_.path().string()), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(tmp->c_str(), &st), 0);
  EXPECT_NE(st.st_mode & S_IWOTH, 0u);
}

TEST_F(SkillsTrust, HashFollowsEveryFileAndTheLock) {
  auto a = trust_hash(skill_);
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_EQ(*trust_hash(skill_), *a);
  dir_.write("ws/skills/s/run.sh", "echo other\n");
  auto b = trust_hash(skill_);
  EXPECT_NE(*b, *a);
  dir_.write("ws/skills/s/kernex.lock", "{}");
  EXPECT_NE(*trust_hash(skill_), *b);
}

TEST_F(SkillsTrust, UntrustedThenTrustedThenChanged) {
  auto first = check_trust(skill_, rule_);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_EQ(first->state, TrustState::Untrusted);
  EXPECT_NE(first->message.find("kernex skills trust " + fs::canonical(skill_).string()),
            std::string::npos)
      << first->message;
  ASSERT_TRUE(trust_skill(rule_.store, skill_));
  EXPECT_EQ(check_trust(skill_, rule_)->state, TrustState::Trusted);
  dir_.write("ws/skills/s/extra.txt", "x");
  auto changed = check_trust(skill_, rule_);
  EXPECT_EQ(changed->state, TrustState::Changed);
  EXPECT_NE(changed->message.find("changed since it was trusted"), std::string::npos)
      << changed->message;
  ASSERT_TRUE(trust_skill(rule_.store, skill_));
  EXPECT_EQ(check_trust(skill_, rule_)->state, TrustState::Trusted);
}

TEST_F(SkillsTrust, MalformedStoreIsAnErrorNamingIt) {
  dir_.write("data/trusted-skills.json", "[1, 2]");
  auto check = check_trust(skill_, rule_);
  ASSERT_FALSE(check);
  EXPECT_NE(check.error().message.find("trusted-skills.json"), std::string::npos);
}

TEST_F(SkillsTrust, LoaderRefusesUntrustedAndRegistersWhatItReads) {
  LoadOptions options{rule_};
  auto refused = load_skills({dir_ / "ws/skills"}, options);
  EXPECT_TRUE(refused.skills.empty());
  ASSERT_EQ(refused.failures.size(), 1u);
  EXPECT_EQ(refused.failures[0].trust, TrustState::Untrusted);
  ASSERT_TRUE(trust_skill(rule_.store, skill_));
  auto loaded = load_skills({dir_ / "ws/skills"}, options);
  ASSERT_EQ(loaded.skills.size(), 1u);
  EXPECT_EQ(loaded.skills[0].trust, TrustState::Trusted);
  auto files = kernex::kernel_files();
  auto registered = [&](const fs::path& p) {
    return std::any_of(files.begin(), files.end(), [&](const kernex::KernelFile& f) {
      return f.path == p && f.access == kernex::KernelFileAccess::ReadOnly;
    });
  };
  EXPECT_TRUE(registered(dir_ / "ws/skills"));
  EXPECT_TRUE(registered(skill_));
}

TEST_F(SkillsTrust, WithoutARuleNoTrustIsChecked) {
  auto loaded = load_skills({dir_ / "ws/skills"});
  ASSERT_EQ(loaded.skills.size(), 1u);
  EXPECT_EQ(loaded.skills[0].trust, TrustState::NotRequired);
}

}  // namespace
