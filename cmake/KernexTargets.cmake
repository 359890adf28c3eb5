# Helpers shared by every directory: warnings on our own code, plugin modules, tests.

function(kernex_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()

# kernex_add_plugin(<target> <output-name> SOURCES...)
# A MODULE library with hidden visibility, placed where the kernel discovers plugins.
function(kernex_add_plugin target output_name)
  add_library(${target} MODULE ${ARGN})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${output_name}
    PREFIX "libkernex-"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${KERNEX_PLUGIN_BUILD_DIR}
    INSTALL_RPATH "$ORIGIN/../..")
  target_link_libraries(${target} PRIVATE kernex::kernex)
  # Without this, libstdc++'s STB_GNU_UNIQUE symbols pin the library and dlclose never unloads it.
  target_compile_options(${target} PRIVATE -fno-gnu-unique)
  kernex_warnings(${target})
  install(TARGETS ${target} LIBRARY DESTINATION ${KERNEX_PLUGIN_INSTALL_DIR})
  set_property(GLOBAL APPEND PROPERTY KERNEX_PLUGIN_TARGETS ${target})
endfunction()
