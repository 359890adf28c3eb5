// One fuzz target per file: KERNEX_FUZZ_TARGET(name) { ...body using data, size... }.
// In the fuzz build (clang, -DKERNEX_FUZZ=ON) the body is libFuzzer's LLVMFuzzerTestOneInput; in
// the test build the same body is registered by name, and the FuzzRegressions suite replays every
// committed input (fuzz/corpus/<name>, fuzz/regressions/<name>) through it under ASan + UBSan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kernex::fuzz {

using Target = int (*)(const std::uint8_t* data, std::size_t size);

// Registers a target for the replay suite; returns true so it can initialise a static.
bool register_target(std::string_view name, Target target);

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace kernex::fuzz

#ifdef KERNEX_LIBFUZZER
#define KERNEX_FUZZ_ENTRY(name, fn)                                                   \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    return fn(data, size);                                                            \
  }
#else
#define KERNEX_FUZZ_ENTRY(name, fn)                                  \
  [[maybe_unused]] static const bool kernex_fuzz_registered_##name = \
      ::kernex::fuzz::register_target(#name, &fn);
#endif

#define KERNEX_FUZZ_TARGET(name)                                             \
  static int kernex_fuzz_##name(const std::uint8_t* data, std::size_t size); \
  KERNEX_FUZZ_ENTRY(name, kernex_fuzz_##name)                                \
  static int kernex_fuzz_##name([[maybe_unused]] const std::uint8_t* data,   \
                                [[maybe_unused]] std::size_t size)
