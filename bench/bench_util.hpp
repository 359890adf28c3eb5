// What every bench prints its figures with.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
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

// A bench that cannot measure what it promised stops with the reason, never with a made-up figure.
[[noreturn]] inline void die(const char* bench, const std::string& what) {
  std::fprintf(stderr, "bench/%s: %s\n", bench, what.c_str());
  std::exit(1);
}

}  // namespace kernex::bench
