// A FIFO, a device or a directory where the kernel expects a file (a config, rules, a profile, a
// skill's SKILL.md, kernex.lock or mcp.json, a replay script, a CLI file argument) is refused
// quickly with an error naming the file and what it is; an endless or oversized file is refused by
// its cap. Each call runs under a deadline: on the old code, which blocked in open() on a FIFO, a
// test fails (and the FIFO is then opened for writing, which lets the stuck open return) instead of
// hanging the suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>

#include "cli_runner.hpp"
#include "kernex/config.hpp"
#include "kernex/files.hpp"
#include "kernex/permissions.hpp"
#include "kernex/pricing.hpp"
#include "kernex/sandbox/profile.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/lock.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr auto kDeadline = std::chrono::seconds(20);

std::filesystem::path make_fifo(const std::filesystem::path& path) {
  std::filesystem::create_directories(path.parent_path());
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

// Runs `call` and returns the error text it gave ("" on success). When it is still running at the
// deadline the test fails, and the FIFO is opened for writing and closed: a reader stuck in open()
// or read() then sees end of file, so the thread can be joined.
std::string error_within(const std::filesystem::path& fifo, std::function<std::string()> call) {
  auto done = std::async(std::launch::async, std::move(call));
  if (done.wait_for(kDeadline) == std::future_status::timeout) {
    ADD_FAILURE() << "still blocked on " << fifo << " after " << kDeadline.count() << " s";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
  return done.get();
}

template <class T>
std::string error_of(const Result<T>& r) {
  return r ? std::string() : r.error().describe();
}

// ---- the helper itself ----

TEST(RegularFileRead, RefusesAFifoWithoutWaitingForAWriter) {
  TempDir dir;
  const auto fifo = make_fifo(dir / "script.jsonl");
  const auto err =
      error_within(fifo, [&] { return error_of(read_regular_file(fifo, "replay script")); });
  EXPECT_THAT(err, AllOf(HasSubstr("replay script"), HasSubstr("script.jsonl"),
                         HasSubstr("is a FIFO, not a regular file")));
  EXPECT_THAT(error_of(open_regular_file(fifo, "x")), HasSubstr("FIFO"));
  EXPECT_THAT(error_of(read_regular_file_head(fifo, "x", 10)), HasSubstr("FIFO"));
}

TEST(RegularFileRead, RefusesDirectoriesAndDevicesByKind) {
  TempDir dir;
  EXPECT_THAT(error_of(read_regular_file(dir.path(), "config file")),
              HasSubstr("is a directory, not a regular file"));
  EXPECT_THAT(error_of(read_regular_file("/dev/zero", "config file")),
              HasSubstr("is a character device, not a regular file"));
  EXPECT_THAT(error_of(read_regular_file("/dev/null", "config file")),
              HasSubstr("is a character device"));
  const auto missing = read_regular_file(dir / "nope.yaml", "config file");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::Io);
  EXPECT_THAT(missing.error().message, HasSubstr("does not exist"));
}

TEST(RegularFileRead, CapsTheSize) {
  TempDir dir;
  const auto file = dir.write("big.yaml", std::string(100, 'x'));
  auto exact = read_regular_file(file, "rules file", 100);
  ASSERT_TRUE(exact) << exact.error().describe();
  EXPECT_EQ(exact->size(), 100u);
  auto over = read_regular_file(file, "rules file", 99);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::Limit);
  EXPECT_THAT(over.error().message,
              AllOf(HasSubstr("rules file"), HasSubstr("larger than 99 bytes")));
  // A head read is not an error: it reads the first bytes of any length of file.
  auto head = read_regular_file_head(file, "program", 10);
  ASSERT_TRUE(head) << head.error().describe();
  EXPECT_EQ(*head, std::string(10, 'x'));
}

TEST(RegularFileRead, ControlCharactersInTheNameAreEscaped) {
  TempDir dir;
  const auto err = error_of(read_regular_file(dir / "a\x1b]0;pwned\x07", "config file"));
  EXPECT_THAT(err, HasSubstr("\\u001b"));
  EXPECT_EQ(err.find('\x1b'), std::string::npos);
}

// ---- each kind of caller ----

TEST(NonRegularInputs, ConfigRulesPricingAndProfileRefuseAFifo) {
  TempDir dir;
  const auto fifo = make_fifo(dir / "input.yaml");
  EXPECT_THAT(error_within(fifo, [&] { return error_of(Config::load(fifo)); }),
              AllOf(HasSubstr("config file"), HasSubstr("FIFO")));
  EXPECT_THAT(error_within(fifo, [&] { return error_of(PermissionRules::load_yaml_file(fifo)); }),
              AllOf(HasSubstr("permissions file"), HasSubstr("FIFO")));
  EXPECT_THAT(error_within(fifo, [&] { return error_of(PricingTable::load_yaml_file(fifo)); }),
              AllOf(HasSubstr("pricing file"), HasSubstr("FIFO")));
  EXPECT_THAT(
      error_within(fifo, [&] { return error_of(sandbox::SandboxProfile::load_yaml_file(fifo)); }),
      AllOf(HasSubstr("sandbox profile"), HasSubstr("FIFO")));
}

TEST(NonRegularInputs, ConfigRulesAndProfileRefuseADirectoryAndAnEndlessDevice) {
  TempDir dir;
  for (const std::filesystem::path& bad : {dir.path(), std::filesystem::path("/dev/zero")}) {
    EXPECT_THAT(error_of(Config::load(bad)), HasSubstr("not a regular file")) << bad;
    EXPECT_THAT(error_of(PermissionRules::load_yaml_file(bad)), HasSubstr("not a regular file"));
    EXPECT_THAT(error_of(sandbox::SandboxProfile::load_yaml_file(bad)),
                HasSubstr("not a regular file"));
  }
  const auto big = dir.write("big.yaml", std::string(kMaxManifestFileBytes + 1, '#'));
  EXPECT_THAT(error_of(Config::load(big)), HasSubstr("larger than"));
  EXPECT_THAT(error_of(PermissionRules::load_yaml_file(big)), HasSubstr("larger than"));
  EXPECT_THAT(error_of(sandbox::SandboxProfile::load_yaml_file(big)), HasSubstr("larger than"));
}

constexpr const char* kSkill = "---\nname: demo\ndescription: A demo skill.\n---\nBody.\n";

TEST(NonRegularInputs, ASkillsLockFileOrMcpJsonThatIsAFifoIsASkillError) {
  TempDir dir;
  dir.write("demo/SKILL.md", kSkill);
  const auto lock = make_fifo(dir / "demo" / "kernex.lock");
  EXPECT_THAT(error_within(lock, [&] { return error_of(skills::read_lock(dir / "demo")); }),
              HasSubstr("FIFO"));
  const auto loaded = error_within(lock, [&] {
    auto skill = skills::load_skill(dir / "demo");
    return skill ? std::string() : skill.error().describe();
  });
  EXPECT_THAT(loaded, HasSubstr("FIFO"));

  std::filesystem::remove(lock);
  const auto mcp = make_fifo(dir / "demo" / "mcp.json");
  const auto with_mcp = error_within(mcp, [&] {
    auto skill = skills::load_skill(dir / "demo");
    return skill ? std::string() : skill.error().describe();
  });
  EXPECT_THAT(with_mcp, HasSubstr("mcp.json"));
  // A FIFO among a skill's files is refused by the hash too, never opened.
  EXPECT_THAT(error_within(mcp, [&] { return error_of(skills::compute_lock(dir / "demo")); }),
              HasSubstr("regular file"));
}

TEST(NonRegularInputs, ASkillMdThatIsAFifoOrADirectoryIsASkillError) {
  TempDir dir;
  const auto fifo = make_fifo(dir / "a" / "SKILL.md");
  const auto a = error_within(fifo, [&] {
    auto skill = skills::load_skill(dir / "a");
    return skill ? std::string() : skill.error().describe();
  });
  EXPECT_THAT(a, HasSubstr("SKILL.md"));
  std::filesystem::create_directories(dir / "b" / "SKILL.md");
  auto b = skills::load_skill(dir / "b");
  ASSERT_FALSE(b);
  EXPECT_THAT(b.error().describe(), HasSubstr("regular file"));
}

// ---- through the CLI ----

class NonRegularCli : public ::testing::Test {
 protected:
  testing::CliOutcome kernex(const std::vector<std::string>& args) {
    return testing::finish_program(
        testing::start_program(KERNEX_CLI, dir.path(), testing::clean_environment(), args),
        std::chrono::milliseconds(std::chrono::seconds(kDeadline)));
  }
  std::vector<std::string> run_with_script(const std::filesystem::path& script) {
    return {"run",    "--data-dir",     (dir / "data").string(),     "--provider",
            "replay", "--provider-opt", "script=" + script.string(), "hello"};
  }
  TempDir dir;
};

TEST_F(NonRegularCli, AReplayScriptThatIsAFifoFailsQuickly) {
  const auto fifo = make_fifo(dir / "script.jsonl");
  const auto r = kernex(run_with_script(fifo));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("replay script"), HasSubstr("FIFO")));
}

TEST_F(NonRegularCli, AReplayScriptThatIsADirectoryIsAnErrorNotAnEmptyScript) {
  std::filesystem::create_directories(dir / "scripts");
  const auto r = kernex(run_with_script(dir / "scripts"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("is a directory, not a regular file"));
}

TEST_F(NonRegularCli, AReplayScriptThatIsEndlessIsRefused) {
  const auto r = kernex(run_with_script("/dev/zero"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("character device"));
}

TEST_F(NonRegularCli, ConfigFlagAndMemoryImportRefuseAFifo) {
  const auto fifo = make_fifo(dir / "in");
  const auto config = kernex({"run", "--config", fifo.string(), "hello"});
  EXPECT_NE(config.exit_code, 0);
  EXPECT_THAT(config.err, AllOf(HasSubstr("config file"), HasSubstr("FIFO")));
  const auto import =
      kernex({"memory", "import", fifo.string(), "--data-dir", (dir / "data").string()});
  EXPECT_NE(import.exit_code, 0);
  EXPECT_THAT(import.err, AllOf(HasSubstr("memory export"), HasSubstr("FIFO")));
}

TEST_F(NonRegularCli, SkillsLintRefusesAFifoSkillMdOrLock) {
  dir.write("skills/demo/SKILL.md", kSkill);
  make_fifo(dir / "skills" / "demo" / "kernex.lock");
  make_fifo(dir / "skills" / "other" / "SKILL.md");
  const auto r = kernex({"skills", "lint", (dir / "skills").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out + r.err, HasSubstr("FIFO"));
}

}  // namespace
}  // namespace kernex
