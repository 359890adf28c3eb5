# Unity builds (KERNEX_UNITY): each product target compiles its sources in batches, one
# translation unit per batch, so the headers every file includes (the standard library,
# nlohmann/json, Boost) are parsed once per batch, and the inline functions and templates they
# all use are optimised and emitted once per batch instead of once per file (a kernel batch of
# 8 files: 41 s of CPU against 68 s file by file at -O2). On in the demo's tree (scripts/demo),
# whose build is all a new user waits for: every batch builds with g++ 12 and -Werror; never for
# a tree you iterate in: a changed file recompiles its whole batch, and a batch can hide a missing
# #include from the files after it.
# The suites and benchmarks are never batched (cmake turns it off before tests/ and bench/).
option(KERNEX_UNITY "Compile the product's sources in unity batches" OFF)
set(KERNEX_UNITY_BATCH_SIZE 8 CACHE STRING "Sources per unity batch (KERNEX_UNITY)")
if(KERNEX_UNITY)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${KERNEX_UNITY_BATCH_SIZE})
  # In a batch every .cpp is an included file, so g++ reports a class of one .cpp that uses a
  # type of its anonymous namespace as if it were in a header (-Wsubobject-linkage); alone, the
  # same file is fine.
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
endif()

# Files compiled alone: toml_tree.cpp includes toml++ with NDEBUG undefined and its own assert
# macros, meant for that file only. Every other source shares its batch: helpers in anonymous
# namespaces have names of their own in each target (each target's sources compile as one
# translation unit, checked for every product target, so any batch size works). Paths from the
# top of the tree.
set(KERNEX_UNITY_ALONE skills/src/toml_tree.cpp)

# kernex_unity_exclusions(): marks KERNEX_UNITY_ALONE, once every directory is known (a source
# property belongs to the directory whose target compiles the file).
function(kernex_unity_exclusions)
  if(NOT KERNEX_UNITY)
    return()
  endif()
  foreach(file IN LISTS KERNEX_UNITY_ALONE)
    get_filename_component(dir ${file} DIRECTORY)
    # A file in a target's src/ or detail folder belongs to the target of the directory above.
    while(NOT EXISTS ${PROJECT_SOURCE_DIR}/${dir}/CMakeLists.txt)
      get_filename_component(dir ${dir} DIRECTORY)
    endwhile()
    set_source_files_properties(${PROJECT_SOURCE_DIR}/${file}
      DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endforeach()
endfunction()
