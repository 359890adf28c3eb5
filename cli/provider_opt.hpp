// --provider-opt KEY=VALUE: VALUE is JSON when it parses as JSON (42, 0.5, true, null,
// "quoted", [..], {..}), else the plain string.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::cli {

inline Result<std::pair<std::string, Json>> parse_provider_opt(std::string_view arg) {
  const auto eq = arg.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return fail(ErrorCode::Usage,
                "--provider-opt expects KEY=VALUE, got `" + std::string(arg) + "`");
  std::string key(arg.substr(0, eq));
  std::string_view raw = arg.substr(eq + 1);
  Json value = Json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = std::string(raw);
  return std::pair{std::move(key), std::move(value)};
}

}  // namespace kernex::cli
