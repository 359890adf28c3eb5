// Attacks on the files toolbox's `read`, whose whole-file reads are opened by a long-lived process
// in the toolbox's sandbox and read by the kernel from the fd it hands over
// (plugins/toolbox-files/sandboxed_opener.hpp): the kernel must never read what a sandboxed `cat`
// could not, and nothing the sandbox places there may hang or crash it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex;
using kernex::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

constexpr const char* kSecret = "OUTSIDE-SECRET";

class FilesReadAttacks : public ::testing::Test {
 protected:
  void SetUp() override {
    ws_ = fs::canonical(root_.path()) / "ws";
    outside_ = fs::canonical(root_.path()) / "outside";
    fs::create_directories(ws_ / "sub");
    fs::create_directories(outside_);
    std::ofstream(ws_ / "plain.txt") << "plain text\n";
    std::ofstream(outside_ / "secret.txt") << kSecret << "\n";
    host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
    auto box = host_.create_toolbox("files", Json{{"workspace", ws_.string()}, {"timeout", 20}});
    ASSERT_TRUE(box) << box.error().describe();
    box_ = *box;
    code_.code_result_max_bytes = 1u << 20;
  }

  // A read as the model makes it, and as code does (whole, structured).
  ToolResult model_read(const std::string& path) { return read(path, {}); }
  ToolResult code_read(const std::string& path) { return read(path, code_); }
  ToolResult read(const std::string& path, const RunHandles& run, Json extra = Json::object()) {
    extra["file_path"] = path;
    auto r = box_->execute(Context{}, run, ToolCall{"r", "read", std::move(extra)});
    EXPECT_TRUE(r) << (r ? "" : r.error().describe());
    return r ? *r : ToolResult{};
  }

  // Neither way gives the secret, and both fail.
  void refused_both_ways(const std::string& path) {
    for (const auto& r : {model_read(path), code_read(path)}) {
      EXPECT_TRUE(r.is_error) << path << ": " << r.content.substr(0, 200);
      EXPECT_THAT(r.content, Not(HasSubstr(kSecret))) << path;
      EXPECT_THAT(r.structured.dump(), Not(HasSubstr(kSecret))) << path;
    }
  }

  TempDir root_;
  fs::path ws_, outside_;
  PluginHost host_;
  std::shared_ptr<ToolExecutor> box_;
  RunHandles code_;
};

TEST_F(FilesReadAttacks, AWholeReadStillGivesTheFileBothWays) {
  EXPECT_EQ(model_read("plain.txt").content, "plain text\n");
  auto r = code_read("plain.txt");
  ASSERT_FALSE(r.is_error) << r.content;
  EXPECT_EQ(r.structured, (Json{{"content", "plain text\n"}, {"lines", 1}, {"truncated", false}}));
  // Again: the opener is kept, and its previous file closed, between reads.
  std::ofstream(ws_ / "plain.txt") << "changed\n";
  EXPECT_EQ(code_read("plain.txt").structured["content"], "changed\n");
}

TEST_F(FilesReadAttacks, SymlinksAndDotDotOutOfTheWorkspaceAreRefused) {
  fs::create_symlink(outside_ / "secret.txt", ws_ / "link.txt");
  fs::create_symlink(outside_, ws_ / "sub" / "dirlink");
  fs::create_symlink("../../outside/secret.txt", ws_ / "sub" / "relative.txt");
  refused_both_ways("link.txt");
  refused_both_ways("sub/dirlink/secret.txt");
  refused_both_ways("sub/relative.txt");
  refused_both_ways("../outside/secret.txt");
  refused_both_ways("sub/../../outside/secret.txt");
  refused_both_ways((outside_ / "secret.txt").string());
}

// A read by lines (offset/limit) takes the same sandboxed opener as a whole read (line_range.hpp):
// the same escapes are refused, for the model and for code.
TEST_F(FilesReadAttacks, ReadsByLinesOutOfTheWorkspaceAreRefused) {
  fs::create_symlink(outside_ / "secret.txt", ws_ / "link.txt");
  fs::create_symlink(outside_, ws_ / "sub" / "dirlink");
  const Json ranges[] = {{{"offset", 1}, {"limit", 5}}, {{"offset", 1}}, {{"limit", 1}}};
  const std::string paths[] = {"link.txt", "sub/dirlink/secret.txt", "../outside/secret.txt",
                               (outside_ / "secret.txt").string()};
  for (const std::string& path : paths) {
    for (const Json& range : ranges) {
      for (const auto& r : {read(path, {}, range), read(path, code_, range)}) {
        EXPECT_TRUE(r.is_error) << path << " " << range.dump() << ": " << r.content.substr(0, 200);
        EXPECT_THAT(r.content, Not(HasSubstr(kSecret))) << path << " " << range.dump();
        EXPECT_THAT(r.structured.dump(), Not(HasSubstr(kSecret))) << path << " " << range.dump();
      }
    }
  }
}

// A FIFO would block a reader forever: refused at once, from code and for the model.
TEST_F(FilesReadAttacks, AFifoIsRefusedAtOnce) {
  ASSERT_EQ(::mkfifo((ws_ / "pipe").c_str(), 0600), 0);
  for (const auto& r : {model_read("pipe"), code_read("pipe")}) {
    EXPECT_TRUE(r.is_error);
    EXPECT_THAT(r.content, HasSubstr("a FIFO, not a regular file")) << r.content;
  }
}

TEST_F(FilesReadAttacks, DevicesAreRefused) {
  for (const auto& r : {model_read("/dev/zero"), code_read("/dev/zero")}) {
    EXPECT_TRUE(r.is_error);
    EXPECT_THAT(r.content, HasSubstr("not a regular file")) << r.content.substr(0, 200);
  }
}

// /proc answers per reader: the kernel never reads it for the sandbox. Whatever the sandbox
// itself may read there, the kernel's own environment never comes back.
TEST_F(FilesReadAttacks, ProcPathsNeverShowTheKernelsOwnState) {
  ::setenv("KERNEX_ATTACK_MARKER", "kernel-env-marker-7731", 1);
  const std::string me = "/proc/" + std::to_string(::getpid());
  for (const std::string& path :
       {me + "/environ", me + "/cmdline", std::string("/proc/self/environ"),
        std::string("/proc/1/environ"), me + "/root/etc/hostname"}) {
    for (const auto& r : {model_read(path), code_read(path)}) {
      EXPECT_THAT(r.content, Not(HasSubstr("kernel-env-marker-7731"))) << path;
      EXPECT_THAT(r.structured.dump(), Not(HasSubstr("kernel-env-marker-7731"))) << path;
    }
  }
  ::unsetenv("KERNEX_ATTACK_MARKER");
}

// The name flips between a file and a symlink out of the workspace while reads go on: each read
// gives the file or an error, never the secret (the open happens in the sandbox, so there is no
// check in the kernel for a swap to slip between).
TEST_F(FilesReadAttacks, AFileSwappedForASymlinkMidReadNeverGivesTheSecret) {
  std::atomic<bool> done{false};
  std::thread swapper([&] {
    const fs::path name = ws_ / "swap.txt", file = ws_ / "swap.file", link = ws_ / "swap.link";
    std::error_code ec;
    for (int i = 0; !done; ++i) {
      std::ofstream(file) << "inside\n";
      fs::create_symlink(outside_ / "secret.txt", link, ec);
      fs::rename(i % 2 ? file : link, name, ec);
    }
  });
  int files = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = code_read("swap.txt");
    EXPECT_THAT(r.content, Not(HasSubstr(kSecret)));
    EXPECT_THAT(r.structured.dump(), Not(HasSubstr(kSecret)));
    if (!r.is_error) ++files;
  }
  done = true;
  swapper.join();
  EXPECT_GT(files, 0);  // the race was real: some reads found the file
}

// Past the code's cap a read fails and says so; a sparse file reports a size it never reads.
TEST_F(FilesReadAttacks, AFilePastTheCodesCapFailsSayingSo) {
  {
    std::ofstream(ws_ / "huge.bin");
    fs::resize_file(ws_ / "huge.bin", std::uintmax_t{1} << 40);  // 1 TiB, sparse
  }
  code_.code_result_max_bytes = 4096;
  auto r = code_read("huge.bin");
  EXPECT_TRUE(r.is_error);
  EXPECT_THAT(r.content, HasSubstr("larger than 4096 bytes (repl.tool_result_max_bytes)"));
  std::ofstream(ws_ / "just.txt") << std::string(4096, 'x');
  auto at_cap = code_read("just.txt");
  ASSERT_FALSE(at_cap.is_error) << at_cap.content;
  EXPECT_EQ(at_cap.structured["content"].get<std::string>().size(), 4096u);
  std::ofstream(ws_ / "over.txt") << std::string(4097, 'x');
  EXPECT_TRUE(code_read("over.txt").is_error);
}

// Many concurrent reads: each gets its own file whole (a busy opener sends the others the slow
// way), and none waits on another.
TEST_F(FilesReadAttacks, ConcurrentReadsEachGetTheirFile) {
  for (int i = 0; i < 8; ++i)
    std::ofstream(ws_ / ("f" + std::to_string(i))) << "file " << i << "\n";
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 5; ++k) {
        auto r = box_->execute(Context{}, code_,
                               ToolCall{"r", "read", Json{{"file_path", "f" + std::to_string(i)}}});
        if (r && !r->is_error && r->structured["content"] == "file " + std::to_string(i) + "\n")
          ++right;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(right.load(), 40);
}

}  // namespace
