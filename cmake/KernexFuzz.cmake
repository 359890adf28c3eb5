# The fuzz build (-DKERNEX_FUZZ=ON, see fuzz/README.md): the production libraries compiled by
# clang with libFuzzer's coverage, ASan and UBSan, so a harness calls the real parsers.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "KERNEX_FUZZ needs clang (Debian: clang-16 libfuzzer-16-dev); "
    "configure with -DCMAKE_CXX_COMPILER=clang++-16, or use scripts/fuzz")
endif()
set(KERNEX_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(KERNEX_BUILD_BENCH OFF CACHE BOOL "" FORCE)
# libstdc++ 12 offers std::expected only when __cpp_concepts says C++20 concepts are complete;
# clang 16 implements what <expected> uses but still reports the older value.
add_compile_options(-U__cpp_concepts -D__cpp_concepts=202002L)
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
  -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
