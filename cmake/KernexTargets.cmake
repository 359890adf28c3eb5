# Helpers shared by every directory: warnings on our own code, plugin modules, tests.

function(kernex_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror
    # libseccomp's SCMP_A0()... macros leave a field to zero-initialisation, which clang (the fuzz
    # build), unlike gcc, reports under -Wextra.
    $<$<CXX_COMPILER_ID:Clang>:-Wno-missing-field-initializers>)
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/KernexAddPlugin.cmake)
