// HugePageArena (cli/huge_page_arena.cpp): the address space the kernex program's tcmalloc heap
// grows from, in 2 MiB-aligned regions marked for transparent huge pages.
#include "huge_page_arena.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "smaps.hpp"

namespace {

using kernex::cli::HugePageArena;
constexpr std::size_t kMiB = std::size_t{1} << 20;

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// Whether every page of [p, p + size) is resident (mincore), i.e. its first touch faults nothing.
bool resident(const void* p, std::size_t size) {
  const std::size_t page = 4096;
  const std::uintptr_t from = address(p) / page * page;
  std::vector<unsigned char> pages((address(p) + size - from + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(from), address(p) + size - from, pages.data()) != 0)
    return false;
  for (unsigned char in_core : pages)
    if ((in_core & 1) == 0) return false;
  return true;
}

TEST(HugePageArena, PiecesAreAlignedAndDoNotOverlap) {
  HugePageArena arena(4 * kMiB);
  std::vector<std::pair<std::uintptr_t, std::size_t>> pieces;
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t size = (i % 7 + 1) * 8192;
    const std::size_t alignment = std::size_t{4096} << (i % 4);
    void* p = arena.take(size, alignment);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(address(p) % alignment, 0u) << "piece " << i;
    std::memset(p, 0x5a, size);  // every byte of a piece is usable memory
    pieces.emplace_back(address(p), size);
  }
  for (std::size_t i = 0; i < pieces.size(); ++i)
    for (std::size_t j = i + 1; j < pieces.size(); ++j)
      EXPECT_TRUE(pieces[i].first + pieces[i].second <= pieces[j].first ||
                  pieces[j].first + pieces[j].second <= pieces[i].first)
          << "pieces " << i << " and " << j << " overlap";
}

TEST(HugePageArena, RegionsStartOnAHugePageAndAreMarkedForHugePages) {
  HugePageArena arena(4 * kMiB);
  void* first = arena.take(8192, 8192);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(address(first) % HugePageArena::kHugePage, 0u) << "a new region starts on a huge page";
  if (kernex::test::huge_pages_setting().empty())
    GTEST_SKIP() << "this kernel has no transparent huge pages: nothing can be marked";
  auto mapping = kernex::test::mapping_of(first);
  ASSERT_TRUE(mapping.has_value());
  EXPECT_TRUE(mapping->huge_page_advised) << "the region's VmFlags lack hg (MADV_HUGEPAGE)";
  EXPECT_GE(mapping->end - mapping->start, 4 * kMiB);
}

TEST(HugePageArena, TouchedMemoryArrivesInHugePages) {
  const std::string setting = kernex::test::huge_pages_setting();
  if (setting.empty() || setting == "never") {
    GTEST_SKIP() << "transparent huge pages are '" << setting
                 << "' here: the kernel backs the regions with 4 KiB pages";
  }
  HugePageArena arena(8 * kMiB);
  auto* p = static_cast<char*>(arena.take(4 * kMiB, HugePageArena::kHugePage));
  ASSERT_NE(p, nullptr);
  const long long fallbacks = kernex::test::huge_page_fallbacks();
  for (std::size_t i = 0; i < 4 * kMiB; i += 4096) p[i] = 1;
  auto mapping = kernex::test::mapping_of(p);
  ASSERT_TRUE(mapping.has_value());
  if (mapping->anon_huge_pages_kb == 0 && kernex::test::huge_page_fallbacks() > fallbacks)
    GTEST_SKIP() << "the kernel had no free huge page meanwhile (thp_fault_fallback rose)";
  EXPECT_GT(mapping->anon_huge_pages_kb, 0u) << "4 MiB touched in a marked region, no huge page";
}

TEST(HugePageArena, ARequestAsLargeAsARegionGetsAMappingOfItsOwn) {
  HugePageArena arena(2 * kMiB);
  auto* first = static_cast<char*>(arena.take(1 * kMiB, 8192));
  ASSERT_NE(first, nullptr);
  auto* big = static_cast<char*>(arena.take(9 * kMiB, 8192));
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(address(big) % HugePageArena::kHugePage, 0u);
  big[0] = 1;
  big[9 * kMiB - 1] = 1;  // its last byte is mapped too
  auto* after = static_cast<char*>(arena.take(8192, 8192));
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after, first + 1 * kMiB) << "the current region keeps serving after a large piece";
}

TEST(HugePageArena, PopulatedAheadThePiecesItHandsOutNextArePresentBeforeAnyTouch) {
  HugePageArena arena(8 * kMiB);
  auto* first = static_cast<char*>(arena.take(8192, 8192));
  ASSERT_NE(first, nullptr);
  const std::size_t made = arena.populate_ahead(4 * kMiB);
  if (made == 0) GTEST_SKIP() << "this kernel cannot populate (MADV_POPULATE_WRITE, Linux 5.14)";
  EXPECT_EQ(made, 4 * kMiB);
  auto* next = static_cast<char*>(arena.take(2 * kMiB, 8192));
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next, first + 8192) << "populating ahead of a region with room left keeps it current";
  EXPECT_TRUE(resident(next, 2 * kMiB)) << "a populated piece would fault on its first touch";
  EXPECT_FALSE(resident(first + 6 * kMiB, 2 * kMiB)) << "only what was asked became memory";
}

TEST(HugePageArena, PopulatingAheadOfAnAlmostFullRegionStartsTheNextOne) {
  HugePageArena arena(4 * kMiB);
  auto* first = static_cast<char*>(arena.take(3 * kMiB, 8192));
  ASSERT_NE(first, nullptr);
  if (arena.populate_ahead(2 * kMiB) == 0)
    GTEST_SKIP() << "this kernel cannot populate (MADV_POPULATE_WRITE, Linux 5.14)";
  auto* next = static_cast<char*>(arena.take(2 * kMiB, 8192));
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(address(next) % HugePageArena::kHugePage, 0u) << "a new region starts on a huge page";
  EXPECT_TRUE(address(next) + 2 * kMiB <= address(first) ||
              address(next) >= address(first) + 3 * kMiB)
      << "overlaps the old piece";
  EXPECT_TRUE(resident(next, 2 * kMiB));
}

TEST(HugePageArena, PopulatingAheadIsCappedAtARegionAndZeroIsNothing) {
  HugePageArena arena(2 * kMiB);
  EXPECT_EQ(arena.populate_ahead(0), 0u);
  const std::size_t made = arena.populate_ahead(1 * kMiB);  // rounded up to a huge page
  if (made == 0) GTEST_SKIP() << "this kernel cannot populate (MADV_POPULATE_WRITE, Linux 5.14)";
  EXPECT_EQ(made, 2 * kMiB);
  EXPECT_EQ(arena.populate_ahead(SIZE_MAX), 2 * kMiB) << "more than a region is a region";
}

// The two share the arena's lock: pieces taken and written on one thread while another populates
// ahead (and starts new regions) over and over never overlap, so each keeps its own bytes.
TEST(HugePageArena, PopulatingAheadBesideTakeKeepsEveryPiecesBytes) {
  HugePageArena arena(4 * kMiB);
  std::atomic<bool> done{false};
  std::thread populating([&] {
    while (!done.load()) arena.populate_ahead(2 * kMiB);
  });
  std::vector<std::pair<unsigned char*, std::size_t>> pieces;
  for (std::size_t i = 0; i < 2000; ++i) {
    const std::size_t size = (i % 5 + 1) * 4096;
    auto* p = static_cast<unsigned char*>(arena.take(size, 4096));
    EXPECT_NE(p, nullptr) << "piece " << i;
    if (p == nullptr) break;  // the thread is joined below either way
    std::memset(p, static_cast<int>(i % 251) + 1, size);
    pieces.emplace_back(p, size);
  }
  done = true;
  populating.join();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto [p, size] = pieces[i];
    const auto expected = static_cast<unsigned char>(i % 251 + 1);
    for (std::size_t at = 0; at < size; at += 512)
      ASSERT_EQ(p[at], expected) << "piece " << i << " changed at byte " << at;
  }
}

TEST(HugePageArena, RefusesWhatItCannotServeSoTheAllocatorFallsBack) {
  HugePageArena arena;
  EXPECT_EQ(arena.take(0, 8192), nullptr) << "an empty piece";
  EXPECT_EQ(arena.take(8192, 3 * 4096), nullptr) << "an alignment that is no power of two";
  EXPECT_EQ(arena.take(8192, 0), nullptr) << "no alignment";
  EXPECT_EQ(arena.take(SIZE_MAX - 4096, 8192), nullptr) << "a size that would overflow";
  EXPECT_EQ(arena.take(8192, std::size_t{1} << 62), nullptr) << "an alignment that would overflow";
  EXPECT_NE(arena.take(8192, 8192), nullptr) << "and still serves what it can";
}

}  // namespace
