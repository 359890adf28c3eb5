# The `kernex` program's allocator (KERNEX_MALLOC): a run of `kernex serve` allocates and frees
# thousands of small objects (JSON values, strings, SQLite's statements' memory) on many threads,
# and glibc's malloc spent ~16-20 % of the server's CPU on them (perf, bench/serve's rps phase).
#   tcmalloc  gperftools' tcmalloc_minimal (Debian's libtcmalloc-minimal4), the default where found
#   system    glibc's malloc
# Only the program links it: a host that embeds the library keeps its own allocator, and plugins
# loaded into `kernex` use the program's (one malloc per process). Never with the sanitizers, which
# bring their own allocator.
set(KERNEX_MALLOC "tcmalloc" CACHE STRING "The kernex program's allocator: tcmalloc or system")
set_property(CACHE KERNEX_MALLOC PROPERTY STRINGS tcmalloc system)

# The runtime package alone (libgoogle-perftools-dev pulls libunwind-dev, which conflicts with
# LLVM's libunwind-16-dev): its versioned file is what a program is linked against.
find_library(KERNEX_TCMALLOC_LIBRARY NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
# A sanitizer asked for by hand in the flags: ASan and tcmalloc in one program would be two
# allocators, as with KERNEX_SANITIZE.
if("${CMAKE_CXX_FLAGS} ${CMAKE_EXE_LINKER_FLAGS}" MATCHES "-fsanitize")
  set(KERNEX_FLAGS_SANITIZE ON)
else()
  set(KERNEX_FLAGS_SANITIZE OFF)
endif()

# kernex_link_malloc(<target>): links the chosen allocator into an executable (nothing for
# `system` or a sanitized build; a status line when tcmalloc is not installed).
function(kernex_link_malloc target)
  if(KERNEX_MALLOC STREQUAL "system" OR KERNEX_SANITIZE OR KERNEX_FUZZ OR KERNEX_FLAGS_SANITIZE)
    return()
  endif()
  if(NOT KERNEX_MALLOC STREQUAL "tcmalloc")
    message(FATAL_ERROR "KERNEX_MALLOC: expected tcmalloc or system, not '${KERNEX_MALLOC}'")
  endif()
  if(NOT KERNEX_TCMALLOC_LIBRARY)
    message(STATUS "kernex: tcmalloc_minimal not found (libtcmalloc-minimal4); glibc's malloc")
    return()
  endif()
  kernex_link_tcmalloc(${target})
endfunction()

# kernex_link_tcmalloc(<target>): tcmalloc_minimal as the program links it, with its heap on
# transparent huge pages (cli/tcmalloc_huge_pages.cpp says why); also the suite that tests that.
# Kept where the compiler links --as-needed by default (Ubuntu's): nothing names its symbols but
# malloc's. push/pop: the rest of the link line keeps the default (bfd, gold, lld, mold).
function(kernex_link_tcmalloc target)
  target_link_libraries(${target} PRIVATE -Wl,--push-state,--no-as-needed
    ${KERNEX_TCMALLOC_LIBRARY} -Wl,--pop-state)
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/cli/tcmalloc_huge_pages.cpp
    ${PROJECT_SOURCE_DIR}/cli/huge_page_arena.cpp)
endfunction()
