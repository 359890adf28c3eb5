// The tables cluster mode keeps beside the runs (cluster_store.hpp) for the webhook outbox
// (cluster_outbox.hpp) and the tenants' daily usage (cluster_limits.hpp). Versioned on their own
// (serve_ops_schema_version), so they migrate apart from the run store's tables.
#pragma once

#include <cstdint>
#include <string>

#include "kernex/error.hpp"
#include "kernex/pg/connection.hpp"

namespace kernex::server {

// Takes the advisory lock `key` that serialises one set of tables' creation among nodes starting
// at once, inside the caller's transaction, waiting as long as startup may: the run path's short
// statement_timeout (a third of the lease) is for runs, and a node whose SELECT of the lock was
// cancelled while a busy neighbour migrated would exit instead of starting.
Result<void> lock_schema(pg::Connection& c, std::int64_t key);

// Applies what is missing, under an advisory lock (nodes starting at once don't race); refuses a
// database whose version is newer than this kernex. Runs inside the caller's transaction.
Result<bool> migrate_cluster_ops(pg::Connection& c);

// A forgotten session's webhook rows, in its delete's transaction: one not delivered yet is still
// sent, as a tombstone with the same id and type whose data is only {run_id, forgotten: true};
// a delivered one has nothing left to do and goes.
Result<void> forget_session_outbox(pg::Connection& c, const std::string& tenant,
                                   const std::string& session);

}  // namespace kernex::server
