// The anthropic provider's response and stream-event parsing (see provider_harness.hpp).
#include "fuzz.hpp"
#include "provider_harness.hpp"

KERNEX_FUZZ_TARGET(provider_anthropic) {
  return kernex::fuzz::run_provider("libkernex-provider-anthropic.so", "anthropic",
                                    "text/event-stream", data, size);
}
