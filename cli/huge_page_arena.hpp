// Address space for an allocator's heap, handed out in pieces of 2 MiB-aligned regions that are
// marked MADV_HUGEPAGE: where transparent huge pages are "always" or "madvise", the heap's memory
// then arrives 2 MiB at a time instead of 4 KiB at a time.
//
// Used by cli/tcmalloc_huge_pages.cpp. It runs inside the allocator, before and during its first
// allocations: it allocates nothing itself. take() and populate_ahead() may run on different
// threads (a spin lock of its own; tcmalloc also calls take() under its lock).
#pragma once

#include <atomic>
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

  // Makes the next `bytes` (rounded up to huge pages, at most a region) that take() will hand out
  // present now, in one MADV_POPULATE_WRITE, so that the allocator's growth into them faults
  // nothing: a server pays its heap's first touches when it starts, not in its first burst. When
  // the current region has less left, a new one becomes current (the old rest stays address
  // space). Changes no byte, so it may cover pieces already handed out. Returns the bytes made
  // present: 0 when the kernel cannot populate (before Linux 5.14) or nothing could be mapped.
  std::size_t populate_ahead(std::size_t bytes);

 private:
  std::uintptr_t map_region(std::size_t length, std::size_t alignment);
  void* take_locked(std::size_t size, std::size_t alignment);
  void lock() noexcept;
  void unlock() noexcept { busy_.clear(std::memory_order_release); }

  std::size_t region_bytes_;
  std::uintptr_t next_ = 0;  // the current region's first unused byte, or 0 before the first
  std::uintptr_t end_ = 0;
  std::atomic_flag busy_;  // a spin lock: what it guards is a few loads and stores, or one mmap
};

}  // namespace kernex::cli
