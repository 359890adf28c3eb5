#pragma once

#include <nlohmann/json.hpp>

namespace kernex {
// nlohmann::json keeps object keys sorted (std::map), which matches kernex's serde_json
// BTreeMap ordering that permission matching depends on.
using Json = nlohmann::json;
}  // namespace kernex
