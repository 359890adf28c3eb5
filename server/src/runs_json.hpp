// A session's stored runs as the API lists them, for both Runs (RunManager, ClusterRuns).
#pragma once

#include <expected>
#include <utility>

#include "api_error.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::server {

// {"runs": [show(row)...]} over the rows the store found; a store error is a 500.
template <class Rows, class Show>
std::expected<Json, ApiError> runs_json(const Result<Rows>& stored, Show&& show) {
  if (!stored) return std::unexpected(api_error(500, "store_failed", stored.error().describe()));
  Json runs = Json::array();
  for (const auto& row : *stored) runs.push_back(show(row));
  return Json{{"runs", std::move(runs)}};
}

}  // namespace kernex::server
