#include "kernex/doctor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kernex/plugin_host.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

class Doctor : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kernex-doctor-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    config_.data_dir = dir_ / "data";
    config_.plugin_dirs = {dir_ / "plugins"};
  }
  void TearDown() override { fs::remove_all(dir_); }

  bool missing_mentions(const kernex::DoctorReport& r, std::string_view text) {
    return std::any_of(r.missing.begin(), r.missing.end(),
                       [&](const std::string& m) { return m.find(text) != std::string::npos; });
  }

  fs::path dir_;
  kernex::Config config_;
};

// platform-notes.md: this machine runs Landlock ABI 7 with seccomp filters available.
TEST_F(Doctor, ReportsTheSandboxFeaturesOfThisMachine) {
  const auto r = kernex::diagnose(config_);
  ASSERT_TRUE(r.landlock_abi) << r.landlock_error;
  EXPECT_GE(*r.landlock_abi, 1);
  EXPECT_TRUE(r.landlock_error.empty());
  EXPECT_TRUE(r.seccomp_available) << r.seccomp_error;
  ASSERT_TRUE(r.seccomp_mode);
  EXPECT_GE(*r.seccomp_mode, 0);
  EXPECT_LE(*r.seccomp_mode, 2);
  EXPECT_TRUE(r.no_new_privs_supported);
  EXPECT_FALSE(r.version.empty());
  EXPECT_FALSE(r.kernel_release.empty());
}

TEST_F(Doctor, ReportsPathsAndPluginDirsInSearchOrder) {
  fs::create_directories(dir_ / "plugins");
  const auto r = kernex::diagnose(config_);
  EXPECT_EQ(r.data_dir.path, dir_ / "data");
  EXPECT_FALSE(r.data_dir.exists);
  EXPECT_TRUE(r.data_dir.writable);  // can be created inside the temp dir
  EXPECT_FALSE(r.config_file);
  EXPECT_FALSE(r.config_error);

  const auto expected_dirs = kernex::plugin_search_dirs(config_);
  ASSERT_EQ(expected_dirs.size(), 1 + kernex::PluginHost::default_dirs().size());
  ASSERT_EQ(r.plugin_dirs.size(), expected_dirs.size());
  EXPECT_EQ(r.plugin_dirs[0].path, dir_ / "plugins");
  EXPECT_TRUE(r.plugin_dirs[0].exists);
  for (std::size_t i = 0; i < r.plugin_dirs.size(); ++i)
    EXPECT_EQ(r.plugin_dirs[i].path, expected_dirs[i]);

  fs::create_directories(dir_ / "data");
  const auto again = kernex::diagnose(config_);
  EXPECT_TRUE(again.data_dir.exists);
  EXPECT_TRUE(again.data_dir.writable);
}

TEST_F(Doctor, NamesWhatIsMissing) {
  config_.memory = kernex::PluginRef{"no-such-memory-plugin", kernex::Json::object()};
  config_.permissions_file = dir_ / "rules.txt";
  config_.pricing_file = dir_ / "pricing.yaml";
  const auto r = kernex::diagnose(config_);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(missing_mentions(r, "no default provider")) << ::testing::PrintToString(r.missing);
  EXPECT_TRUE(missing_mentions(r, "memory plugin `no-such-memory-plugin`"));
  EXPECT_TRUE(missing_mentions(r, (dir_ / "rules.txt").string()));
  EXPECT_TRUE(missing_mentions(r, (dir_ / "pricing.yaml").string()));

  config_.provider.name = "no-such-provider";
  EXPECT_TRUE(missing_mentions(kernex::diagnose(config_), "provider plugin `no-such-provider`"));
}

TEST_F(Doctor, BadConfigIsReportedAndTheChecksGoOn) {
  const fs::path file = dir_ / "kernex.yaml";
  std::ofstream(file) << "limits:\n  max_turns: ten\n";
  const auto r = kernex::diagnose_config_file(file);
  ASSERT_TRUE(r.config_error);
  EXPECT_THAT(*r.config_error, HasSubstr("limits.max_turns"));
  ASSERT_FALSE(r.missing.empty());
  EXPECT_THAT(r.missing.front(), HasSubstr("config: "));
  ASSERT_TRUE(r.config_file);
  EXPECT_TRUE(r.config_file->exists);
  EXPECT_TRUE(r.landlock_abi);  // the machine checks still ran
}

TEST_F(Doctor, GoodConfigFileIsReported) {
  const fs::path file = dir_ / "kernex.yaml";
  std::ofstream(file) << "provider: replay\ndata_dir: data\n";
  const auto r = kernex::diagnose_config_file(file);
  EXPECT_FALSE(r.config_error);
  ASSERT_TRUE(r.config_file);
  EXPECT_EQ(r.config_file->path, file);
  EXPECT_TRUE(r.config_file->exists);
  EXPECT_EQ(r.data_dir.path, dir_ / "data");
}

TEST_F(Doctor, JsonAndTextRenderings) {
  const auto r = kernex::diagnose(config_);
  const kernex::Json j = kernex::to_json(r);
  EXPECT_EQ(j.at("landlock").at("abi"), *r.landlock_abi);
  EXPECT_TRUE(j.at("landlock").at("available").get<bool>());
  EXPECT_TRUE(j.at("landlock").at("error").is_null());
  EXPECT_TRUE(j.at("seccomp").at("available").get<bool>());
  EXPECT_TRUE(j.at("no_new_privs").at("supported").get<bool>());
  EXPECT_EQ(j.at("data_dir").at("path"), (dir_ / "data").string());
  EXPECT_TRUE(j.at("config").at("file").is_null());
  EXPECT_EQ(j.at("plugin_dirs").size(), r.plugin_dirs.size());
  EXPECT_EQ(j.at("plugins").at("found"), r.plugins_found);
  EXPECT_EQ(j.at("plugins").at("failed"), r.plugins_failed);
  EXPECT_EQ(j.at("missing").size(), r.missing.size());
  EXPECT_EQ(j.at("ok"), r.ok());

  const std::string text = kernex::to_text(r);
  EXPECT_THAT(text, HasSubstr("landlock      ABI " + std::to_string(*r.landlock_abi)));
  EXPECT_THAT(text, HasSubstr("seccomp       available"));
  EXPECT_THAT(text, HasSubstr((dir_ / "plugins").string()));
  for (const auto& m : r.missing) EXPECT_THAT(text, HasSubstr(m));
}

}  // namespace
