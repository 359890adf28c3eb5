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
  std::uintptr_t at = round_up(next_, alignment);
  if (next_ == 0 || at > end_ || size > end_ - at) {
    if (!reserve(size, alignment)) return nullptr;
    at = round_up(next_, alignment);
  }
  next_ = at + size;
  return reinterpret_cast<void*>(at);
}

// A region of at least region_bytes_, starting on a huge page: mapped with one huge page to
// spare, then the unaligned head and tail are unmapped again.
bool HugePageArena::reserve(std::size_t size, std::size_t alignment) {
  const std::size_t align = alignment > kHugePage ? alignment : kHugePage;
  std::size_t length = round_up(size, kHugePage);
  if (length < region_bytes_) length = region_bytes_;
  const std::size_t mapped = length + align;
  void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  const auto base = reinterpret_cast<std::uintptr_t>(m);
  const std::uintptr_t start = round_up(base, align);
  if (start > base) ::munmap(m, start - base);
  if (base + mapped > start + length)
    ::munmap(reinterpret_cast<void*>(start + length), base + mapped - (start + length));
  // A hint: where huge pages are "never" the region is ordinary memory, and still works.
  ::madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);
  next_ = start;
  end_ = start + length;
  return true;
}

}  // namespace kernex::cli
