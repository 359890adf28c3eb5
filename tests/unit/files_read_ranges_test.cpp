// The files toolbox's `read` with offset/limit, served from the file the sandboxed opener hands
// over (plugins/toolbox-files/line_range.hpp) instead of a `sed -n 'first,lastp'` per read: the
// same bytes as that sed, for the model and for code, whatever the file holds and whatever the
// arguments say, and bounded when the file is hostile (huge, growing, shrinking, not a file).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex;
using kernex::testing::TempDir;
using ::testing::HasSubstr;

namespace {

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// What the host's own sed prints for the range read used to run in the sandbox.
std::string sed_range(const fs::path& file, const std::string& range) {
  const std::string command = "sed -n '" + range + "p' -- '" + file.string() + "'";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "<popen failed>";
  std::string out;
  char buffer[65536];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

class FilesReadRanges : public ::testing::Test {
 protected:
  void SetUp() override {
    ws_ = fs::canonical(root_.path()) / "ws";
    fs::create_directories(ws_);
    host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
    box_ = make_box(20);
    code_.code_result_max_bytes = 64u << 20;
  }

  std::shared_ptr<ToolExecutor> make_box(int timeout_secs) {
    auto box =
        host_.create_toolbox("files", Json{{"workspace", ws_.string()}, {"timeout", timeout_secs}});
    EXPECT_TRUE(box) << box.error().describe();
    return box ? *box : nullptr;
  }

  ToolResult read(Json args, const RunHandles& run, ToolExecutor* box = nullptr) {
    auto r = (box != nullptr ? box : box_.get())
                 ->execute(Context{}, run, ToolCall{"r", "read", std::move(args)});
    EXPECT_TRUE(r) << (r ? "" : r.error().describe());
    return r ? *r : ToolResult{};
  }

  static Json range_args(const std::string& file, std::optional<std::int64_t> offset,
                         std::optional<std::int64_t> limit) {
    Json args = {{"file_path", file}};
    if (offset) args["offset"] = *offset;
    if (limit) args["limit"] = *limit;
    return args;
  }

  // Both ways give sed's bytes for `range`: the model (short outputs: whole) and code (always).
  void same_as_sed(const std::string& name, std::optional<std::int64_t> offset,
                   std::optional<std::int64_t> limit, const std::string& range) {
    const std::string expected = sed_range(ws_ / name, range);
    const auto code = read(range_args(name, offset, limit), code_);
    ASSERT_FALSE(code.is_error) << name << " " << range << ": " << code.content.substr(0, 200);
    ASSERT_TRUE(code.structured.is_object()) << name << " " << range;
    EXPECT_EQ(code.structured["content"].get<std::string>(), expected) << name << " " << range;
    std::size_t lines =
        static_cast<std::size_t>(std::count(expected.begin(), expected.end(), '\n'));
    if (!expected.empty() && expected.back() != '\n') ++lines;
    EXPECT_EQ(code.structured["lines"], lines) << name << " " << range;
    const auto model = read(range_args(name, offset, limit), {});
    ASSERT_FALSE(model.is_error) << name << " " << range << ": " << model.content.substr(0, 200);
    if (expected.size() <= 30000) {
      EXPECT_EQ(model.content, expected) << name << " " << range;
    } else {
      EXPECT_THAT(model.content, HasSubstr("(output truncated: " + std::to_string(expected.size()) +
                                           " total bytes"));
    }
  }

  TempDir root_;
  fs::path ws_;
  PluginHost host_;
  std::shared_ptr<ToolExecutor> box_;
  RunHandles code_;
};

// Every shape of file against every kind of range, byte for byte as sed printed them: no final
// newline, empty lines, CRLF, NUL and invalid UTF-8, one line longer than a read slice, and many
// short lines across the slices (256 KiB each).
TEST_F(FilesReadRanges, EveryRangeIsWhatSedPrinted) {
  write_file(ws_ / "plain.txt", "one\ntwo\nthree\n");
  write_file(ws_ / "no-final-newline.txt", "one\ntwo\nthree");
  write_file(ws_ / "empty.txt", "");
  write_file(ws_ / "blank-lines.txt", "\n\n\nx\n\n");
  write_file(ws_ / "crlf.txt", "a\r\nb\r\nc\r\n");
  std::string binary;
  for (int i = 0; i < 3000; ++i) binary.push_back(static_cast<char>(i * 7 % 256));
  write_file(ws_ / "binary.bin", binary);
  write_file(ws_ / "bad-utf8.txt", "caf\xc3\nx\xff\xfe\n\xe2\x82\n\xe2\x82\xac end");
  write_file(ws_ / "long-line.txt", "first\n" + std::string(700 * 1024, 'L') + "\nlast\n");
  std::string many;
  for (int i = 1; i <= 120000; ++i) many += "line " + std::to_string(i) + "\n";
  write_file(ws_ / "many.txt", many);

  for (const char* name : {"plain.txt", "no-final-newline.txt", "empty.txt", "blank-lines.txt",
                           "crlf.txt", "binary.bin", "bad-utf8.txt", "long-line.txt"}) {
    same_as_sed(name, 1, 1, "1,1");
    same_as_sed(name, 2, 2, "2,3");
    same_as_sed(name, 3, std::nullopt, "3,$");
    same_as_sed(name, std::nullopt, 2, "1,2");
    same_as_sed(name, 0, 0, "1,1");  // offset 0 is line 1; limit 0 gives one line, as before
    same_as_sed(name, 3, 1000, "3,1002");
    same_as_sed(name, 50, 5, "50,54");  // past the end: nothing, and no error
  }
  same_as_sed("many.txt", 1, 10, "1,10");
  same_as_sed("many.txt", 30000, 3, "30000,30002");  // inside the second slice
  same_as_sed("many.txt", 23832, 2, "23832,23833");  // around the first slice's end
  same_as_sed("many.txt", 100000, std::nullopt, "100000,$");
  same_as_sed("many.txt", 119999, 100, "119999,120098");
  same_as_sed("many.txt", 2, 119998, "2,119999");
  same_as_sed("long-line.txt", 2, 1, "2,2");
}

// Arguments the model or code may send: an offset or limit that is negative, not a number, a
// fraction or huge reads as before (the bad ones ignored, the huge ones past the end), never an
// overflow, a crash or a hang.
TEST_F(FilesReadRanges, HostileArgumentsReadAsBefore) {
  write_file(ws_ / "f.txt", "a\nb\nc\n");
  auto content = [&](Json args) {
    args["file_path"] = "f.txt";
    auto r = read(std::move(args), {});
    EXPECT_FALSE(r.is_error) << r.content;
    return r.content;
  };
  EXPECT_EQ(content({{"offset", -1}}), "a\nb\nc\n");  // ignored: a whole read
  EXPECT_EQ(content({{"offset", -5}, {"limit", 1}}), "a\n");
  EXPECT_EQ(content({{"offset", "2"}, {"limit", "1"}}), "a\nb\nc\n");
  EXPECT_EQ(content({{"offset", 2.5}, {"limit", 1}}), "a\n");
  EXPECT_EQ(content({{"offset", 2}, {"limit", nullptr}}), "b\nc\n");
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(content({{"offset", huge}}), "");
  EXPECT_EQ(content({{"offset", huge}, {"limit", huge}}), "");
  EXPECT_EQ(content({{"offset", 2}, {"limit", huge}}), "b\nc\n");
  EXPECT_EQ(content({{"offset", std::numeric_limits<std::uint64_t>::max()}, {"limit", 1}}), "a\n");
}

// A range past the code's cap fails and says so (never cut); the model's view of a long range is
// cut with the note every long output has.
TEST_F(FilesReadRanges, ALongRangeIsCutForTheModelAndRefusedPastTheCodesCap) {
  std::string big;
  for (int i = 0; i < 20000; ++i) big += "row " + std::to_string(i) + " of many\n";
  write_file(ws_ / "big.txt", big);
  auto model = read({{"file_path", "big.txt"}, {"offset", 2}}, {});
  ASSERT_FALSE(model.is_error) << model.content.substr(0, 200);
  const std::size_t total = big.size() - std::string("row 0 of many\n").size();
  EXPECT_THAT(model.content, HasSubstr("(output truncated: " + std::to_string(total) +
                                       " total bytes, showing first 30000)"));
  EXPECT_EQ(model.content.substr(0, 14), "row 1 of many\n");

  RunHandles small;
  small.code_result_max_bytes = 100;
  auto over = read({{"file_path", "big.txt"}, {"offset", 2}, {"limit", 50}}, small);
  EXPECT_TRUE(over.is_error);
  EXPECT_THAT(over.content, HasSubstr("larger than 100 bytes (repl.tool_result_max_bytes)"));
  auto fits = read({{"file_path", "big.txt"}, {"offset", 2}, {"limit", 3}}, small);
  ASSERT_FALSE(fits.is_error) << fits.content;
  EXPECT_EQ(fits.structured, (Json{{"content", "row 1 of many\nrow 2 of many\nrow 3 of many\n"},
                                   {"lines", 3},
                                   {"truncated", false}}));
}

// What is not a regular file is refused at once (a FIFO blocked sed until the timeout), and
// what the sandbox can't read gives the error it always gave.
TEST_F(FilesReadRanges, NotAFileIsRefusedAndMissingFilesSaySo) {
  ASSERT_EQ(::mkfifo((ws_ / "pipe").c_str(), 0600), 0);
  for (const bool from_code : {true, false}) {
    auto fifo = read({{"file_path", "pipe"}, {"offset", 1}, {"limit", 1}},
                     from_code ? code_ : RunHandles{});
    EXPECT_TRUE(fifo.is_error);
    EXPECT_THAT(fifo.content, HasSubstr("a FIFO, not a regular file"));
    auto device =
        read({{"file_path", "/dev/zero"}, {"offset", 2}}, from_code ? code_ : RunHandles{});
    EXPECT_TRUE(device.is_error);
    EXPECT_THAT(device.content, HasSubstr("not a regular file"));
  }
  auto missing = read({{"file_path", "absent.txt"}, {"offset", 1}, {"limit", 1}}, {});
  EXPECT_TRUE(missing.is_error);
  EXPECT_THAT(missing.content, HasSubstr("Error reading " + (ws_ / "absent.txt").string()));
  EXPECT_THAT(missing.content, HasSubstr("No such file"));
}

// A 1 TiB sparse file with no newline: a range past its first line reads until the profile's
// timeout, as sed ran until it, and says so.
TEST_F(FilesReadRanges, AHugeFileEndsAtTheTimeout) {
  {
    std::ofstream(ws_ / "huge.bin");
    fs::resize_file(ws_ / "huge.bin", std::uintmax_t{1} << 40);
  }
  auto quick = make_box(1);
  ASSERT_TRUE(quick);
  for (const bool from_code : {true, false}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = read({{"file_path", "huge.bin"}, {"offset", 2}, {"limit", 1}},
                  from_code ? code_ : RunHandles{}, quick.get());
    EXPECT_TRUE(r.is_error);
    EXPECT_THAT(r.content,
                HasSubstr("Error reading " + (ws_ / "huge.bin").string() + ": timed out"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  }
}

// The file grows and shrinks while ranges are read from it: every read ends, and what it gives
// is only ever what the file held, never more lines than asked for.
TEST_F(FilesReadRanges, AFileChangingUnderneathGivesWholeLinesAndEnds) {
  const fs::path file = ws_ / "moving.txt";
  write_file(file, "");
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int round = 0; !done; ++round) {
      {
        std::ofstream out(file, std::ios::binary | std::ios::app);
        for (int i = 0; i < 2000; ++i) out << "entry " << i << " of a line\n";
      }
      if (round % 3 == 2) fs::resize_file(file, 0);
    }
  });
  int reads = 0;
  for (int i = 0; i < 60; ++i) {
    auto r = read({{"file_path", "moving.txt"}, {"offset", 1 + i * 100}, {"limit", 500}}, code_);
    ASSERT_FALSE(r.is_error) << r.content.substr(0, 200);
    const std::string text = r.structured["content"].get<std::string>();
    EXPECT_LE(r.structured["lines"].get<std::size_t>(), 500u);
    // A truncation mid-read may splice two lines' pieces; nothing else ever appears.
    EXPECT_EQ(text.find_first_not_of("entry 0123456789ofaline\n"), std::string::npos) << text;
    ++reads;
  }
  done = true;
  writer.join();
  EXPECT_EQ(reads, 60);
}

}  // namespace
