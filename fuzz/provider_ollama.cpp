// The ollama provider's response and stream-event parsing (see provider_harness.hpp).
#include "fuzz.hpp"
#include "provider_harness.hpp"

KERNEX_FUZZ_TARGET(provider_ollama) {
  return kernex::fuzz::run_provider("libkernex-provider-ollama.so", "ollama",
                                    "application/x-ndjson", data, size);
}
