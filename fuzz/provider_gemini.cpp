// The gemini provider's response and stream-event parsing (see provider_harness.hpp).
#include "fuzz.hpp"
#include "provider_harness.hpp"

KERNEX_FUZZ_TARGET(provider_gemini) {
  return kernex::fuzz::run_provider("libkernex-provider-gemini.so", "gemini", "text/event-stream",
                                    data, size);
}
