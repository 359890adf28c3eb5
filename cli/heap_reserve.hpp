// The kernex program's heap, made present ahead of its growth: `kernex serve` pays its heap's
// first touches when it starts, not in its first burst (a huge page's first touch zeroes 2 MiB
// while a run waits: 11 % of a cold server's CPU in a burst of 1 000 starts, perf 2026-12-02).
//
// One declaration for the definition (cli/tcmalloc_huge_pages.cpp, compiled only where the
// program links tcmalloc) and its callers, so that the C symbol's signature cannot drift. Weak:
// in a program without that file (glibc's malloc, a sanitizer) the function is null.
#pragma once

#include <cstddef>

// The next `bytes` of the heap's growth made present now (HugePageArena::populate_ahead); 0 when
// tcmalloc kept its own allocator (KERNEX_HUGE_PAGES=0) or the kernel cannot populate.
extern "C" [[gnu::weak]] std::size_t kernex_populate_heap_ahead(std::size_t bytes);
