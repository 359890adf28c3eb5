// The openai provider's response and stream-event parsing (see provider_harness.hpp).
#include "fuzz.hpp"
#include "provider_harness.hpp"

KERNEX_FUZZ_TARGET(provider_openai) {
  return kernex::fuzz::run_provider("libkernex-provider-openai.so", "openai", "text/event-stream",
                                    data, size);
}
