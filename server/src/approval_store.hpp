// serve.db's approvals: each tool call a run asked a person about (pending until decided,
// denied, or expired), keyed by (run_id, key) so a run resumed after kill -9 finds the one it
// asked before; and the per-session "always" grants.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

struct sqlite3;

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
  static Result<std::unique_ptr<ApprovalStore>> open(const std::filesystem::path& file);
  ~ApprovalStore();
  ApprovalStore(const ApprovalStore&) = delete;
  ApprovalStore& operator=(const ApprovalStore&) = delete;

  Result<void> insert(const StoredApproval& approval);
  Result<std::optional<StoredApproval>> by_id(const std::string& id);
  Result<std::optional<StoredApproval>> by_key(const std::string& run_id, const std::string& key);
  // Resolves a pending approval; false when it was no longer pending (someone else won).
  Result<bool> resolve(const StoredApproval& resolved);
  // The tenant's pending approvals in `session`, oldest first.
  Result<std::vector<StoredApproval>> pending(const std::string& tenant,
                                              const std::string& session);
  Result<bool> granted(const std::string& tenant, const std::string& session,
                       const std::string& tool);
  Result<void> grant(const std::string& tenant, const std::string& session,
                     const std::string& tool);
  Result<void> delete_session(const std::string& tenant, const std::string& session);

 private:
  explicit ApprovalStore(sqlite3* db) : db_(db) {}
  Result<std::vector<StoredApproval>> select(const std::string& where,
                                             const std::vector<std::string>& params);
  std::mutex mutex_;
  sqlite3* db_;
};

}  // namespace kernex::server
