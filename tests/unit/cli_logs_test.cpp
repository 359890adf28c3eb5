// `kernex run` leaves a trajectory that `kernex logs list|show|view` read back; the HTML page is
// opened in headless Chromium (Debian's chromium, installed by scripts/setup), which must render
// it with no console messages and take a screenshot.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

using kernex::Json;
using Outcome = kernex::testing::CliOutcome;

class CliLogs : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_.erase("KERNEX_DATA_DIR");
    data_ = dir_ / "data";
    const std::string call =
        Json{{"tool_calls",
              {{{"id", "c1"}, {"name", "word_count"}, {"arguments", {{"text", "a <b> & c"}}}}}},
             {"usage", {{"input_tokens", 40}, {"output_tokens", 8}}}}
            .dump();
    const std::string answer = Json{{"text", "Three </pre><script>alert(1)</script> words."},
                                    {"usage", {{"input_tokens", 60}, {"output_tokens", 9}}}}
                                   .dump();
    script_ = dir_.write("script.jsonl", call + "\n" + answer + "\n");
  }
  Outcome kernex(const std::vector<std::string>& args) {
    return kernex::testing::run_cli(dir_.path(), env_, args);
  }
  Outcome run_once() {
    return kernex({"run", "--provider", "replay", "--provider-opt", "script=" + script_.string(),
                   "--data-dir", data_.string(), "--json", "count the words"});
  }

  kernex::testing::TempDir dir_;
  std::map<std::string, std::string> env_;
  fs::path data_, script_;
};

TEST_F(CliLogs, RunIsListedShownAndViewed) {
  auto run = run_once();
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string run_id = Json::parse(run.out)["run_id"];
  ASSERT_FALSE(run_id.empty());

  auto list = kernex({"logs", "list", "--data-dir", data_.string(), "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  Json runs = Json::parse(list.out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["run_id"], run_id);
  EXPECT_EQ(runs[0]["outcome"], "end_turn");
  EXPECT_EQ(runs[0]["input_tokens"], 100);

  auto text = kernex({"logs", "show", run_id.substr(0, 18), "--data-dir", data_.string()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("tool_call 0 word_count"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("run_end end_turn"), std::string::npos) << text.out;

  auto jsonl = kernex({"logs", "show", "last", "--json", "--data-dir", data_.string()});
  ASSERT_EQ(jsonl.exit_code, 0) << jsonl.err;
  std::vector<std::string> types;
  std::istringstream lines(jsonl.out);
  for (std::string line; std::getline(lines, line);) types.push_back(Json::parse(line)["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"run_start", "provider_call", "tool_call",
                                             "provider_call", "run_end"}));

  auto missing = kernex({"logs", "show", "19990101", "--data-dir", data_.string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no run '19990101'"), std::string::npos) << missing.err;
}

TEST_F(CliLogs, HtmlPageRendersInHeadlessChromiumWithoutConsoleErrors) {
  const std::string chromium = "/usr/bin/chromium";
  if (!fs::exists(chromium))
    GTEST_SKIP() << "Debian's chromium is not installed (scripts/setup installs it)";
  ASSERT_EQ(run_once().exit_code, 0);
  const fs::path html = dir_ / "run.html";
  auto view =
      kernex({"logs", "view", "last", "--html", html.string(), "--data-dir", data_.string()});
  ASSERT_EQ(view.exit_code, 0) << view.err;
  const std::string page = kernex::testing::slurp(html);
  EXPECT_EQ(page.find("<script"), std::string::npos);  // the model's text is escaped, not run
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);

  const fs::path profile = dir_ / "chromium-profile";
  const fs::path shot = dir_ / "run.png";
  const std::vector<std::string> common{"--headless",
                                        "--no-sandbox",
                                        "--disable-gpu",
                                        "--disable-quic",
                                        "--no-first-run",
                                        "--disable-background-networking",
                                        "--disable-component-update",
                                        "--disable-sync",
                                        "--user-data-dir=" + profile.string(),
                                        "--enable-logging=stderr",
                                        "--v=0",
                                        "--window-size=1280,2000"};
  auto browse = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"60", chromium};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("file://" + html.string());
    return kernex::testing::run_program("/usr/bin/timeout", dir_.path(), env_, args);
  };
  auto dom = browse({"--dump-dom"});
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  EXPECT_NE(dom.out.find("Sub-call tree"), std::string::npos);
  EXPECT_NE(dom.out.find("word_count"), std::string::npos);
  EXPECT_NE(dom.out.find("<svg"), std::string::npos);  // the charts
  EXPECT_EQ(dom.err.find("CONSOLE"), std::string::npos) << dom.err;

  auto screenshot = browse({"--screenshot=" + shot.string()});
  ASSERT_EQ(screenshot.exit_code, 0) << screenshot.err;
  EXPECT_EQ(screenshot.err.find("CONSOLE"), std::string::npos) << screenshot.err;
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_EQ(kernex::testing::slurp(shot).substr(1, 3), "PNG");
  EXPECT_GT(fs::file_size(shot), 10'000u);  // a rendered page, not a blank
  // Kept for people to look at: build/.../Testing/logs-view.png
  std::error_code ec;
  fs::copy_file(shot, fs::path(KERNEX_BINARY_DIR) / "Testing" / "logs-view.png",
                fs::copy_options::overwrite_existing, ec);
}

}  // namespace
