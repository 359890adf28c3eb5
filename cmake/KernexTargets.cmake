# Helpers shared by every directory: warnings on our own code, plugin modules, tests.

function(kernex_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/KernexAddPlugin.cmake)
