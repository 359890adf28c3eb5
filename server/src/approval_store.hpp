// The approvals of serve's runs: each tool call a run asked a person about (pending until decided,
// denied, or expired), keyed by (run_id, key) so a run resumed after kill -9 finds the one it
// asked before; and the per-session "always" grants. One interface, two stores: serve.db (one
// node, open()) and PostgreSQL (cluster mode, pg_run_stores.hpp), where deciding the last pending
// approval of a run that released its node also queues the run again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::server {

struct StoredApproval {
  std::string id, tenant, session, run_id, key, tool, reason;
  Json arguments;
  std::string status = "pending";  // pending, approved, denied, expired
  std::string decision;            // approve, deny, always once resolved
  std::optional<Json> edited_arguments;
  std::string decision_reason;
  std::int64_t created_at = 0, expires_at = 0, resolved_at = 0;  // unix seconds

  // What the API shows: {approval_id, run_id, session_id, tool, arguments, reason, status,
  // created_at, expires_at, decision?, edited_arguments?, decision_reason?, resolved_at?}.
  Json to_json() const;
};

class ApprovalStore {
 public:
  // serve.db's (one node): its writes ride serve.db's batches (serve_writer.hpp), fsynced before
  // they return (what it records decides whether a tool runs again, even after a power loss).
  static Result<std::unique_ptr<ApprovalStore>> open(const std::filesystem::path& file);
  virtual ~ApprovalStore() = default;

  // The store's clock (unix seconds): expiry is judged on it, so nodes whose clocks disagree
  // agree on when an approval expired.
  virtual Result<std::int64_t> now() = 0;
  // Stores a pending approval; what was stored (the store may set its times on its own clock).
  virtual Result<StoredApproval> insert(const StoredApproval& approval) = 0;
  // Every query names the tenant: another tenant's approval is not found, nor resolved.
  virtual Result<std::optional<StoredApproval>> by_id(const std::string& tenant,
                                                      const std::string& id) = 0;
  virtual Result<std::optional<StoredApproval>> by_key(const std::string& tenant,
                                                       const std::string& run_id,
                                                       const std::string& key) = 0;
  // Resolves a pending approval; false when it was no longer pending (someone else won).
  virtual Result<bool> resolve(const StoredApproval& resolved) = 0;
  // The tenant's pending approvals in `session`, oldest first.
  virtual Result<std::vector<StoredApproval>> pending(const std::string& tenant,
                                                      const std::string& session) = 0;
  virtual Result<bool> granted(const std::string& tenant, const std::string& session,
                               const std::string& tool) = 0;
  virtual Result<void> grant(const std::string& tenant, const std::string& session,
                             const std::string& tool) = 0;
  virtual Result<void> delete_session(const std::string& tenant, const std::string& session) = 0;
};

}  // namespace kernex::server
