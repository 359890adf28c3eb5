// workspace_accept: Overlay::accept of 1 000 changed small files (20 directories × 50 files of
// ~100 bytes) beside two baselines on the same files in the same run:
//   - write+rename: for each file a temp file written beside it and renamed over it, one syncfs
//     for the batch and an fsync per directory (the durability accept gives);
//   - cp: `cp -r upper/. real/` (no fsync at all, no checks: a floor).
// The upper layer is written the way overlayfs leaves a modified file (a copy-up with the new
// bytes, the directories copied up with their modes), so no mount is needed. Both trees are
// synced to disk before each timing, as a project's files and a finished session's layer are:
// freeing a file's blocks costs more once they are allocated. Target: ≤ 1 s. accept leaves the
// replaced old files in a trash removed after it returns: the second row adds that removal.
// Usage: workspace_accept [ROUNDS] (default 5). Prints the median and min of each, in ms.
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "kernex/workspace/overlay.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace kernex::bench;

constexpr int kDirs = 20;
constexpr int kFilesPerDir = 50;

std::string rel_path(int d, int f) {
  return "dir" + std::to_string(d) + "/file" + std::to_string(f) + ".txt";
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// A real tree of 1 000 files and, in `upper`, a changed copy of each.
void make_trees(const fs::path& real, const fs::path& upper) {
  for (int d = 0; d < kDirs; ++d) {
    fs::create_directories(real / ("dir" + std::to_string(d)));
    if (!upper.empty()) fs::create_directories(upper / ("dir" + std::to_string(d)));
    for (int f = 0; f < kFilesPerDir; ++f) {
      const std::string body = "line one of " + rel_path(d, f) + "\nline two stays the same\n" +
                               std::string(40, 'x') + "\n";
      write(real / rel_path(d, f), body);
      if (!upper.empty()) write(upper / rel_path(d, f), body + "a line the session added\n");
    }
  }
}

struct AcceptTimes {
  double accept_ms;  // Overlay::accept returning
  double whole_ms;   // and the Overlay destroyed: its trash (the replaced old files) removed
};

AcceptTimes time_accept(const fs::path& work) {
  const fs::path real = work / "real", layer = work / "layer";
  fs::create_directories(real);
  make_trees(real, {});
  auto overlay = kernex::workspace::Overlay::create(real, layer);
  if (!overlay) die("workspace_accept", overlay.error().describe());
  make_trees(fs::path(work / "scratch"), overlay->upper());  // real stays; upper gets the edits
  ::sync();
  const auto start = Clock::now();
  auto result = overlay->accept();
  const double us = us_since(start);
  if (!result) die("workspace_accept", result.error().describe());
  if (result->applied.size() != kDirs * kFilesPerDir || !result->conflicts.empty() ||
      !result->refused.empty())
    die("workspace_accept", "accept did not apply all 1000 files: " + to_json(*result).dump());
  overlay = std::unexpected(kernex::Error(kernex::ErrorCode::Io, "destroyed"));
  return {us / 1000, us_since(start) / 1000};
}

double time_write_rename(const fs::path& work) {
  const fs::path real = work / "real", upper = work / "upper";
  fs::create_directories(real);
  make_trees(real, upper);
  ::sync();
  const auto start = Clock::now();
  for (int d = 0; d < kDirs; ++d) {
    for (int f = 0; f < kFilesPerDir; ++f) {
      std::ifstream in(upper / rel_path(d, f), std::ios::binary);
      const std::string body((std::istreambuf_iterator<char>(in)), {});
      const fs::path target = real / rel_path(d, f);
      const fs::path temp = target.string() + ".tmp";
      const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::write(fd, body.data(), body.size()) != static_cast<ssize_t>(body.size()))
        die("workspace_accept", "baseline write failed");
      ::close(fd);
      fs::rename(temp, target);
    }
  }
  const int root = ::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ::syncfs(root);
  for (int d = 0; d < kDirs; ++d) {
    const int dir = ::open((real / ("dir" + std::to_string(d))).c_str(), O_RDONLY | O_CLOEXEC);
    ::fsync(dir);
    ::close(dir);
  }
  ::close(root);
  return us_since(start) / 1000;
}

double time_cp(const fs::path& work) {
  const fs::path real = work / "real", upper = work / "upper";
  fs::create_directories(real);
  make_trees(real, upper);
  const std::string from = (upper / ".").string(), to = real.string();
  const char* argv[] = {"cp", "-r", from.c_str(), to.c_str(), nullptr};
  ::sync();
  const auto start = Clock::now();
  pid_t pid = 0;
  if (::posix_spawnp(&pid, "cp", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0)
    die("workspace_accept", "cannot run cp");
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double ms = us_since(start) / 1000;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("workspace_accept", "cp failed");
  return ms;
}

fs::path fresh_dir(const fs::path& base, const std::string& name) {
  const fs::path p = base / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::string pattern = (fs::temp_directory_path() / "kernex-bench-ws-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) die("workspace_accept", "mkdtemp failed");
  const fs::path base = pattern;
  std::vector<double> accept_ms, whole_ms, write_ms, cp_ms;
  for (int r = 0; r < rounds; ++r) {  // interleaved, so drift hits all three alike
    const AcceptTimes t = time_accept(fresh_dir(base, "accept"));
    accept_ms.push_back(t.accept_ms);
    whole_ms.push_back(t.whole_ms);
    write_ms.push_back(time_write_rename(fresh_dir(base, "write")));
    cp_ms.push_back(time_cp(fresh_dir(base, "cp")));
  }
  fs::remove_all(base);
  auto row = [](const char* name, const std::vector<double>& v) {
    std::printf("%-44s median %8.1f ms   min %8.1f ms\n", name, median(v),
                *std::min_element(v.begin(), v.end()));
  };
  std::printf("1000 changed files, %d rounds (target: accept <= 1000 ms)\n", rounds);
  row("Overlay::accept", accept_ms);
  row("  + trash removed (Overlay destroyed)", whole_ms);
  row("baseline: write+rename, one syncfs", write_ms);
  row("baseline: cp -r upper/. real/ (no fsync)", cp_ms);
  return 0;
}
