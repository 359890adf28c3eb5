// Cluster mode's journals and approvals: the same interfaces as serve.db's, in the PostgreSQL
// database the nodes share (tables of ClusterStore's schema), every query scoped to the tenant.
// A journal is fenced by its run's claim: a node that lost the run starts no tool, and a tool's
// start is a row only one node can insert, so no tool runs twice whichever nodes die when.
// Deciding a run's last pending approval queues the run again (in the same transaction), so
// whichever node is free resumes it; the queue's NOTIFY wakes them.
#pragma once

#include <memory>

#include "approval_store.hpp"
#include "kernex/pg/pool.hpp"
#include "kernex/pg/writer.hpp"
#include "run_journal_store.hpp"

namespace kernex::server {

class PgJournalStore final : public JournalStore {
 public:
  // `writer`: the run path's batches, which the journal's writes join (null: a writer of its own).
  explicit PgJournalStore(pg::Pool& pool, pg::Writer* writer = nullptr)
      : pool_(pool),
        own_(writer ? nullptr : std::make_unique<pg::Writer>(pool)),
        writer_(writer ? writer : own_.get()) {}
  // Unfenced: reads, and writes whoever holds the run. Reads the store even for an `empty` one
  // (a cluster's run may have been claimed elsewhere before).
  std::shared_ptr<RunJournal> journal(const std::string& tenant, const std::string& run_id,
                                      bool empty) override;
  // Writes only while (node, attempt) holds the run.
  std::shared_ptr<RunJournal> journal(const std::string& tenant, const std::string& run_id,
                                      const std::string& node, int attempt);
  Result<void> forget(const std::string& tenant, const std::string& run_id) override;

 private:
  pg::Pool& pool_;
  std::unique_ptr<pg::Writer> own_;
  pg::Writer* writer_;
};

class PgApprovalStore final : public ApprovalStore {
 public:
  // `writer`: the run path's batches, which the approvals' writes join (null: a writer of its
  // own).
  explicit PgApprovalStore(pg::Pool& pool, pg::Writer* writer = nullptr)
      : pool_(pool),
        own_(writer ? nullptr : std::make_unique<pg::Writer>(pool)),
        writer_(writer ? writer : own_.get()) {}
  Result<std::int64_t> now() override;
#include "approval_store_overrides.inc"

 private:
  Result<std::vector<StoredApproval>> select(const std::string& where,
                                             const std::vector<pg::Param>& params);
  pg::Pool& pool_;
  std::unique_ptr<pg::Writer> own_;
  pg::Writer* writer_;
};

}  // namespace kernex::server
