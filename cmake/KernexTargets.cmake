# Helpers shared by every directory: warnings on our own code, plugin modules, tests.

# -Werror only where the compiler is the one the house tests with (scripts/test and CI turn it
# on): a newer or older compiler's new warning must not stop someone else's build (LLVM and
# abseil do the same).
option(KERNEX_WERROR "Treat compiler warnings as errors (on in scripts/test and CI)" OFF)
# Precompiled headers measured little at -O2 (g++ 12: cli/memory_command.cpp 20.2 s of CPU without,
# 19.8 s with; the header costs 5.7 s per target): code generation, not parsing, is the time. Off
# by default; kept as a switch for -O0 builds, where parsing weighs more.
option(KERNEX_PCH "Precompile the heavy common headers (nlohmann/json, the standard library)" OFF)

# The house defaults for a target of ours: warnings and the precompiled header.
function(kernex_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra $<$<BOOL:${KERNEX_WERROR}>:-Werror>
    # libseccomp's SCMP_A0()... macros leave a field to zero-initialisation, which clang (the fuzz
    # build), unlike gcc, reports under -Wextra.
    $<$<CXX_COMPILER_ID:Clang>:-Wno-missing-field-initializers>)
  if(KERNEX_PCH)
    target_precompile_headers(${target} PRIVATE
      <algorithm> <chrono> <filesystem> <functional> <map> <memory> <optional> <string>
      <string_view> <vector> <nlohmann/json.hpp>)
  endif()
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/KernexAddPlugin.cmake)
