#include "huge_page_arena.hpp"

#include <sys/mman.h>

namespace kernex::cli {
namespace {

// Larger than any heap this process could use: a request above it is refused, not overflowed.
constexpr std::size_t kMaxRequest = std::size_t{1} << 44;

std::uintptr_t round_up(std::uintptr_t value, std::uintptr_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

void* HugePageArena::take(std::size_t size, std::size_t alignment) {
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
