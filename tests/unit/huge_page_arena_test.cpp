// HugePageArena (cli/huge_page_arena.cpp): the address space the kernex program's tcmalloc heap
// grows from, in 2 MiB-aligned regions marked for transparent huge pages.
#include "huge_page_arena.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "smaps.hpp"

namespace {

using kernex::cli::HugePageArena;
constexpr std::size_t kMiB = std::size_t{1} << 20;

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

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
