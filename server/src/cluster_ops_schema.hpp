// The tables cluster mode keeps beside the runs (cluster_store.hpp) for the webhook outbox
// (cluster_outbox.hpp) and the tenants' daily usage (cluster_limits.hpp). Versioned on their own
// (serve_ops_schema_version), so they migrate apart from the run store's tables.
#pragma once

#include <string>

#include "kernex/error.hpp"
#include "kernex/pg/connection.hpp"

namespace kernex::server {

// Applies what is missing, under an advisory lock (nodes starting at once don't race); refuses a
// database whose version is newer than this kernex. Runs inside the caller's transaction.
Result<bool> migrate_cluster_ops(pg::Connection& c);

// A forgotten session's webhook rows, in its delete's transaction: one not delivered yet is still
// sent, as a tombstone with the same id and type whose data is only {run_id, forgotten: true};
// a delivered one has nothing left to do and goes.
Result<void> forget_session_outbox(pg::Connection& c, const std::string& tenant,
                                   const std::string& session);

}  // namespace kernex::server
