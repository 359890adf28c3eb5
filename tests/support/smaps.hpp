// This process's mapping that holds an address, as /proc/self/smaps describes it: whether it is
// marked for transparent huge pages (VmFlags "hg") and how much of it huge pages back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace kernex::test {

struct Mapping {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  bool huge_page_advised = false;      // VmFlags has "hg" (MADV_HUGEPAGE)
  std::size_t anon_huge_pages_kb = 0;  // AnonHugePages
};

inline std::optional<Mapping> mapping_of(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream in("/proc/self/smaps");
  std::optional<Mapping> found;
  for (std::string line; std::getline(in, line);) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &start, &end) == 2) {  // a mapping's first line
      if (found) return found;  // the next mapping begins: ours is complete
      if (at >= start && at < end) found = Mapping{start, end};
      continue;
    }
    if (!found) continue;
    if (line.rfind("AnonHugePages:", 0) == 0)
      found->anon_huge_pages_kb = std::stoull(line.substr(14));
    if (line.rfind("VmFlags:", 0) == 0)
      found->huge_page_advised = (" " + line.substr(8) + " ").find(" hg ") != std::string::npos;
  }
  return found;
}

// This machine's transparent huge pages: "always", "madvise", "never", or empty where the kernel
// has none (no /sys/kernel/mm/transparent_hugepage: MADV_HUGEPAGE then fails, and marks nothing).
inline std::string huge_pages_setting() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return text.substr(open + 1, close - open - 1);
}

// How often the kernel has had no free huge page for a marked region and used 4 KiB pages
// instead (/proc/vmstat's thp_fault_fallback; -1 where it is not reported): huge pages are best
// effort, and a machine with fragmented memory gives none.
inline long long huge_page_fallbacks() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  long long value = 0;
  while (in >> key >> value)
    if (key == "thp_fault_fallback") return value;
  return -1;
}

}  // namespace kernex::test
