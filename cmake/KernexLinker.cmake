# The linker (KERNEX_LINKER), and no relinking for a changed shared library.
#
# Linking is most of a one-file rebuild: the ASan `kernex` program is 460 MB, which bfd (the
# compiler's default) links in 12.5 s, gold in 8.3-9.3 s and lld in 5.8 s. "auto" takes lld when
# it links here (Debian package lld; scripts/setup installs it), else gold (in binutils), else the
# compiler's default; "default" leaves the compiler's choice; a name (lld, gold, bfd, mold) insists.
# The linker never changes a compile command, so ccache shares objects between trees whatever the
# linker. (CMAKE_LINKER_TYPE does this from CMake 3.29; we require 3.25.)
set(KERNEX_LINKER auto CACHE STRING "Linker for -fuse-ld= (auto: lld, else gold, else the compiler's; default: the compiler's)")
set_property(CACHE KERNEX_LINKER PROPERTY STRINGS auto default lld gold bfd mold)

function(kernex_choose_linker)
  # The fuzz tree (clang-16 and libFuzzer) keeps clang's linker: lld is Debian's 14, and that
  # pairing has not been tried with the fuzzer's runtime.
  if(KERNEX_LINKER STREQUAL "default" OR KERNEX_FUZZ
     OR "${CMAKE_EXE_LINKER_FLAGS} ${CMAKE_SHARED_LINKER_FLAGS} ${CMAKE_MODULE_LINKER_FLAGS}" MATCHES "-fuse-ld=")
    return()  # the compiler's, or the one the configure line named
  endif()
  if(KERNEX_LINKER STREQUAL "auto")
    set(candidates lld gold)
  else()
    set(candidates ${KERNEX_LINKER})
  endif()
  include(CheckLinkerFlag)
  foreach(linker IN LISTS candidates)
    check_linker_flag(CXX -fuse-ld=${linker} KERNEX_LINKER_${linker}_WORKS)
    if(KERNEX_LINKER_${linker}_WORKS)
      message(STATUS "Linker: ${linker} (KERNEX_LINKER=${KERNEX_LINKER})")
      add_link_options(-fuse-ld=${linker})
      return()
    endif()
  endforeach()
  if(NOT KERNEX_LINKER STREQUAL "auto")
    message(FATAL_ERROR "KERNEX_LINKER=${KERNEX_LINKER}: ${CMAKE_CXX_COMPILER} cannot link with -fuse-ld=${KERNEX_LINKER}")
  endif()
  message(STATUS "Linker: the compiler's default (neither lld nor gold links here)")
endfunction()
kernex_choose_linker()

# A program or library is not relinked because a shared library it links was rebuilt: it loads
# that library at run time, so the new code is there without a relink. (A change to what the
# library exports comes with a changed header, which recompiles, and so relinks, its users; a
# plugin is relinked only when its own objects change, and is dlopen()ed afresh by every run.)
# Without it, a one-file change in the kernel relinked the five libraries and the programs that
# link libkernex.so: 34.5 s of CPU against 13.5 s in the ASan tree.
if(NOT DEFINED CMAKE_LINK_DEPENDS_NO_SHARED)
  set(CMAKE_LINK_DEPENDS_NO_SHARED ON)
endif()
