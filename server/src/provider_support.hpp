// Which OpenAI generation fields each provider plugin sends to its model (the plugins' own
// mappings: providers/*/apply_generation), for /v1/models and the README's table. A field a
// provider does not support is accepted and not sent; response_format is then checked by the
// kernel (valijson) and the model asked again within the run's turns.
#pragma once

#include <string>

#include "kernex/json.hpp"

namespace kernex::server {

// {"provider", "generation": {"supported": [...], "not_sent": [...]}, "response_format":
// "native" | "kernel_checked"}
Json generation_support_json(const std::string& provider);

}  // namespace kernex::server
