# kernex_add_plugin(<target> <output-name> SOURCES...)
# A MODULE library the kernel can load: libkernex-<output-name>.so with hidden visibility,
# installed in KERNEX_PLUGIN_INSTALL_DIR. The one definition, used by this tree (through
# KernexTargets.cmake) and by find_package(kernex) (installed beside kernexConfig.cmake).
function(kernex_add_plugin target output_name)
  add_library(${target} MODULE ${ARGN})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${output_name}
    PREFIX "libkernex-"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH "$ORIGIN/../..")
  target_link_libraries(${target} PRIVATE kernex::kernex)
  # Without this, libstdc++'s STB_GNU_UNIQUE symbols pin the library and dlclose never unloads it.
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-fno-gnu-unique>)
  install(TARGETS ${target} LIBRARY DESTINATION "${KERNEX_PLUGIN_INSTALL_DIR}")
  # Inside this tree: plugins land where the build-tree kernel finds them, build with the house
  # warnings, and are listed for the suites and tools that load them.
  if(COMMAND kernex_warnings)  # defined only in this tree (KernexTargets.cmake)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${KERNEX_PLUGIN_BUILD_DIR})
    kernex_warnings(${target})
    set_property(GLOBAL APPEND PROPERTY KERNEX_PLUGIN_TARGETS ${target})
  endif()
endfunction()
