// One plugin per name: this file is built once for `openai` and once per preset, each with
// KERNEX_OPENAI_PLUGIN set to its name, over the shared kernex_openai library.
#include "kernex/plugin.hpp"
#include "openai_provider.hpp"

#ifndef KERNEX_OPENAI_PLUGIN
#error "KERNEX_OPENAI_PLUGIN must name the plugin"
#endif

namespace {
kernex::Result<std::shared_ptr<kernex::Provider>> make(const kernex::Json& config) {
  return kernex::providers::make_openai_provider(config, KERNEX_OPENAI_PLUGIN);
}
}  // namespace

KERNEX_PLUGIN(Provider, KERNEX_OPENAI_PLUGIN, "1.0.0",
              "OpenAI-compatible Chat Completions (" KERNEX_OPENAI_PLUGIN
              "): tools, streaming, cached-token usage",
              make)
