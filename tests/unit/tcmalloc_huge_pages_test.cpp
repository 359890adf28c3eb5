// The kernex program's tcmalloc heap on transparent huge pages (cli/tcmalloc_huge_pages.cpp).
// This suite links tcmalloc and that file as the program does, and is built without the
// sanitizers (which would bring an allocator of their own): its own heap is the subject.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "heap_reserve.hpp"  // the file under test defines it
#include "smaps.hpp"

namespace {

// This process's resident bytes (/proc/self/statm).
std::size_t resident_bytes() {
  unsigned long long pages = 0, resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  const int read = std::fscanf(statm, "%llu %llu", &pages, &resident);
  std::fclose(statm);
  return read == 2 ? resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// ~40 MB in small objects, as a burst of runs allocates its messages and JSON; the last one's
// mapping.
kernex::test::Mapping grow_heap(std::vector<std::unique_ptr<char[]>>& blocks) {
  for (int i = 0; i < 40000; ++i) {
    blocks.emplace_back(new char[1000]);
    std::memset(blocks.back().get(), 1, 1000);
  }
  auto mapping = kernex::test::mapping_of(blocks.back().get());
  EXPECT_TRUE(mapping.has_value());
  return mapping.value_or(kernex::test::Mapping{});
}

bool huge_pages_turned_off() {
  const char* setting = std::getenv("KERNEX_HUGE_PAGES");
  return setting != nullptr && std::strcmp(setting, "0") == 0;
}

TEST(TcmallocHugePages, TheHeapGrowsInRegionsMarkedForHugePages) {
  if (huge_pages_turned_off()) GTEST_SKIP() << "KERNEX_HUGE_PAGES=0 in this suite's environment";
  const std::string setting = kernex::test::huge_pages_setting();
  if (setting.empty()) GTEST_SKIP() << "this kernel has no transparent huge pages to ask for";
  const long long fallbacks = kernex::test::huge_page_fallbacks();
  std::vector<std::unique_ptr<char[]>> blocks;
  const auto mapping = grow_heap(blocks);
  EXPECT_TRUE(mapping.huge_page_advised) << "the heap's mapping lacks VmFlags hg";
  EXPECT_EQ(mapping.start % (std::size_t{2} << 20), 0u) << "a region starts on a huge page";
  if (setting == "never") {
    std::printf("transparent huge pages are [never] here: the heap is marked, on 4 KiB pages\n");
    return;
  }
  if (mapping.anon_huge_pages_kb == 0 && kernex::test::huge_page_fallbacks() > fallbacks)
    GTEST_SKIP() << "the kernel had no free huge page meanwhile (thp_fault_fallback rose)";
  EXPECT_GT(mapping.anon_huge_pages_kb, 0u) << "40 MB of heap touched, no huge page";
}

// This test binary run again with `env` (NAME=value ...) and only `test`: its output and status.
std::pair<std::string, int> run_alone(const std::string& env, const std::string& test) {
  char self[4096] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return {"no /proc/self/exe", -1};
  const std::string command =
      env + " '" + std::string(self) + "' --gtest_filter=TcmallocHugePages." + test + " 2>&1";
  FILE* child = ::popen(command.c_str(), "r");
  if (child == nullptr) return {"popen failed", -1};
  std::string output;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, child)) > 0;)
    output.append(buffer, n);
  return {output, ::pclose(child)};
}

bool child_for(const char* test) {
  const char* which = std::getenv("KERNEX_TEST_CHILD");
  return which != nullptr && std::strcmp(which, test) == 0;
}

// What `kernex serve` does before it listens (cli/serve_command.cpp): the heap's next growth is
// memory at once, and the heap then grows into it. In a fresh process (the next test starts it):
// here, tcmalloc's free lists would serve the new objects from what earlier tests freed.
TEST(TcmallocHugePages, FreshHeapPopulatedAheadGrowsIntoResidentMemory) {
  if (!child_for("populate")) GTEST_SKIP() << "runs in a process of its own (the next test)";
  const std::size_t before = resident_bytes();
  const std::size_t made = kernex_populate_heap_ahead(std::size_t{16} << 20);
  if (made == 0) GTEST_SKIP() << "this kernel cannot populate (MADV_POPULATE_WRITE, Linux 5.14)";
  EXPECT_EQ(made, std::size_t{16} << 20);
  // Its first huge page may have been resident already: the rest was not.
  EXPECT_GE(resident_bytes(), before + (std::size_t{14} << 20)) << "populated, yet not resident";
  const std::size_t populated = resident_bytes();
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 10000; ++i) {  // ~10 MB, inside what was populated
    blocks.emplace_back(new char[1000]);
    std::memset(blocks.back().get(), 1, 1000);
  }
  EXPECT_LT(resident_bytes(), populated + (std::size_t{4} << 20))
      << "10 MB of new objects grew the heap outside the populated part";
}

TEST(TcmallocHugePages, PopulatingAheadMakesTheHeapsNextGrowthResident) {
  if (huge_pages_turned_off()) GTEST_SKIP() << "KERNEX_HUGE_PAGES=0 in this suite's environment";
  if (child_for("populate")) GTEST_SKIP() << "this is the process it starts";
  const auto [output, status] =
      run_alone("KERNEX_TEST_CHILD=populate", "FreshHeapPopulatedAheadGrowsIntoResidentMemory");
  if (output.find("[  SKIPPED ] 1 test") != std::string::npos)
    GTEST_SKIP() << "the fresh process skipped: " << output;
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

// Run by the next test in a process of its own, with KERNEX_HUGE_PAGES=0.
TEST(TcmallocHugePages, TurnedOffTheHeapIsTcmallocsOwn) {
  if (!huge_pages_turned_off()) GTEST_SKIP() << "runs with KERNEX_HUGE_PAGES=0 (the next test)";
  EXPECT_EQ(kernex_populate_heap_ahead(std::size_t{16} << 20), 0u) << "no arena to populate";
  std::vector<std::unique_ptr<char[]>> blocks;
  EXPECT_FALSE(grow_heap(blocks).huge_page_advised) << "KERNEX_HUGE_PAGES=0 was not honoured";
}

TEST(TcmallocHugePages, KernexHugePagesZeroTurnsItOff) {
  if (huge_pages_turned_off()) GTEST_SKIP() << "this is the process it starts";
  const auto [output, status] = run_alone("KERNEX_HUGE_PAGES=0", "TurnedOffTheHeapIsTcmallocsOwn");
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

}  // namespace
