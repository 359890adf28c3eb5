// The files toolbox plugin: bash, read, write, edit, glob, grep, each run inside the sandbox so
// that file access follows the workspace policy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stop_token>
#include <thread>

#include "kernex/plugin_host.hpp"
#include "proc_scan.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex;
using kernex::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FilesToolbox : public ::testing::Test {
 protected:
  void SetUp() override {
    ws_ = fs::canonical(root_.path()) / "ws";
    outside_ = fs::canonical(root_.path()) / "outside";
    fs::create_directories(ws_ / "src/deep");
    fs::create_directories(outside_);
    std::ofstream(ws_ / "hello.txt") << "hello world\nsecond line\nthird line\n";
    std::ofstream(ws_ / "src/a.cpp") << "int main() { return 0; }\n";
    std::ofstream(ws_ / "src/deep/b.cpp") << "// needle here\n";
    std::ofstream(outside_ / "secret.txt") << "OUTSIDE-SECRET\n";
    host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
    auto box = host_.create_toolbox("files", Json{{"workspace", ws_.string()}, {"timeout", 20}});
    ASSERT_TRUE(box) << box.error().describe();
    box_ = *box;
  }

  ToolResult call(const std::string& name, Json args) {
    auto r = box_->execute(Context{}, {}, ToolCall{"c1", name, std::move(args)});
    EXPECT_TRUE(r) << (r ? "" : r.error().describe());
    return r ? *r : ToolResult{};
  }

  TempDir root_;
  fs::path ws_, outside_;
  PluginHost host_;
  std::shared_ptr<ToolExecutor> box_;
};

// Called from code (RunHandles::code_result_max_bytes), a tool returns its whole output, read
// and glob in structured form; past the code's cap the call fails, never cut.
TEST_F(FilesToolbox, FromCodeResultsAreWholeAndStructured) {
  std::string big;
  for (int i = 0; i < 5000; ++i) big += "line " + std::to_string(i) + " of a long file\n";
  std::ofstream(ws_ / "big.txt") << big;
  auto model = call("read", Json{{"file_path", "big.txt"}});
  EXPECT_LT(model.content.size(), big.size());  // the model's view is cut
  EXPECT_TRUE(model.structured.is_null());

  RunHandles code;
  code.code_result_max_bytes = 1u << 20;
  auto read = box_->execute(Context{}, code, ToolCall{"c", "read", Json{{"file_path", "big.txt"}}});
  ASSERT_TRUE(read);
  EXPECT_FALSE(read->is_error);
  EXPECT_EQ(read->structured, (Json{{"content", big}, {"lines", 5000}, {"truncated", false}}));
  auto glob = box_->execute(Context{}, code, ToolCall{"g", "glob", Json{{"pattern", "**/*.cpp"}}});
  ASSERT_TRUE(glob);
  ASSERT_TRUE(glob->structured.is_array()) << glob->structured.dump();
  EXPECT_EQ(glob->structured.size(), 2u);

  code.code_result_max_bytes = 1000;
  auto over = box_->execute(Context{}, code, ToolCall{"c", "read", Json{{"file_path", "big.txt"}}});
  ASSERT_TRUE(over);
  EXPECT_TRUE(over->is_error);
  EXPECT_NE(over->content.find("larger than 1000 bytes (repl.tool_result_max_bytes)"),
            std::string::npos)
      << over->content;
  auto grep = box_->execute(Context{}, code, ToolCall{"g", "grep", Json{{"pattern", "line"}}});
  ASSERT_TRUE(grep);
  EXPECT_TRUE(grep->is_error) << grep->content.substr(0, 200);
}

TEST_F(FilesToolbox, OffersTheSixTools) {
  auto specs = box_->list_tools(Context{});
  ASSERT_TRUE(specs);
  std::vector<std::string> names;
  for (const auto& s : *specs) names.push_back(s.name);
  EXPECT_THAT(names,
              ::testing::UnorderedElementsAre("bash", "read", "write", "edit", "glob", "grep"));
  auto only = host_.create_toolbox("files", Json{{"workspace", ws_.string()}, {"tools", {"read"}}});
  ASSERT_TRUE(only);
  EXPECT_EQ((*only)->list_tools(Context{})->size(), 1u);
  EXPECT_FALSE(host_.create_toolbox("files", Json{{"tools", {"rm"}}}));
}

TEST_F(FilesToolbox, ReadsInsideTheWorkspace) {
  auto r = call("read", Json{{"file_path", "hello.txt"}});
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_EQ(r.content, "hello world\nsecond line\nthird line\n");
  auto range =
      call("read", Json{{"file_path", (ws_ / "hello.txt").string()}, {"offset", 2}, {"limit", 1}});
  ASSERT_FALSE(range.is_error) << range.content;
  EXPECT_EQ(range.content, "second line\n");
}

TEST_F(FilesToolbox, ReadOutsideTheWorkspaceFails) {
  auto absolute = call("read", Json{{"file_path", (outside_ / "secret.txt").string()}});
  EXPECT_TRUE(absolute.is_error);
  EXPECT_THAT(absolute.content, Not(HasSubstr("OUTSIDE-SECRET")));
  auto relative = call("read", Json{{"file_path", "../outside/secret.txt"}});
  EXPECT_TRUE(relative.is_error);
  EXPECT_THAT(relative.content, Not(HasSubstr("OUTSIDE-SECRET")));
  // A symlink planted in the workspace doesn't help either.
  fs::create_symlink(outside_ / "secret.txt", ws_ / "link.txt");
  auto link = call("read", Json{{"file_path", "link.txt"}});
  EXPECT_TRUE(link.is_error);
  EXPECT_THAT(link.content, Not(HasSubstr("OUTSIDE-SECRET")));
  auto grep = call("grep", Json{{"pattern", "OUTSIDE"}, {"path", outside_.string()}});
  EXPECT_THAT(grep.content, Not(HasSubstr("OUTSIDE-SECRET")));
  auto bash = call("bash", Json{{"command", "cat " + (outside_ / "secret.txt").string()}});
  EXPECT_TRUE(bash.is_error);
  EXPECT_THAT(bash.content, Not(HasSubstr("OUTSIDE-SECRET")));
}

TEST_F(FilesToolbox, WriteAndEditStayInTheWorkspace) {
  auto w = call("write", Json{{"file_path", "new/dir/note.txt"}, {"content", "test content"}});
  ASSERT_FALSE(w.is_error) << w.content;
  EXPECT_THAT(w.content, HasSubstr("Wrote 12 bytes"));
  EXPECT_EQ(slurp(ws_ / "new/dir/note.txt"), "test content");

  auto e = call("edit",
                Json{{"file_path", "hello.txt"}, {"old_string", "line"}, {"new_string", "LINE"}});
  ASSERT_FALSE(e.is_error) << e.content;
  EXPECT_THAT(e.content, HasSubstr("2 occurrence(s)"));
  EXPECT_EQ(slurp(ws_ / "hello.txt"), "hello world\nsecond LINE\nthird line\n");
  auto all = call("edit", Json{{"file_path", "hello.txt"},
                               {"old_string", "l"},
                               {"new_string", "L"},
                               {"replace_all", true}});
  ASSERT_FALSE(all.is_error) << all.content;
  EXPECT_EQ(slurp(ws_ / "hello.txt"), "heLLo worLd\nsecond LINE\nthird Line\n");
  auto missing =
      call("edit", Json{{"file_path", "hello.txt"}, {"old_string", "absent"}, {"new_string", "x"}});
  EXPECT_TRUE(missing.is_error);
  EXPECT_THAT(missing.content, HasSubstr("not found"));

  auto outside =
      call("write", Json{{"file_path", (outside_ / "planted.txt").string()}, {"content", "x"}});
  EXPECT_TRUE(outside.is_error);
  EXPECT_FALSE(fs::exists(outside_ / "planted.txt"));
  auto edit_outside = call("edit", Json{{"file_path", (outside_ / "secret.txt").string()},
                                        {"old_string", "OUTSIDE"},
                                        {"new_string", "PWNED"}});
  EXPECT_TRUE(edit_outside.is_error);
  EXPECT_EQ(slurp(outside_ / "secret.txt"), "OUTSIDE-SECRET\n");
}

TEST_F(FilesToolbox, GlobAndGrepFindWorkspaceFiles) {
  auto g = call("glob", Json{{"pattern", "**/*.cpp"}});
  ASSERT_FALSE(g.is_error) << g.content;
  EXPECT_THAT(g.content, HasSubstr((ws_ / "src/a.cpp").string()));
  EXPECT_THAT(g.content, HasSubstr((ws_ / "src/deep/b.cpp").string()));
  EXPECT_EQ(call("glob", Json{{"pattern", "*.none"}}).content, "(no files matched)");
  // The pattern is only expanded, never executed.
  auto injected = call("glob", Json{{"pattern", "$(touch pwned)*"}});
  EXPECT_FALSE(fs::exists(ws_ / "pwned"));
  EXPECT_EQ(injected.content, "(no files matched)");

  auto hit = call("grep", Json{{"pattern", "need+le"}});
  ASSERT_FALSE(hit.is_error) << hit.content;
  EXPECT_THAT(hit.content, HasSubstr("src/deep/b.cpp:1:// needle here"));
  EXPECT_EQ(call("grep", Json{{"pattern", "absent-text"}}).content, "(no matches found)");
  auto option = call("grep", Json{{"pattern", "--version"}});
  EXPECT_THAT(option.content, Not(HasSubstr("GNU grep")));
  EXPECT_TRUE(call("grep", Json{{"pattern", std::string(1025, 'a')}}).is_error);
}

TEST_F(FilesToolbox, BashRunsInTheWorkspaceWithACleanEnvironment) {
  ::setenv("KERNEX_TEST_SECRET", "secret-must-not-leak", 1);
  auto r = call("bash", Json{{"command", "pwd; env"}});
  ::unsetenv("KERNEX_TEST_SECRET");
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_THAT(r.content, HasSubstr(ws_.string()));
  EXPECT_THAT(r.content, HasSubstr("PATH="));
  EXPECT_THAT(r.content, Not(HasSubstr("secret-must-not-leak")));
  auto fail = call("bash", Json{{"command", "echo oops >&2; exit 4"}});
  EXPECT_TRUE(fail.is_error);
  EXPECT_THAT(fail.content, HasSubstr("oops"));
  EXPECT_EQ(call("bash", Json{{"command", "exit 5"}}).content, "(exit code: 5)");
  EXPECT_THAT(call("bash", Json::object()).content, HasSubstr("required"));
  auto slow = call("bash", Json{{"command", "sleep 30"}, {"timeout_secs", 1}});
  EXPECT_TRUE(slow.is_error);
  EXPECT_THAT(slow.content, HasSubstr("timed out"));
}

TEST_F(FilesToolbox, EachRunWritesInItsOwnWorkspace) {
  TempDir a, b;
  for (const auto* dir : {&a, &b}) {
    Context run;
    run.workspace = dir->path();
    const std::string who = dir == &a ? "A" : "B";
    auto wrote = box_->execute(
        run, {}, ToolCall{"w", "write", Json{{"file_path", "notes/out.txt"}, {"content", who}}});
    ASSERT_TRUE(wrote);
    ASSERT_FALSE(wrote->is_error) << wrote->content;
    auto pwd = box_->execute(run, {}, ToolCall{"p", "bash", Json{{"command", "pwd; ls notes"}}});
    ASSERT_TRUE(pwd);
    EXPECT_EQ(pwd->content, fs::canonical(dir->path()).string() + "\nout.txt\n");
    // The configured workspace is out of reach of a run that has its own.
    auto other = box_->execute(
        run, {}, ToolCall{"r", "read", Json{{"file_path", (ws_ / "hello.txt").string()}}});
    ASSERT_TRUE(other);
    EXPECT_TRUE(other->is_error) << other->content;
  }
  EXPECT_EQ(slurp(a.path() / "notes/out.txt"), "A");
  EXPECT_EQ(slurp(b.path() / "notes/out.txt"), "B");
  EXPECT_FALSE(fs::exists(ws_ / "notes"));

  Context missing;
  missing.workspace = a.path() / "not-made";
  auto refused = box_->execute(missing, {}, ToolCall{"m", "bash", Json{{"command", "true"}}});
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->is_error);
  EXPECT_THAT(refused->content, HasSubstr("is not an existing directory"));
}

TEST_F(FilesToolbox, CancelKillsARunningBashCommandAndItsChildren) {
  ASSERT_EQ(::mkfifo((ws_ / "ready").c_str(), 0600), 0);
  std::stop_source source;
  Context run;
  run.stop = source.get_token();
  std::set<pid_t> groups;
  std::chrono::steady_clock::time_point stopped_at;
  std::thread canceller([&] {
    std::ifstream ready(ws_ / "ready");
    std::string word;
    ready >> word;
    groups = kernex::testing::groups_working_in(ws_);
    stopped_at = std::chrono::steady_clock::now();
    source.request_stop();
  });
  auto r = box_->execute(
      run, {}, ToolCall{"b", "bash", Json{{"command", "sleep 30 & echo go > ready; sleep 30"}}});
  const auto returned = std::chrono::steady_clock::now();
  if (int fd = ::open((ws_ / "ready").c_str(), O_WRONLY | O_NONBLOCK); fd >= 0) ::close(fd);
  canceller.join();
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->is_error);
  EXPECT_THAT(r->content, HasSubstr("bash was cancelled"));
  const double back = std::chrono::duration<double, std::milli>(returned - stopped_at).count();
  EXPECT_LT(back, 250.0);
  ASSERT_FALSE(groups.empty());
  EXPECT_TRUE(kernex::testing::groups_gone_by(groups, stopped_at + std::chrono::milliseconds(250)));
}

}  // namespace
