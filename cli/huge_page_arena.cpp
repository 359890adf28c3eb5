#include "huge_page_arena.hpp"

#include <sys/mman.h>

#include <thread>

namespace kernex::cli {
namespace {

// Larger than any heap this process could use: a request above it is refused, not overflowed.
constexpr std::size_t kMaxRequest = std::size_t{1} << 44;

std::uintptr_t round_up(std::uintptr_t value, std::uintptr_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

void HugePageArena::lock() noexcept {
  while (busy_.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
}

void* HugePageArena::take(std::size_t size, std::size_t alignment) {
  lock();
  void* p = take_locked(size, alignment);
  unlock();
  return p;
}

void* HugePageArena::take_locked(std::size_t size, std::size_t alignment) {
  if (size == 0 || size > kMaxRequest || alignment > kMaxRequest) return nullptr;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
  // As large as a region: a mapping of its own, and the current region keeps serving (replacing
  // it would leave its rest unused).
  if (size >= region_bytes_) return reinterpret_cast<void*>(map_region(size, alignment));
  std::uintptr_t at = round_up(next_, alignment);
  if (next_ == 0 || at > end_ || size > end_ - at) {
    const std::uintptr_t start = map_region(region_bytes_, alignment);
    if (start == 0) return nullptr;
    next_ = start;
    end_ = start + region_bytes_;
    at = start;  // on a huge page, and on `alignment`
  }
  next_ = at + size;
  return reinterpret_cast<void*>(at);
}

std::size_t HugePageArena::populate_ahead(std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  bytes = round_up(bytes > region_bytes_ ? region_bytes_ : bytes, kHugePage);
  if (bytes == 0) return 0;
  lock();
  // From the huge page that holds the next piece: pages already present are skipped.
  std::uintptr_t from = next_ / kHugePage * kHugePage;
  if (next_ == 0 || end_ - next_ < bytes) {
    from = map_region(region_bytes_, kHugePage);
    if (from != 0) {
      next_ = from;
      end_ = from + region_bytes_;
    }
  }
  unlock();
  if (from == 0) return 0;
  // Outside the lock: take() may hand out this range meanwhile, and populating writes nothing.
  return ::madvise(reinterpret_cast<void*>(from), bytes, MADV_POPULATE_WRITE) == 0 ? bytes : 0;
#else
  (void)bytes;
  return 0;  // headers older than Linux 5.14
#endif
}

// `length` bytes (rounded up to huge pages) starting on a huge page and on `alignment`: mapped
// with the alignment to spare, then the unaligned head and tail are unmapped again. 0 when the
// address space cannot be had.
std::uintptr_t HugePageArena::map_region(std::size_t length, std::size_t alignment) {
  const std::size_t align = alignment > kHugePage ? alignment : kHugePage;
  length = round_up(length, kHugePage);
  const std::size_t mapped = length + align;
  void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return 0;
  const auto base = reinterpret_cast<std::uintptr_t>(m);
  const std::uintptr_t start = round_up(base, align);
  if (start > base) ::munmap(m, start - base);
  if (base + mapped > start + length)
    ::munmap(reinterpret_cast<void*>(start + length), base + mapped - (start + length));
  // A hint: where huge pages are "never" the region is ordinary memory, and still works.
  ::madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);
  return start;
}

}  // namespace kernex::cli
