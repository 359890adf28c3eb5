// Address space for an allocator's heap, handed out in pieces of 2 MiB-aligned regions that are
// marked MADV_HUGEPAGE: where transparent huge pages are "always" or "madvise", the heap's memory
// then arrives 2 MiB at a time instead of 4 KiB at a time.
//
// Used by cli/tcmalloc_huge_pages.cpp. It runs inside the allocator, before and during its first
// allocations: it allocates nothing itself, and it is not thread-safe (tcmalloc serializes its
// calls under its own lock).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kernex::cli {

class HugePageArena {
 public:
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  // `region_bytes` (a multiple of kHugePage) is how much address space a region reserves; only
  // what the allocator touches becomes memory.
  explicit HugePageArena(std::size_t region_bytes = std::size_t{64} << 20)
      : region_bytes_(region_bytes) {}

  // `size` bytes at a multiple of `alignment` (a power of two), from the current region or a new
  // one (the rest of the old one is left unused: address space, never memory); a piece as large
  // as a region gets a mapping of its own. Null when the address space cannot be had: the caller
  // then uses its own allocator. Never given back.
  void* take(std::size_t size, std::size_t alignment);

 private:
  std::uintptr_t map_region(std::size_t length, std::size_t alignment);

  std::size_t region_bytes_;
  std::uintptr_t next_ = 0;  // the current region's first unused byte, or 0 before the first
  std::uintptr_t end_ = 0;
};

}  // namespace kernex::cli
