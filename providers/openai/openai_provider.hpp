#pragma once

#include <memory>
#include <string_view>

#include "kernex/json.hpp"
#include "kernex/provider.hpp"

namespace kernex::providers {

// `plugin_name` is "openai" (which accepts the `preset` option) or a preset's name.
Result<std::shared_ptr<Provider>> make_openai_provider(const Json& config,
                                                       std::string_view plugin_name);

}  // namespace kernex::providers
