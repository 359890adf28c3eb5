// What cluster mode adds to ClusterStore's own transactions, from outside the run store: the
// webhook outbox (cluster_outbox.hpp) writes its events in the run end's transaction, and the
// tenant limits (cluster_limits.hpp) decide inside submit's, so neither can be torn from the row
// it belongs to by a crash, and no two nodes admit past a limit at once.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/pg/connection.hpp"
#include "run_state.hpp"

namespace kernex::server {

// Why a run was not admitted: a 429 with Retry-After.
struct LimitRefusal {
  std::string message;
  std::chrono::seconds retry_after{1};
};

struct ClusterHooks {
  // In the transaction that stores a run's end (its executor's finish, a queued run cancelled, a
  // lost run failed); an error rolls the end back.
  std::function<Result<void>(pg::Connection&, const std::string& run_id, RunStatus status,
                             const Json& result)>
      run_end;
  std::function<void()> after_run_end;  // once such an end committed on this node
  // In submit's transaction, before the run's row: a refusal keeps the run out.
  std::function<Result<std::optional<LimitRefusal>>(pg::Connection&, const std::string& tenant)>
      admit;
};

}  // namespace kernex::server
