// `kernex run` leaves a trajectory that `kernex logs list|show|view` read back; the HTML page is
// opened in headless Chromium (Debian's chromium, installed by scripts/setup), which must render
// it with no console messages and take a screenshot whose pixels show the waterfall's bars.
#include <gtest/gtest.h>

#include <png.h>

#include <cstdint>
#include <filesystem>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

using kernex::Json;
using Outcome = kernex::testing::CliOutcome;

const std::string kChromium = "/usr/bin/chromium";

// The waterfall's fills (trajectory_view/src/waterfall_svg.cpp) as 0xRRGGBB.
constexpr std::uint32_t kRunFill = 0x9aa5b1, kModelFill = 0x3b5bdb, kCodeFill = 0x2f9e44,
                        kToolFill = 0xae3ec9, kSubQueryFill = 0xe8590c, kInputFill = 0x1c7ed6,
                        kOutputFill = 0x74c0fc, kCostFill = 0xf59f00;
constexpr std::size_t kLegendSwatch = 12 * 12;  // each colour's square in the legend

// A PNG's pixels as RGB, decoded with libpng's simplified API; empty when it is no PNG.
struct Pixels {
  png_uint_32 width = 0, height = 0;
  std::vector<std::uint8_t> rgb;

  static Pixels read(const fs::path& file) {
    Pixels p;
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&image, file.c_str())) return p;
    image.format = PNG_FORMAT_RGB;
    p.rgb.resize(PNG_IMAGE_SIZE(image));
    if (!png_image_finish_read(&image, nullptr, p.rgb.data(), 0, nullptr)) {
      png_image_free(&image);
      return {};
    }
    p.width = image.width;
    p.height = image.height;
    return p;
  }
  std::size_t count(std::uint32_t colour) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i + 2 < rgb.size(); i += 3) {
      n += (std::uint32_t{rgb[i]} << 16 | std::uint32_t{rgb[i + 1]} << 8 | rgb[i + 2]) == colour;
    }
    return n;
  }
};

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

  fs::path view_last(const std::string& name) {
    const fs::path html = dir_ / name;
    auto view =
        kernex({"logs", "view", "last", "--html", html.string(), "--data-dir", data_.string()});
    EXPECT_EQ(view.exit_code, 0) << view.err;
    return html;
  }
  Outcome browse(const fs::path& html, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"60",
                                  kChromium,
                                  "--headless",
                                  "--no-sandbox",
                                  "--disable-gpu",
                                  "--disable-quic",
                                  "--no-first-run",
                                  "--disable-background-networking",
                                  "--disable-component-update",
                                  "--disable-sync",
                                  "--user-data-dir=" + (dir_ / "chromium-profile").string(),
                                  "--enable-logging=stderr",
                                  "--v=0",
                                  "--window-size=1280,2000"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("file://" + html.string());
    return kernex::testing::run_program("/usr/bin/timeout", dir_.path(), env_, args);
  }
  // A screenshot of the page, also kept for people to look at: build/.../Testing/<keep_as>.
  Pixels screenshot(const fs::path& html, const std::string& keep_as) {
    const fs::path shot = dir_ / keep_as;
    auto taken = browse(html, {"--screenshot=" + shot.string()});
    EXPECT_EQ(taken.exit_code, 0) << taken.err;
    EXPECT_EQ(taken.err.find("CONSOLE"), std::string::npos) << taken.err;
    std::error_code ec;
    fs::copy_file(shot, fs::path(KERNEX_BINARY_DIR) / "Testing" / keep_as,
                  fs::copy_options::overwrite_existing, ec);
    Pixels pixels = Pixels::read(shot);
    EXPECT_EQ(pixels.width, 1280u);
    return pixels;
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
  if (!fs::exists(kChromium))
    GTEST_SKIP() << "Debian's chromium is not installed (scripts/setup installs it)";
  ASSERT_EQ(run_once().exit_code, 0);
  const fs::path html = view_last("run.html");
  const std::string page = kernex::testing::slurp(html);
  EXPECT_EQ(page.find("<script"), std::string::npos);  // the model's text is escaped, not run
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);

  auto dom = browse(html, {"--dump-dom"});
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  EXPECT_NE(dom.out.find("Sub-call tree"), std::string::npos);
  EXPECT_NE(dom.out.find("word_count"), std::string::npos);
  EXPECT_NE(dom.out.find("<svg"), std::string::npos);  // the charts
  EXPECT_NE(dom.out.find("aria-label=\"span waterfall\""), std::string::npos);
  EXPECT_EQ(dom.err.find("CONSOLE"), std::string::npos) << dom.err;

  const Pixels shot = screenshot(html, "logs-view.png");
  // The run's own bar spans the whole time track; the two model calls' tokens are bars too.
  EXPECT_GT(shot.count(kRunFill), kLegendSwatch + 3000);
  EXPECT_GT(shot.count(kInputFill), kLegendSwatch + 300);
  EXPECT_GT(shot.count(kOutputFill), kLegendSwatch + 60);
  EXPECT_GT(shot.count(kModelFill), kLegendSwatch);
  EXPECT_GT(shot.count(kToolFill), kLegendSwatch);
}

// A run with code that called tools and with sub-queries, written by hand with hostile names,
// drawn with a bar of every kind, each much larger than its swatch in the legend.
TEST_F(CliLogs, WaterfallOfCodeToolsAndSubQueriesIsDrawnInHeadlessChromium) {
  if (!fs::exists(kChromium))
    GTEST_SKIP() << "Debian's chromium is not installed (scripts/setup installs it)";
  const double t0 = 1'700'000'000'000.0;
  const std::vector<Json> events = {
      {{"type", "run_start"}, {"seq", 1}, {"ts_ms", t0}, {"question", "q"}, {"kind", "run"}},
      {{"type", "provider_call"},
       {"seq", 2},
       {"ts_ms", t0 + 200},
       {"span", "0"},
       {"model", "\"><img src=x onerror=alert(2)>"},
       {"latency_ms", 200},
       {"input_tokens", 900},
       {"output_tokens", 300},
       {"cost_usd", 0.004}},
      {{"type", "tool_call"},
       {"seq", 3},
       {"ts_ms", t0 + 450},
       {"span", "0"},
       {"name", "</svg><script>alert(1)</script>"},
       {"duration_ms", 150},
       {"code_run", "c1"}},
      {{"type", "tool_call"},
       {"seq", 4},
       {"ts_ms", t0 + 650},
       {"span", "0"},
       {"name", "grep"},
       {"duration_ms", 150},
       {"code_run", "c1"}},
      {{"type", "code_run"},
       {"seq", 5},
       {"ts_ms", t0 + 700},
       {"span", "0"},
       {"id", "c1"},
       {"code", "print(tools.grep())\x01"},
       {"wall_ms", 450}},
      {{"type", "provider_call"},
       {"seq", 6},
       {"ts_ms", t0 + 800},
       {"span", "0.1"},
       {"model", "m"},
       {"latency_ms", 70},
       {"input_tokens", 400},
       {"output_tokens", 100},
       {"cost_usd", 0.002}},
      {{"type", "sub_call"},
       {"seq", 7},
       {"ts_ms", t0 + 950},
       {"span", "0.1"},
       {"kind", "rlm_query"},
       {"prompt", "dig"},
       {"latency_ms", 230},
       {"input_tokens", 400},
       {"output_tokens", 100},
       {"cost_usd", 0.002}},
      {{"type", "provider_call"},
       {"seq", 8},
       {"ts_ms", t0 + 1000},
       {"span", "0"},
       {"model", "m"},
       {"latency_ms", 100},
       {"input_tokens", 1000},
       {"output_tokens", 200},
       {"cost_usd", 0.005}},
      {{"type", "run_end"},
       {"seq", 9},
       {"ts_ms", t0 + 1000},
       {"latency_ms", 1000},
       {"outcome", "end_turn"}},
  };
  std::string jsonl;
  for (const auto& e : events) jsonl += e.dump() + "\n";
  dir_.write("data/trajectories/20260101T000000Z-000001.jsonl", jsonl);
  const fs::path html = view_last("hand.html");
  const std::string page = kernex::testing::slurp(html);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);

  auto dom = browse(html, {"--dump-dom"});
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  EXPECT_EQ(dom.err.find("CONSOLE"), std::string::npos) << dom.err;
  const Pixels shot = screenshot(html, "logs-view-waterfall.png");
  // Bars of 0.15 s and more are at least 81 px by 12 on the 540 px track of 1 s.
  for (const std::uint32_t fill : {kRunFill, kModelFill, kCodeFill, kToolFill, kSubQueryFill,
                                   kInputFill, kOutputFill, kCostFill}) {
    EXPECT_GT(shot.count(fill), kLegendSwatch + 300) << std::hex << fill;
  }
}

}  // namespace
