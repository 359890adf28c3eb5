// Trusting skills in writable locations (kernex/skills/trust.hpp) and the loader's use of it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

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

TEST_F(SkillsTrust, StoreIsParsedOnceAndReadAgainWhenReplaced) {
  ASSERT_TRUE(trust_skill(rule_.store, skill_));
  auto first = trust_records(rule_.store);
  ASSERT_TRUE(first) << first.error().describe();
  auto again = trust_records(rule_.store);
  ASSERT_TRUE(again);
  EXPECT_EQ(first->get(), again->get()) << "an unchanged store is not parsed again";
  // Replaced by another file (the rename a second `kernex skills trust` makes): read again.
  dir_.write("data/other.json", "{\"version\": 1, \"skills\": {}}");
  fs::rename(dir_ / "data/other.json", rule_.store);
  EXPECT_EQ(check_trust(skill_, rule_)->state, TrustState::Untrusted);
  // Rewritten in place with the same size: read again (ctime moved).
  auto hash = trust_skill(rule_.store, skill_);
  ASSERT_TRUE(hash);
  ASSERT_EQ(check_trust(skill_, rule_)->state, TrustState::Trusted);
  std::ifstream in(rule_.store, std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(in), {}};
  const auto at = text.find(*hash);
  ASSERT_NE(at, std::string::npos);
  text[at] = text[at] == '0' ? '1' : '0';
  {
    std::ofstream out(rule_.store, std::ios::in | std::ios::out | std::ios::binary);
    out << text;
  }
  auto rewritten = check_trust(skill_, rule_);
  ASSERT_TRUE(rewritten) << rewritten.error().describe();
  EXPECT_EQ(rewritten->state, TrustState::Changed);
  // Turned into something hostile: a FIFO is refused, not read (nor waited on).
  fs::remove(rule_.store);
  ASSERT_EQ(::mkfifo(rule_.store.c_str(), 0600), 0);
  auto fifo = check_trust(skill_, rule_);
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().describe().find("FIFO"), std::string::npos) << fifo.error().describe();
}

TEST_F(SkillsTrust, ConcurrentTrustWritersLoseNoRecord) {
  constexpr int kWriters = 8;
  std::vector<fs::path> folders;
  for (int i = 0; i < kWriters; ++i) {
    const std::string name = "c" + std::to_string(i);
    folders.push_back(dir_.write("ws/skills/" + name + "/SKILL.md",
                                 "---\nname: " + name + "\ndescription: d\n---\n")
                          .parent_path());
  }
  std::vector<std::thread> writers;
  for (const auto& folder : folders)
    writers.emplace_back([&, folder] { EXPECT_TRUE(trust_skill(rule_.store, folder)); });
  for (auto& w : writers) w.join();
  auto records = read_trust_store(rule_.store);
  ASSERT_TRUE(records) << records.error().describe();
  EXPECT_EQ(records->size(), folders.size());
  for (const auto& folder : folders)
    EXPECT_EQ(check_trust(folder, rule_)->state, TrustState::Trusted);
  for (const auto& e : fs::directory_iterator(dir_ / "data"))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(SkillsTrust, ManyFoldersTrustedInOneWrite) {
  std::vector<fs::path> folders{skill_, dir_ / "ws/skills/missing"};
  auto results = trust_skills(rule_.store, folders);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0]);
  ASSERT_FALSE(results[1]);
  EXPECT_NE(results[1].error().message.find("missing"), std::string::npos);
  EXPECT_EQ(check_trust(skill_, rule_)->state, TrustState::Trusted);
}

TEST_F(SkillsTrust, SymlinkLoopIsNamedAsALoop) {
  fs::create_symlink("loop", skill_ / "loop");
  fs::create_symlink("b", skill_ / "a");
  fs::create_symlink("a", skill_ / "b");
  auto hash = trust_hash(skill_);
  ASSERT_FALSE(hash);
  const std::string& message = hash.error().message;
  EXPECT_NE(message.find("symlink loop"), std::string::npos) << message;
  EXPECT_NE(message.find("ELOOP"), std::string::npos) << message;
  EXPECT_NE(message.find(skill_.string()), std::string::npos) << message;
  EXPECT_EQ(message.find("outside the skill folder"), std::string::npos) << message;
  auto check = check_trust(skill_, rule_);
  ASSERT_TRUE(check);
  EXPECT_EQ(check->state, TrustState::Untrusted);
  EXPECT_NE(check->message.find("symlink loop"), std::string::npos) << check->message;
}

}  // namespace
