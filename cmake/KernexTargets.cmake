# Helpers shared by every directory: warnings on our own code, plugin modules, tests.

# -Werror only where the compiler is the one the house tests with (scripts/test and CI turn it
# on): a newer or older compiler's new warning must not stop someone else's build (LLVM and
# abseil do the same).
option(KERNEX_WERROR "Treat compiler warnings as errors (on in scripts/test and CI)" OFF)
# Precompiled headers: the standard library, nlohmann/json and, in the suites, GoogleTest, parsed
# once per build instead of once per file. A precompiled header is only usable with the flags it
# was made with, and our targets come in four sets of flags (executables, suites, position-
# independent libraries, hidden-visibility plugins), so there is one shared header per set
# (kernex_pch_<set>) and every target reuses its set's (REUSE_FROM); a header per target cost more
# than it saved (5.7 s to make against ~1 s saved per file). At -O0 (scripts/test's ASan build) a
# suite's file compiles ~1 s faster of ~5-10 s. On in CI (.ci/run), whose compiler cache starts
# empty; off by default, because the header's bytes differ per build directory and ccache then
# shares no object between trees. -Winvalid-pch (added by CMake) with KERNEX_WERROR makes a header
# that no longer fits its targets an error, not a silent slowdown.
option(KERNEX_PCH "Precompile the heavy common headers (standard library, nlohmann/json, GoogleTest)" OFF)
set(KERNEX_PCH_HEADERS <algorithm> <chrono> <expected> <filesystem> <fstream> <functional> <map>
  <memory> <mutex> <optional> <set> <sstream> <string> <string_view> <thread> <unordered_map>
  <vector> <nlohmann/json.hpp>)

# The house defaults for a target of ours: warnings and the precompiled header.
function(kernex_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra $<$<BOOL:${KERNEX_WERROR}>:-Werror>
    # libseccomp's SCMP_A0()... macros leave a field to zero-initialisation, which clang (the fuzz
    # build), unlike gcc, reports under -Wextra.
    $<$<CXX_COMPILER_ID:Clang>:-Wno-missing-field-initializers>
    # g++ 12 with optimisation reports a false -Wrestrict overlap inside std::string for a short
    # literal joined to a temporary ("-" + std::to_string(n)), GCC bug 105329, fixed in 13; at
    # Release it fired in 21 files. Off there only (Debug never optimises, so it cannot fire).
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>,$<NOT:$<CONFIG:Debug>>>:-Wno-restrict>)
  if(KERNEX_PCH)
    # Deferred to the end of the top directory: a target's visibility and libraries (which pick
    # its set) are often set after this call. (EVAL: a deferred call reads its arguments late.)
    cmake_language(EVAL CODE
      "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]] CALL kernex_reuse_pch [[${target}]])")
  endif()
endfunction()

# kernex_reuse_pch(<target>): the shared precompiled header of the target's set of flags.
function(kernex_reuse_pch target)
  get_target_property(type ${target} TYPE)
  get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
  get_target_property(visibility ${target} CXX_VISIBILITY_PRESET)
  get_target_property(libs ${target} LINK_LIBRARIES)
  if(type MATCHES "^(SHARED|MODULE)_LIBRARY$")
    set(pic ON)
  endif()
  if(pic AND visibility STREQUAL "hidden")
    set(set plugin)
  elseif(pic)
    set(set pic)
  elseif(libs MATCHES "GTest::")
    set(set test)
  else()
    set(set exe)
  endif()
  if(NOT TARGET kernex_pch_${set})
    kernex_pch_target(${set})
  endif()
  target_precompile_headers(${target} REUSE_FROM kernex_pch_${set})
endfunction()

# The holder of one set's header: an object library with that set's flags and one empty file.
function(kernex_pch_target set)
  set(source ${PROJECT_BINARY_DIR}/kernex_pch/${set}.cpp)
  if(NOT EXISTS ${source})
    file(WRITE ${source} "// The precompiled header's holder (cmake/KernexTargets.cmake).\n")
  endif()
  add_library(kernex_pch_${set} OBJECT ${source})
  target_compile_options(kernex_pch_${set} PRIVATE -Wall -Wextra $<$<BOOL:${KERNEX_WERROR}>:-Werror>
    $<$<CXX_COMPILER_ID:Clang>:-Wno-missing-field-initializers>
    # g++ 12 with optimisation reports a false -Wrestrict overlap inside std::string for a short
    # literal joined to a temporary ("-" + std::to_string(n)), GCC bug 105329, fixed in 13; at
    # Release it fired in 21 files. Off there only (Debug never optimises, so it cannot fire).
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>,$<NOT:$<CONFIG:Debug>>>:-Wno-restrict>)
  target_link_libraries(kernex_pch_${set} PRIVATE nlohmann_json::nlohmann_json)
  set(headers ${KERNEX_PCH_HEADERS})
  if(set STREQUAL "test")
    # GTest::gmock is imported in tests/ only; its one definition, and its headers in /usr/include.
    target_compile_definitions(kernex_pch_${set} PRIVATE GTEST_HAS_PTHREAD=1)
    list(APPEND headers <gmock/gmock.h> <gtest/gtest.h>)
  elseif(set STREQUAL "pic")
    set_target_properties(kernex_pch_${set} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  elseif(set STREQUAL "plugin")
    set_target_properties(kernex_pch_${set} PROPERTIES POSITION_INDEPENDENT_CODE ON
      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    target_compile_options(kernex_pch_${set} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-fno-gnu-unique>)
  endif()
  target_precompile_headers(kernex_pch_${set} PRIVATE ${headers})
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/KernexAddPlugin.cmake)
