// The kernex program's tcmalloc heap on transparent huge pages. cmake/KernexMalloc.cmake compiles
// this file into the program where it links gperftools' tcmalloc_minimal, and never elsewhere.
//
// Why: on the 2-CPU VMs this project runs on, a process's first touch of a fresh 4 KiB page costs
// ~11 µs, and of a 2 MiB huge page ~0.4 µs per 4 KiB in it (100 MB mapped and touched page by
// page, 2026-12-02: 10.6-12.9 µs against 0.41). A burst of 1 000 new runs grows `kernex serve`'s
// heap by ~45 MB: ~11 000 fresh pages, over 100 µs of each run's start. tcmalloc grows its heap
// with sbrk and mmap, which the usual THP setting ("madvise") leaves on 4 KiB pages.
//
// How: tcmalloc asks tc_get_sysalloc_override(), a weak symbol of libtcmalloc_minimal whose
// default returns its own allocator, once, before its first allocation, for the SysAllocator its
// heap grows from; the program's definition wins over the weak one. Ours hands out pieces of
// HugePageArena's MADV_HUGEPAGE regions, and asks tcmalloc's own allocator when it cannot.
// KERNEX_HUGE_PAGES=0 in the environment keeps tcmalloc's own (to compare, or to keep the RSS of
// a small process in 4 KiB steps).
//
// It also defines kernex_populate_heap_ahead() (cli/heap_reserve.hpp), which `kernex serve` calls.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "heap_reserve.hpp"
#include "huge_page_arena.hpp"

// gperftools' malloc_extension.h declares this class; that header comes with
// libgoogle-perftools-dev, which Debian cannot install beside LLVM's libunwind-16-dev (the fuzz
// tree's), so its declaration is repeated: gperftools 2's ABI, a virtual destructor and the
// class's typeinfo (both defined in the library), then Alloc.
class SysAllocator {
 public:
  SysAllocator() {}
  virtual ~SysAllocator();
  virtual void* Alloc(std::size_t size, std::size_t* actual_size, std::size_t alignment) = 0;
};

namespace {

class HugePageAllocator final : public SysAllocator {
 public:
  explicit HugePageAllocator(SysAllocator* fallback) : fallback_(fallback) {}

  std::size_t populate_ahead(std::size_t bytes) { return arena_.populate_ahead(bytes); }

  void* Alloc(std::size_t size, std::size_t* actual_size, std::size_t alignment) override {
    void* p = arena_.take(size, alignment);
    if (p == nullptr) return fallback_->Alloc(size, actual_size, alignment);
    if (actual_size != nullptr) *actual_size = size;
    return p;
  }

 private:
  SysAllocator* fallback_;
  kernex::cli::HugePageArena arena_;
};

// Static storage, constructed in place: the override runs inside tcmalloc's first allocation,
// possibly before this file's static initializers, and must not allocate.
alignas(HugePageAllocator) unsigned char storage[sizeof(HugePageAllocator)];
std::atomic<HugePageAllocator*> installed{nullptr};

}  // namespace

SysAllocator* tc_get_sysalloc_override(SysAllocator* def) {
  const char* setting = std::getenv("KERNEX_HUGE_PAGES");  // reads environ: allocates nothing
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return def;
  auto* allocator = ::new (static_cast<void*>(storage)) HugePageAllocator(def);
  installed.store(allocator, std::memory_order_release);
  return allocator;
}

// Declared weak (cli/heap_reserve.hpp), so this definition is too; it is the only one.
extern "C" std::size_t kernex_populate_heap_ahead(std::size_t bytes) {
  HugePageAllocator* allocator = installed.load(std::memory_order_acquire);
  return allocator == nullptr ? 0 : allocator->populate_ahead(bytes);
}
