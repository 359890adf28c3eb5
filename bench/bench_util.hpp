// What every bench prints its figures with.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstdint>
#include <sstream>
#include <string>
#include <poll.h>
#include <sys/types.h>
#include <vector>

namespace kernex::bench {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

inline double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

inline double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A bench that cannot measure what it promised stops with the reason, never with a made-up figure.
[[noreturn]] inline void die(const char* bench, const std::string& what) {
  std::fprintf(stderr, "bench/%s: %s\n", bench, what.c_str());
  std::exit(1);
}

// `text` as the file `path` (its directories made); a file that cannot be written stops `bench`.
inline void write_file(const char* bench, const std::filesystem::path& path,
                       const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path);
  out << text;
  if (!out) die(bench, "cannot write " + path.string());
}

// A bench's command line, read in order: `for (ArgReader in(...); in.next();)`, then flag() is
// the argument and value() the one after it (a flag without one stops the bench).
class ArgReader {
 public:
  ArgReader(const char* bench, int argc, char** argv) : bench_(bench), argc_(argc), argv_(argv) {}

  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  const std::string& flag() const { return flag_; }
  std::string value() {
    if (i_ + 1 >= argc_) die(bench_, flag_ + " needs a value");
    return argv_[++i_];
  }
  // value() as a whole number in [1, max].
  int positive(long max) {
    const std::string v = value();
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > max)
      die(bench_, flag_ + ": expected a positive whole number, got " + v);
    return static_cast<int>(n);
  }

 private:
  const char* bench_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

// utime + stime of the process, in clock ticks (/proc/PID/stat fields 14 and 15).
inline std::uint64_t cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string f;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return utime + stime;
}

// Until `pid`'s CPU time stands still (under 5 % of a core over half a second): a server still
// busy with what came before (pushing into socket buffers, a run's tail) is not idle yet.
inline void wait_until_idle(pid_t pid) {
  for (std::uint64_t before = cpu_ticks(pid);;) {
    ::poll(nullptr, 0, 500);
    const std::uint64_t now = cpu_ticks(pid);
    if (now - before < 3) break;  // 100 ticks a second
    before = now;
  }
}

}  // namespace kernex::bench
