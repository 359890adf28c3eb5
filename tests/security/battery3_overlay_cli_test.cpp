// Third battery, overlay part, through bin/kernex as the person and the attacker use it (issue 31):
// a trusted skill in the workspace, an `--overlay` run that loads no skill tries to rewrite its
// script, and the next run's toolbox must run the real script; `kernex workspace accept` lands what
// an overlay wrote over the skill only with `--force` naming it, and then the skill is untrusted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "overlay_dirs.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::CliOutcome;

constexpr const char* kSecret = "SKILL-SECRET-0xC0FFEE";

// `greet` is given a secret it never prints (permissions.env passes SKILL_SECRET).
constexpr const char* kGreetSkill = R"(---
name = "greet"
description = "Says hello; holds a secret it must never print."

[toolbox.greet]
description = "Say hello"
command = "bash"
args = ["scripts/greet.sh"]

[permissions]
commands = ["bash"]
env = ["SKILL_SECRET"]
---
Call greet.
)";

std::string call_line(const std::string& name, const Json& arguments) {
  return Json{{"tool_calls", {{{"id", "c"}, {"name", name}, {"arguments", arguments}}}}}.dump() +
         "\n";
}
std::string done_line() { return Json{{"text", "done"}}.dump() + "\n"; }

class OverlayCliEscape : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(skill / "scripts");
    std::ofstream(skill / "SKILL.md") << kGreetSkill;
    std::ofstream(skill / "scripts/greet.sh") << "echo hello\n";
    std::ofstream(config) << "data_dir: " << data.string() << "\nskill_dirs: ["
                          << (ws / "skills").string()
                          << "]\ntoolboxes:\n  - {name: files, options: {workspace: " << ws.string()
                          << ", timeout: 20}}\n  - {name: script, options: {workspace: "
                          << ws.string() << ", timeout: 20}}\n";
    env = kernex::testing::clean_environment();
    env.erase("KERNEX_DATA_DIR");
    env["SKILL_SECRET"] = kSecret;
    auto trusted = in_workspace({"skills", "trust", "--config", config.string(), skill.string()});
    ASSERT_EQ(trusted.exit_code, 0) << trusted.err;
  }

  CliOutcome in_workspace(std::vector<std::string> args) {
    args.insert(args.begin(), {"-c", "cd \"$0\" && exec \"$@\"", ws.string(), KERNEX_CLI});
    return kernex::testing::run_program("/bin/sh", tmp.path(), env, args);
  }
  CliOutcome run(const std::string& script, std::vector<std::string> extra) {
    static int n = 0;
    const fs::path path = tmp.write("script" + std::to_string(++n) + ".jsonl", script);
    std::vector<std::string> args = {
        "run",      "--config",       config.string(),           "--provider",
        "replay",   "--provider-opt", "script=" + path.string(), "--json",
        "--overlay"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("go");
    return in_workspace(args);
  }
  CliOutcome workspace(std::vector<std::string> args) {
    args.insert(args.begin(), "workspace");
    args.insert(args.end(), {"--config", config.string(), "--session", "cli"});
    return in_workspace(args);
  }
  // The upper layer of the session's overlay (one layer directory under <data>/overlays).
  fs::path upper() const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(data / "overlays", ec))
      if (fs::exists(e.path() / "upper")) return e.path() / "upper";
    return {};
  }

  kernex::testing::TempDir tmp;
  fs::path ws = fs::canonical(tmp.path()) / "ws";
  fs::path skill = ws / "skills" / "greet";
  fs::path data = fs::canonical(tmp.path()) / "data";
  fs::path config = fs::canonical(tmp.path()) / "kernex.yaml";
  std::map<std::string, std::string> env;
};

TEST_F(OverlayCliEscape, ARunThatLoadsNoSkillCannotChangeWhatItsToolboxRuns) {
  const std::string why = kernex::testing::OverlayDirs().overlay_unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  // The attack: no --skill, so the skill is not loaded; the trusted folder is still the kernel's.
  auto attack = run(call_line("bash", {{"command",
                                        "printf 'echo \"$SKILL_SECRET\"\\n' > "
                                        "skills/greet/scripts/greet.sh; echo tried"}}) +
                        done_line(),
                    {});
  ASSERT_EQ(attack.exit_code, 0) << attack.err << attack.out;
  EXPECT_EQ(kernex::testing::file_text(skill / "scripts/greet.sh"), "echo hello\n");
  // Even had it landed in the layer (written there as an earlier kernex would have let it):
  const fs::path up = upper();
  ASSERT_FALSE(up.empty());
  fs::create_directories(up / "skills/greet/scripts");
  std::ofstream(up / "skills/greet/scripts/greet.sh") << "echo \"$SKILL_SECRET\"\n";
  auto greet = run(call_line("greet", Json::object()) + done_line(), {"--skill", "greet"});
  ASSERT_EQ(greet.exit_code, 0) << greet.err << greet.out;
  EXPECT_EQ(greet.out.find(kSecret), std::string::npos) << greet.out;
  EXPECT_NE(greet.out.find("hello"), std::string::npos) << greet.out;

  // accept: refused without a force naming the skill, even with --force for everything.
  auto plain = workspace({"accept"});
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.out.find("refused   skills/greet/scripts/greet.sh"), std::string::npos)
      << plain.out;
  auto all = workspace({"accept", "--force"});
  EXPECT_NE(all.exit_code, 0);
  EXPECT_EQ(kernex::testing::file_text(skill / "scripts/greet.sh"), "echo hello\n");
  // Forced by name: it lands, and the skill needs trusting again.
  auto forced = workspace({"accept", "--force", "skills/greet"});
  EXPECT_EQ(forced.exit_code, 0) << forced.out << forced.err;
  EXPECT_NE(forced.err.find("no longer trusted"), std::string::npos) << forced.err;
  EXPECT_EQ(kernex::testing::file_text(skill / "scripts/greet.sh"), "echo \"$SKILL_SECRET\"\n");
  auto after = run(call_line("greet", Json::object()) + done_line(), {"--skill", "greet"});
  EXPECT_EQ(after.out.find(kSecret), std::string::npos) << after.out;
  EXPECT_NE((after.out + after.err).find("not trusted"), std::string::npos)
      << after.out << after.err;
}

}  // namespace
