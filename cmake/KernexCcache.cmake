# ccache when present: the compiler launcher unless the configure named one
# (-DKERNEX_CCACHE=OFF leaves it out).
find_program(KERNEX_CCACHE_PROGRAM ccache)
option(KERNEX_CCACHE "Compile through ccache when it is installed" ON)
if(KERNEX_CCACHE AND KERNEX_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${KERNEX_CCACHE_PROGRAM})
endif()
# ccache caches a compile that uses a precompiled header only when told that the header's
# macros and timestamps may be trusted (ccache manual, "Precompiled headers").
if(KERNEX_PCH AND CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache$")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
    "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
    ${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
