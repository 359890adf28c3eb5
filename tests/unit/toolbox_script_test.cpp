// The toolbox-script plugin: skills' script toolboxes run in the sandbox, through the PluginHost
// and through a whole Kernel::run with the replay provider.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <stop_token>
#include <thread>

#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/sandbox/toolbox.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/loader.hpp"
#include "proc_scan.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex;
using kernex::testing::read_lines;
using kernex::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const fs::path kSkills = fs::path(KERNEX_SOURCE_DIR) / "tests/fixtures/skills";

std::vector<Toolbox> probe_toolboxes() {
  auto loaded = skills::load_skills({kSkills});
  EXPECT_TRUE(loaded.failures.empty())
      << (loaded.failures.empty() ? "" : loaded.failures.front().describe());
  const skills::Skill* skill = loaded.find("env-probe");
  EXPECT_NE(skill, nullptr);
  return skill ? skill->toolboxes : std::vector<Toolbox>{};
}

class ScriptToolbox : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KERNEX_TEST_SECRET", "secret-must-not-leak", 1);
    ::setenv("KERNEX_TEST_DECLARED", "declared-value", 1);
    host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
    auto box =
        host_.create_toolbox("script", Json{{"workspace", ws_.path().string()}, {"timeout", 20}});
    ASSERT_TRUE(box) << box.error().describe();
    box_ = *box;
    context_.toolboxes = probe_toolboxes();
  }
  void TearDown() override {
    ::unsetenv("KERNEX_TEST_SECRET");
    ::unsetenv("KERNEX_TEST_DECLARED");
  }

  ToolResult call(const std::string& name, Json args) {
    auto r = box_->execute(context_, {}, ToolCall{"c1", name, std::move(args)});
    EXPECT_TRUE(r) << (r ? "" : r.error().describe());
    return r ? *r : ToolResult{};
  }

  TempDir ws_;
  PluginHost host_;
  std::shared_ptr<ToolExecutor> box_;
  Context context_;
};

TEST_F(ScriptToolbox, SkillLoaderRecordsTheSkillFolder) {
  ASSERT_EQ(context_.toolboxes.size(), 3u);
  for (const auto& t : context_.toolboxes)
    EXPECT_EQ(fs::path(t.source_dir), kSkills / "env-probe") << t.name;
  Json j = context_.toolboxes.front();
  EXPECT_EQ(j.at("source_dir"), (kSkills / "env-probe").string());
  EXPECT_FALSE(Json(Toolbox{}).contains("source_dir"));
}

TEST_F(ScriptToolbox, ListsTheContextsToolboxes) {
  auto specs = box_->list_tools(context_);
  ASSERT_TRUE(specs);
  std::vector<std::string> names;
  for (const auto& s : *specs) names.push_back(s.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("probe", "fail", "plant"));
  EXPECT_TRUE(box_->list_tools(Context{})->empty());
}

TEST_F(ScriptToolbox, ArgumentsArriveOnStdinAndThroughTemplates) {
  auto r = call("probe", Json{{"path", "some file.txt"}});
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_THAT(r.content, HasSubstr(R"(stdin={"path":"some file.txt"})"));
  EXPECT_THAT(r.content, HasSubstr("argv=some file.txt"));
  EXPECT_THAT(r.content, HasSubstr("cwd=" + fs::canonical(ws_.path()).string()));
  EXPECT_THAT(r.content, HasSubstr("skill_dir=" + (kSkills / "env-probe").string()));
}

TEST_F(ScriptToolbox, OnlyDeclaredEnvironmentReachesTheScript) {
  auto r = call("probe", Json{{"path", "x"}});
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_THAT(r.content, HasSubstr("declared=declared-value"));
  EXPECT_THAT(r.content, HasSubstr("secret=unset"));
  EXPECT_THAT(r.content, Not(HasSubstr("secret-must-not-leak")));
}

TEST_F(ScriptToolbox, MissingOrNonScalarTemplateArgumentIsAToolError) {
  auto missing = call("probe", Json::object());
  EXPECT_TRUE(missing.is_error);
  EXPECT_THAT(missing.content, HasSubstr("`path` was not given"));
  auto object = call("probe", Json{{"path", Json{{"a", 1}}}});
  EXPECT_TRUE(object.is_error);
  EXPECT_THAT(object.content, HasSubstr("string, number or boolean"));
  auto option = call("probe", Json{{"path", "--exec=evil"}});
  EXPECT_TRUE(option.is_error);
  EXPECT_THAT(option.content, HasSubstr("read as an option"));
}

TEST_F(ScriptToolbox, NonZeroExitIsAnErrorWithStatusAndStderrTail) {
  auto r = call("fail", Json::object());
  EXPECT_TRUE(r.is_error);
  EXPECT_THAT(r.content, HasSubstr("exit status 3"));
  EXPECT_THAT(r.content, HasSubstr("partial output"));
  EXPECT_THAT(r.content, HasSubstr("something went wrong: boom"));
}

TEST_F(ScriptToolbox, SkillFolderIsNeverWritable) {
  auto r = call("plant", Json::object());
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_THAT(r.content, HasSubstr("skill-dir-read-only"));
  EXPECT_FALSE(fs::exists(kSkills / "env-probe/planted.txt"));
}

TEST_F(ScriptToolbox, SkillFolderStaysReadOnlyInsideAWritableWorkspace) {
  // A project that ships its own skills: the workspace contains the skill folder.
  fs::create_directories(ws_.path() / "skills/env-probe");
  fs::copy(kSkills / "env-probe", ws_.path() / "skills/env-probe", fs::copy_options::recursive);
  auto loaded = skills::load_skills({ws_.path() / "skills"});
  ASSERT_EQ(loaded.skills.size(), 1u);
  context_.toolboxes = loaded.skills.front().toolboxes;
  auto r = call("plant", Json::object());
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_THAT(r.content, HasSubstr("skill-dir-read-only"));
  EXPECT_FALSE(fs::exists(ws_.path() / "skills/env-probe/planted.txt"));
}

TEST_F(ScriptToolbox, CommandOutsideTheAllowListIsBlockedBeforeSpawning) {
  Toolbox t;
  t.name = "sneaky";
  t.command = "sh";
  t.args = {"-c", "echo should-never-run"};
  t.allowed_commands = {"echo"};
  context_.toolboxes = {t};
  auto r = call("sneaky", Json::object());
  EXPECT_TRUE(r.is_error);
  EXPECT_THAT(r.content, HasSubstr("not in the skill's declared command allow-list"));
  EXPECT_THAT(r.content, Not(HasSubstr("should-never-run")));
}

TEST_F(ScriptToolbox, HijackingEnvIsDroppedAndTimeoutsAreReported) {
  Toolbox t;
  t.name = "envdump";
  t.command = "/usr/bin/env";
  t.env = {{"LD_PRELOAD", "/tmp/evil.so"}, {"MODE", "fast"}};
  t.env_passthrough = {"KERNEX_TEST_DECLARED", "LD_LIBRARY_PATH"};
  context_.toolboxes = {t};
  auto r = call("envdump", Json::object());
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_THAT(r.content, HasSubstr("KERNEX_TEST_DECLARED=declared-value"));
  EXPECT_THAT(r.content, HasSubstr("MODE=fast"));
  EXPECT_THAT(r.content, Not(HasSubstr("LD_PRELOAD")));
  EXPECT_THAT(r.content, Not(HasSubstr("KERNEX_TEST_SECRET")));

  auto fast =
      host_.create_toolbox("script", Json{{"workspace", ws_.path().string()}, {"timeout", 0.3}});
  ASSERT_TRUE(fast);
  Toolbox sleeper;
  sleeper.name = "sleeper";
  sleeper.command = "sleep";
  sleeper.args = {"30"};
  context_.toolboxes = {sleeper};
  auto slow = (*fast)->execute(context_, {}, ToolCall{"c2", "sleeper", Json::object()});
  ASSERT_TRUE(slow);
  EXPECT_TRUE(slow->is_error);
  EXPECT_THAT(slow->content, HasSubstr("timed out"));
}

TEST_F(ScriptToolbox, OutputTruncationIsVisible) {
  auto small =
      host_.create_toolbox("script", Json{{"workspace", ws_.path().string()}, {"max_output", 100}});
  ASSERT_TRUE(small);
  Toolbox flood;
  flood.name = "flood";
  flood.command = "head";
  flood.args = {"-c", "5000", "/dev/zero"};
  context_.toolboxes = {flood};
  auto r = (*small)->execute(context_, {}, ToolCall{"c3", "flood", Json::object()});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->is_error);
  EXPECT_THAT(r->content, HasSubstr("truncated"));
  EXPECT_LT(r->content.size(), 300u);
}

TEST_F(ScriptToolbox, AWorkspaceOverAProtectedPathIsRefusedWithTheReason) {
  TempDir data;
  auto box =
      host_.create_toolbox("script", Json{{"workspace", data.path().string()},
                                          {"protect", {(data.path() / "memory.db").string()}}});
  ASSERT_TRUE(box);
  auto r = (*box)->execute(context_, {}, ToolCall{"c4", "probe", Json{{"path", "x"}}});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->is_error);
  EXPECT_THAT(r->content, HasSubstr("protected path"));
}

TEST_F(ScriptToolbox, BadConfigIsAnErrorNamingTheKey) {
  auto bad = host_.create_toolbox("script", Json{{"timeout", "soon"}});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().describe(), HasSubstr("timeout"));
  auto unknown = host_.create_toolbox("script", Json{{"wrkspace", "/tmp"}});
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().describe(), HasSubstr("wrkspace"));
}

TEST(ToolboxArgv, WholeArgumentSubstitutionOnly) {
  Toolbox t;
  t.name = "t";
  t.command = "pdftotext";
  t.args = {"-layout", "{file}", "--out={file}", "{n}", "{flag}", "--", "{opt}"};
  auto argv =
      sandbox::toolbox_argv(t, Json{{"file", "a.pdf"}, {"n", 3}, {"flag", true}, {"opt", "-x"}});
  ASSERT_TRUE(argv) << argv.error().describe();
  EXPECT_THAT(*argv, ::testing::ElementsAre("pdftotext", "-layout", "a.pdf", "--out={file}", "3",
                                            "true", "--", "-x"));
}

// The whole loop: the model asks for the probe, the script's stdout goes back to the model.
TEST(ScriptToolboxKernel, ResultGoesBackToTheModelAndSecretsStayOut) {
  ::setenv("KERNEX_TEST_SECRET", "secret-must-not-leak", 1);
  ::setenv("KERNEX_TEST_DECLARED", "declared-value", 1);
  TempDir dir;
  const fs::path ws = dir / "ws";
  fs::create_directories(ws);
  std::string script =
      Json{{"tool_calls",
            {{{"id", "c1"}, {"name", "probe"}, {"arguments", {{"path", "report.pdf"}}}}}}}
          .dump() +
      "\n" + Json{{"text", "done"}}.dump() + "\n";
  Config config;
  config.provider.name = "replay";
  config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                            {"record", (dir / "record.jsonl").string()}};
  config.toolboxes = std::vector<PluginRef>{PluginRef{"script", Json{{"workspace", ws.string()}}}};
  config.pricing_file = fs::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  config.data_dir = dir / "data";
  auto kernel = Kernel::create(std::move(config));
  ASSERT_TRUE(kernel) << kernel.error().describe();
  auto loaded = skills::load_skills({kSkills});
  auto source = skills::SkillContextSource::create(std::move(loaded.skills), {"env-probe"});
  ASSERT_TRUE(source) << source.error().describe();
  (*kernel)->add_context_source(*source);

  auto r = (*kernel)->run(Request::from_text("tester", "please probe"));
  ::unsetenv("KERNEX_TEST_SECRET");
  ::unsetenv("KERNEX_TEST_DECLARED");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "done");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  const ToolResult& result = r->tool_calls[0].result;
  EXPECT_FALSE(result.is_error) << result.content;
  EXPECT_THAT(result.content, HasSubstr("argv=report.pdf"));
  EXPECT_THAT(result.content, HasSubstr("declared=declared-value"));
  EXPECT_THAT(result.content, HasSubstr("secret=unset"));

  auto requests = read_lines(dir / "record.jsonl");
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[0], HasSubstr("\"probe\""));        // offered to the model
  EXPECT_THAT(requests[1], HasSubstr("argv=report.pdf"));  // and its result sent back
  EXPECT_THAT(requests[1], Not(HasSubstr("secret-must-not-leak")));
}

}  // namespace

// ---- Context::stop and Context::workspace ----------------------------------------------------

// A toolbox that starts two background sleeps, tells the test through the FIFO `ready` in its
// workspace that they run, then waits for them: only a cancel ends it early.
static Toolbox sleepers() {
  Toolbox t;
  t.name = "sleepers";
  t.command = "sh";
  t.args = {"-c", "sleep 30 & sleep 30 & echo go > ready; wait"};
  return t;
}

TEST_F(ScriptToolbox, CancelKillsTheWholeProcessGroupAtOnce) {
  ASSERT_EQ(::mkfifo((ws_.path() / "ready").c_str(), 0600), 0);
  context_.toolboxes = {sleepers()};
  double worst_return = 0, worst_gone = 0;
  for (int round = 0; round < 5; ++round) {
    std::stop_source source;
    context_.stop = source.get_token();
    std::set<pid_t> groups;
    std::chrono::steady_clock::time_point stopped_at;
    std::thread canceller([&] {
      std::ifstream ready(ws_.path() / "ready");  // opens once the tool's shell opened the FIFO
      std::string word;
      ready >> word;
      groups = kernex::testing::groups_working_in(ws_.path());
      stopped_at = std::chrono::steady_clock::now();
      source.request_stop();
    });
    auto r = box_->execute(context_, {}, ToolCall{"c", "sleepers", Json::object()});
    const auto returned = std::chrono::steady_clock::now();
    // A tool that never opened the FIFO would leave the canceller blocked in open(): release it.
    if (int fd = ::open((ws_.path() / "ready").c_str(), O_WRONLY | O_NONBLOCK); fd >= 0)
      ::close(fd);
    canceller.join();
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->is_error);
    EXPECT_THAT(r->content, HasSubstr("was cancelled"));
    ASSERT_FALSE(groups.empty()) << "the tool's processes were not found under /proc";
    EXPECT_TRUE(
        kernex::testing::groups_gone_by(groups, stopped_at + std::chrono::milliseconds(250)));
    const double gone =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stopped_at)
            .count();
    const double back = std::chrono::duration<double, std::milli>(returned - stopped_at).count();
    worst_return = std::max(worst_return, back);
    worst_gone = std::max(worst_gone, gone);
    EXPECT_LT(back, 250.0);
  }
  std::printf(
      "[ measured ] script tool cancel: returned after %.2f ms, group gone after %.2f ms (worst of "
      "5)\n",
      worst_return, worst_gone);
}

TEST_F(ScriptToolbox, AStopRequestedBeforeTheCallRunsNothing) {
  std::stop_source source;
  source.request_stop();
  context_.stop = source.get_token();
  auto r = call("plant", Json::object());
  EXPECT_TRUE(r.is_error);
  EXPECT_THAT(r.content, HasSubstr("was cancelled"));
}

TEST_F(ScriptToolbox, TheRunsWorkspaceReplacesTheConfiguredOne) {
  Toolbox writer;
  writer.name = "writer";
  writer.command = "sh";
  writer.args = {"-c", "pwd; echo \"$1\" > out.txt", "writer", "{who}"};
  context_.toolboxes = {writer};
  TempDir a, b;
  for (const auto* dir : {&a, &b}) {
    context_.workspace = dir->path();
    auto r = call("writer", Json{{"who", dir == &a ? "A" : "B"}});
    ASSERT_FALSE(r.is_error) << r.content;
    EXPECT_EQ(r.content, fs::weakly_canonical(dir->path()).string() + "\n");
  }
  EXPECT_EQ(read_lines(a.path() / "out.txt"), std::vector<std::string>{"A"});
  EXPECT_EQ(read_lines(b.path() / "out.txt"), std::vector<std::string>{"B"});
  EXPECT_FALSE(fs::exists(ws_.path() / "out.txt"));

  context_.workspace = a.path() / "missing";
  auto missing = call("writer", Json{{"who", "C"}});
  EXPECT_TRUE(missing.is_error);
  EXPECT_THAT(missing.content, HasSubstr("is not an existing directory"));
}
